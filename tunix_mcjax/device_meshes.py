# Copyright 2026 The tunix_mcjax Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""Host-aware meshes: devices host by host, physical order within a host.

`global_mesh` spans every device of every host so that a contiguous block of
its first axis belongs to one host (its grid: `device_grid`, a pure function
over device objects); `local_mesh` is one host's own (the publication's host
view, `publication.host_view_mesh`, lays every host's block out like it).
Device order: `rules.meshes.topology_order`, and on TPU
`jax.experimental.mesh_utils` within a host. `runtime` re-exports these
names. Importing this module does not import jax.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
  import jax
  from jax.sharding import Mesh
  import numpy as np

HOST_AXIS = "host"
_DEFAULT_AXIS_NAMES = ("fsdp", "tp")
# Hybrid sharding: data parallel across hosts, fsdp (and tp) within a host.
_HSDP_AXIS_NAMES = ("data", "fsdp", "tp")


def _check_axis_names(
    axis_names: Sequence[str], count: int = 2
) -> tuple[str, ...]:
  names = tuple(axis_names)
  if len(names) != count or len(set(names)) != count:
    example = _HSDP_AXIS_NAMES if count == 3 else _DEFAULT_AXIS_NAMES
    raise ValueError(
        f"axis_names={names!r} must be {count} distinct names, e.g."
        f" {example!r}."
    )
  if HOST_AXIS in names:
    raise ValueError(
        f"axis_names={names!r} may not use {HOST_AXIS!r}: publication's host"
        " view adds that axis."
    )
  return names


def _check_tp(tp: int, devices_per_host: int) -> None:
  if (not isinstance(tp, int) or isinstance(tp, bool) or tp < 1
      or devices_per_host % tp):
    choices = [
        d for d in range(1, devices_per_host + 1) if devices_per_host % d == 0
    ]
    raise ValueError(
        f"tp={tp!r} must divide the number of devices per host"
        f" ({devices_per_host}) so that a tp group never spans two hosts;"
        f" use one of {choices}."
    )


def host_contiguous_devices() -> list[jax.Device]:
  """All devices of all hosts, host by host (process order), in physical
  order within a host (TPU coordinates; id order on CPU and GPU).

  The order of `local_mesh` and publication's host view; `global_mesh` may
  order a TPU host's devices differently (`device_grid`).
  """
  import jax  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.rules import meshes  # pylint: disable=g-import-not-at-top
  return meshes.topology_order(jax.devices())


def global_mesh(
    *,
    tp: int = 1,
    axis_names: Sequence[str] | None = None,
    kind: Literal["fsdp", "hsdp"] = "fsdp",
) -> Mesh:
  """A (fsdp, tp) or (data, fsdp, tp) mesh over every device of every host.

  Devices run host by host (`device_grid`: hosts outer, physical order
  within a host), so with kind="fsdp" host h owns fsdp rows
  [h * per_host / tp, (h + 1) * per_host / tp). kind="hsdp" (hybrid
  sharding) puts the hosts on a leading data-parallel axis: host h is
  data row h, and parameters sharded over "fsdp" are split within a host
  and replicated across hosts (rules.choose_mesh picks the kind).

  Args:
    tp: Size of the last axis; must divide the devices per host.
    axis_names: Names of the axes; None: ("fsdp", "tp") or
      ("data", "fsdp", "tp").
    kind: "fsdp" or "hsdp".

  Returns:
    A mesh of shape (device_count // tp, tp) or (hosts, per_host // tp, tp).
  """
  import jax  # pylint: disable=g-import-not-at-top
  from jax.sharding import Mesh  # pylint: disable=g-import-not-at-top
  if kind not in ("fsdp", "hsdp"):
    raise ValueError(f"kind must be 'fsdp' or 'hsdp', got {kind!r}.")
  if axis_names is None:
    axis_names = _HSDP_AXIS_NAMES if kind == "hsdp" else _DEFAULT_AXIS_NAMES
  names = _check_axis_names(axis_names, 3 if kind == "hsdp" else 2)
  return Mesh(device_grid(jax.devices(), tp=tp, kind=kind), names)


def _on_tpu(devices: Sequence[Any]) -> bool:
  return all(getattr(d, "platform", None) == "tpu"
             and getattr(d, "coords", None) is not None for d in devices)


def device_grid(
    devices: Sequence[Any],
    *,
    tp: int = 1,
    kind: Literal["fsdp", "hsdp"] = "fsdp",
) -> np.ndarray:
  """`global_mesh`'s device grid over `devices`; pure (no backend used).

  Hosts are the outer axis, in process order, so host h owns block h of the
  first axis. Within a host, TPU devices (platform "tpu" with `coords`) are
  laid out by `mesh_utils.create_hybrid_device_mesh` with processes as
  granules: JAX's own rings and torus-axis assignment for the host's
  (fsdp, tp) block. Other devices (CPU, GPU; or a TPU layout mesh_utils
  cannot build) run in `rules.meshes.topology_order`: by coordinates
  where present, else by id.

  Args:
    devices: Every device of every host: objects with `id` and
      `process_index` (and `platform`, `device_kind`, `coords`,
      `core_on_chip` where the device has them), e.g. `jax.devices()`.
    tp: Size of the last axis; must divide the devices per host.
    kind: "fsdp": shape (devices // tp, tp); "hsdp": (hosts, per_host // tp,
      tp).

  Returns:
    An object array of the devices in that shape.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.rules import meshes  # pylint: disable=g-import-not-at-top
  if kind not in ("fsdp", "hsdp"):
    raise ValueError(f"kind must be 'fsdp' or 'hsdp', got {kind!r}.")
  ordered = meshes.topology_order(devices)
  per_host = collections.Counter(d.process_index for d in ordered)
  if len(set(per_host.values())) != 1:
    raise ValueError(
        f"hosts have different device counts {dict(per_host)}; start every"
        " host with the same number of devices."
    )
  hosts, count = len(per_host), next(iter(per_host.values()))
  _check_tp(tp, count)
  local, dcn = (count // tp, tp), (hosts, 1)
  if kind == "hsdp":
    local, dcn = (1, *local), (hosts, 1, 1)
  if _on_tpu(ordered):
    # pylint: disable-next=g-import-not-at-top
    from jax.experimental import mesh_utils
    try:
      return mesh_utils.create_hybrid_device_mesh(
          local, dcn, ordered, process_is_granule=True)
    except (AssertionError, NotImplementedError, ValueError):
      # mesh_utils refuses some layouts (a host's chips not a full cuboid,
      # two cores per chip on some kinds); the coordinate order still puts
      # hosts outer and neighbours next to each other.
      pass
  shape = tuple(inner * outer for inner, outer in zip(local, dcn))
  return np.array(ordered, dtype=object).reshape(shape)


def local_mesh(
    *, axis_names: Sequence[str] = _DEFAULT_AXIS_NAMES, tp: int = 1
) -> Mesh:
  """A (fsdp, tp) mesh over this host's devices only, for host-local work.

  Three axis names (an hsdp mesh's) give (1, per_host // tp, tp): the data
  axis has one entry on a single host, so specs naming it still resolve.
  """
  import jax  # pylint: disable=g-import-not-at-top
  from jax.sharding import Mesh  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.rules import meshes  # pylint: disable=g-import-not-at-top
  names = _check_axis_names(axis_names, 3 if len(axis_names) == 3 else 2)
  devices = meshes.topology_order(jax.local_devices())
  _check_tp(tp, len(devices))
  grid = np.array(devices, dtype=object).reshape(len(devices) // tp, tp)
  if len(names) == 3:
    grid = grid[None]
  return Mesh(grid, names)
