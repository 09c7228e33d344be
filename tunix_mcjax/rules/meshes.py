# Copyright 2026 The tunix_mcjax Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     https://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""The trainer mesh: fsdp over every device, or hsdp (data across hosts, fsdp
within), chosen from the model's widths before any host starts; and the
check of a config's actor mesh against the hosts (`mesh_layout`).

Imports no JAX: `choose_mesh` runs in the process that launches the hosts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import dataclasses
import itertools
import math
from typing import Any

from tunix_mcjax.rules.problem import Problem

# `--mesh` values: "auto" picks fsdp when it divides the model, else hsdp.
MESH_KINDS = ("auto", "fsdp", "hsdp")
# Axis names of each mesh kind (runtime.global_mesh builds them). hsdp's
# "data" axis runs across hosts (MaxText's dcn_data_parallelism, PyTorch's
# HSDP replica groups); "fsdp" and "tp" stay within a host.
DATA_AXIS = "data"
MESH_AXIS_NAMES = {"fsdp": ("fsdp", "tp"), "hsdp": (DATA_AXIS, "fsdp", "tp")}
# The batch axes (training_config.data_sharding_axis) of each kind.
BATCH_AXES = {"fsdp": ("fsdp",), "hsdp": (DATA_AXIS, "fsdp")}
# Model widths Tunix's default Qwen3 ShardingConfig splits over each axis
# (qwen3 model.py ShardingConfig.get_default_sharding: weights' embed dim
# over "fsdp"; heads, MLP width, norms and vocab over "tp").
FSDP_DIMS = ("embed_dim",)
TP_DIMS = ("num_heads", "num_kv_heads", "hidden_dim", "embed_dim",
           "vocab_size")


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeshChoice:
  """The trainer mesh a job runs on.

  Attributes:
    kind: "fsdp" (one fsdp axis over every device) or "hsdp" (data across
      hosts x fsdp within a host).
    shape: The global mesh shape, one entry per axis name.
    axis_names: `MESH_AXIS_NAMES[kind]`.
    batch_axes: The mesh axes the batch is split over.
    reason: Why "auto" chose hsdp; None otherwise.
  """

  kind: str
  shape: tuple[int, ...]
  axis_names: tuple[str, ...]
  batch_axes: tuple[str, ...]
  reason: str | None = None

  def __post_init__(self):
    if self.kind not in MESH_AXIS_NAMES:
      raise ValueError(f"kind must be 'fsdp' or 'hsdp', got {self.kind!r}.")
    if len(self.shape) != len(self.axis_names):
      raise ValueError(f"shape {self.shape} does not fit {self.axis_names}.")

  def describe(self) -> str:
    return f"{self.kind} mesh " + " x ".join(
        f"{n}={s}" for n, s in zip(self.axis_names, self.shape))


def _mesh_of(kind: str, num_hosts: int, devices_per_host: int,
             tp: int) -> MeshChoice:
  if kind == "fsdp":
    shape = (num_hosts * devices_per_host // tp, tp)
  else:
    shape = (num_hosts, devices_per_host // tp, tp)
  return MeshChoice(kind=kind, shape=shape, axis_names=MESH_AXIS_NAMES[kind],
                    batch_axes=BATCH_AXES[kind])


def _indivisible(dims: Mapping[str, int], mesh: MeshChoice) -> str | None:
  """The first model width the mesh cannot split evenly, as a phrase."""
  sizes = dict(zip(mesh.axis_names, mesh.shape))
  for axis, names in (("fsdp", FSDP_DIMS), ("tp", TP_DIMS)):
    for name in names:
      value = dims.get(name)
      if value is not None and value % sizes[axis]:
        return (f"{name}={value} does not divide over the {sizes[axis]}"
                f" devices of the {axis!r} axis ({mesh.describe()})")
  return None


def choose_mesh(
    dims: Mapping[str, int],
    *,
    num_hosts: int,
    devices_per_host: int,
    tp: int = 1,
    mesh: str = "auto",
) -> tuple[MeshChoice | None, Problem | None]:
  """The trainer mesh for a model; needs no devices (call before hosts start).

  Args:
    dims: The model's widths by ModelConfig name (embed_dim, hidden_dim,
      num_heads, num_kv_heads, vocab_size); missing ones are not checked.
    num_hosts: Hosts in the job.
    devices_per_host: Devices per host.
    tp: Tensor-parallel size (within a host).
    mesh: "fsdp", "hsdp" or "auto" (fsdp if it divides the model, else hsdp).

  Returns:
    (the mesh, None), or (None, the problem: the width that does not divide
    and a mesh that works, where one exists).
  """
  if mesh not in MESH_KINDS:
    return None, Problem(message=f"mesh={mesh!r} must be one of {MESH_KINDS}.")
  if num_hosts < 1 or devices_per_host < 1:
    return None, Problem(
        message=f"num_hosts={num_hosts} and devices_per_host="
        f"{devices_per_host} must be >= 1.")
  if tp < 1 or devices_per_host % tp:
    return None, Problem(
        message=f"tp={tp} must divide the {devices_per_host} devices of a"
        " host (a tp group may not span hosts).")
  kinds = ("fsdp", "hsdp") if mesh == "auto" else (mesh,)
  first_error = None
  for kind in kinds:
    candidate = _mesh_of(kind, num_hosts, devices_per_host, tp)
    error = _indivisible(dims, candidate)
    if error is None:
      if mesh == "auto" and kind == "hsdp":
        candidate = dataclasses.replace(
            candidate, reason=f"plain fsdp fails: {first_error}; hsdp keeps"
            " parameters sharded within a host and replicated across hosts")
      return candidate, None
    first_error = first_error or error
  # Suggest a mesh that works: either kind, any tp dividing a host.
  for kind in ("fsdp", "hsdp"):
    for other_tp in range(1, devices_per_host + 1):
      if devices_per_host % other_tp:
        continue
      candidate = _mesh_of(kind, num_hosts, devices_per_host, other_tp)
      if _indivisible(dims, candidate) is None:
        flag = f"--mesh={kind}" + (f" with tp={other_tp}" if other_tp != tp
                                   else "")
        return None, Problem(
            message=f"mesh={mesh!r} cannot shard this model: {first_error}."
            f" Use {flag} ({candidate.describe()}).")
  return None, Problem(
      message=f"mesh={mesh!r} cannot shard this model: {first_error}; no"
      f" fsdp/hsdp mesh of {num_hosts} hosts x {devices_per_host} devices"
      " divides it. Use a devices_per_host that divides the model's widths"
      f" ({', '.join(f'{k}={v}' for k, v in sorted(dims.items()))}).")


# Hugging Face config.json keys of the widths `choose_mesh` checks.
HF_DIM_KEYS = dict(embed_dim="hidden_size", hidden_dim="intermediate_size",
                   num_heads="num_attention_heads",
                   num_kv_heads="num_key_value_heads", vocab_size="vocab_size")


def hf_model_dims(hf_config: Mapping[str, Any]) -> dict[str, int]:
  """The widths of a Hugging Face Qwen3 `config.json` (present ones only)."""
  return {k: int(hf_config[v]) for k, v in HF_DIM_KEYS.items()
          if hf_config.get(v)}


def config_mesh(
    shape: Sequence[int],
    axis_names: Sequence[str] | None,
    *,
    mesh: str,
    num_hosts: int,
    devices_per_host: int,
    dims: Mapping[str, int],
) -> tuple[MeshChoice | None, Problem | None]:
  """The global mesh of a Tunix config's actor mesh and the CLI's --mesh.

  A 2-axis `actor_model_config.mesh.shape` (fsdp, tp) gives the tp size; the
  kind is `mesh` ("auto": fsdp when it divides `dims`, else hsdp, as
  `choose_mesh`). A 3-axis shape (data, fsdp, tp) is hsdp already; --mesh=fsdp
  contradicts it. Needs no devices: the CLI checks it before any host starts.

  Args:
    shape: `actor_model_config.mesh.shape` (its size already checked against
      the job by `rules.mesh_layout`).
    axis_names: Its axis names; None: the kind's defaults.
    mesh: "auto", "fsdp" or "hsdp".
    num_hosts: Hosts in the job.
    devices_per_host: Devices per host.
    dims: The model's widths (`hf_model_dims`); {} when unknown, in which
      case "auto" keeps the config's kind.

  Returns:
    (the mesh, None) or (None, the problem, naming a mesh that works).
  """
  shape = tuple(shape)
  where = f"actor_model_config.mesh.shape={shape}"
  if len(shape) == 3:
    if mesh == "fsdp":
      return None, Problem(
          message=f"--mesh=fsdp but {where} is a 3-axis (data, fsdp, tp) hsdp"
          " mesh; use --mesh=hsdp (or auto), or a 2-axis (fsdp, tp) shape.")
    mesh = "hsdp"
  elif len(shape) != 2:
    return None, Problem(
        message=f"{where}: give a 2-axis (fsdp, tp) or a 3-axis (data, fsdp,"
        " tp) mesh.")
  choice, problem = choose_mesh(dims, num_hosts=num_hosts,
                                devices_per_host=devices_per_host,
                                tp=shape[-1], mesh=mesh)
  if problem is not None:
    return None, dataclasses.replace(
        problem, message=f"{where}: {problem.message}")
  if axis_names is not None and len(axis_names) == len(choice.shape):
    names = tuple(axis_names)
  elif axis_names is not None and choice.kind == "hsdp":
    names = (DATA_AXIS, *axis_names)  # (fsdp, tp) names + hosts' data axis.
  else:
    names = choice.axis_names
  return dataclasses.replace(
      choice, axis_names=names,
      batch_axes=names[:2] if choice.kind == "hsdp" else names[:1]), None


def mesh_layout(
    shape: Sequence[int], *, num_hosts: int, devices_per_host: int | None
) -> tuple[int | None, Problem | None]:
  """The actor mesh as `runtime.global_mesh` builds it, by host.

  (fsdp, tp), or hsdp's (data, fsdp, tp) with data = hosts.

  Args:
    shape: `actor_model_config.mesh.shape`.
    num_hosts: Hosts in the job.
    devices_per_host: Devices per host; None derives it from `shape`.

  Returns:
    (devices per host or None, the problem or None). A tp group may not span
    hosts, so tp must divide a host's devices.
  """
  shape = tuple(shape)
  total = math.prod(shape)
  where = f"actor_model_config.mesh.shape={shape}"
  if len(shape) == 3:
    # hsdp: (data, fsdp, tp) with data = hosts (runtime.global_mesh kind).
    if shape[0] != num_hosts:
      return devices_per_host, Problem(
          message=f"{where}: a 3-axis (data, fsdp, tp) mesh is hsdp and its"
          f" data axis must equal the {num_hosts} hosts; use shape="
          f"'({num_hosts},F,T)' with F x T = the devices of one host.",
      )
    if devices_per_host is None:
      devices_per_host = shape[1] * shape[2]
    if shape[1] * shape[2] != devices_per_host:
      return devices_per_host, Problem(
          message=f"{where}: fsdp x tp = {shape[1] * shape[2]} must equal the"
          f" {devices_per_host} devices of a host.",
      )
    return devices_per_host, None
  if len(shape) != 2:
    return devices_per_host, Problem(
        message=f"{where}: mcjax needs a 2-axis (fsdp, tp) mesh, e.g."
        " shape='(8,1)' axis_names=\"('fsdp','tp')\", or a 3-axis hsdp"
        " (data, fsdp, tp) mesh with data = hosts.",
    )
  if devices_per_host is None:
    if total % num_hosts:
      return None, Problem(
          message=f"{where} has {total} devices, which do not divide over"
          f" {num_hosts} hosts.",
      )
    devices_per_host = total // num_hosts
  if total != num_hosts * devices_per_host:
    return devices_per_host, Problem(
        message=f"{where} has {total} devices but the job has {num_hosts}"
        f" hosts x {devices_per_host} devices ="
        f" {num_hosts * devices_per_host}; make them equal.",
    )
  if devices_per_host % shape[1]:
    return devices_per_host, Problem(
        message=f"{where}: tp={shape[1]} must divide the {devices_per_host}"
        " devices of a host (a tp group may not span hosts).",
    )
  return devices_per_host, None


# --- device order and host blocks (any device objects: no JAX needed) --------


def device_order_key(device: Any) -> tuple[Any, ...]:
  """Hosts outer; within a host, the device's physical position.

  TPU devices carry `coords` (their place in the slice's torus) and
  `core_on_chip`: ordered by those, a host's devices run in the order a
  physical mesh lays them out (as `jax.experimental.mesh_utils` does before
  it reshapes), so collectives along a mesh axis go to neighbours. Devices
  without coordinates (CPU, GPU) keep their id order.
  """
  coords = getattr(device, "coords", None)
  core = getattr(device, "core_on_chip", None)
  physical = (tuple(coords) if coords is not None else (),
              core if core is not None else 0)
  return (device.process_index, physical, device.id)


def topology_order(devices: Sequence[Any]) -> list[Any]:
  """`devices` host by host (process order), physical order within a host."""
  return sorted(devices, key=device_order_key)


def _runs(values: Sequence[int]) -> str:
  """[0, 0, 1, 1, 0] -> "0 x2, 1 x2, 0 x1" (host order along an axis)."""
  return ", ".join(f"{v} x{len(list(run))}"
                   for v, run in itertools.groupby(values))


def host_blocks(devices: Any, axis_names: Sequence[str],
                batch_axes: Sequence[str]) -> Problem | None:
  """Why a mesh cannot carry mcjax's batch, or None if it can.

  Admission puts host h's rows in block h of the batch: the batch axes
  (flattened in `batch_axes` order, as PartitionSpec((a, b)) splits) must
  give each host one contiguous block, hosts in process order, and every
  other axis (tp) must stay within a host. The order of devices within a
  host's block is free, so a topology-ordered mesh (`topology_order`, or a
  user's own `jax.make_mesh` when its host blocks line up) is accepted.

  Args:
    devices: The mesh's device grid (`Mesh.devices`, or nested lists of
      objects with `process_index`).
    axis_names: The mesh's axis names.
    batch_axes: The axes the batch's leading dimension is split over.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top

  grid = np.asarray(devices, dtype=object)
  names = list(axis_names)
  missing = [a for a in batch_axes if a not in names]
  if missing or not batch_axes:
    return Problem(message=f"the batch axes {tuple(batch_axes)} are not axes"
                   f" of the mesh {tuple(names)}.")
  front = np.moveaxis(grid, [names.index(a) for a in batch_axes],
                      list(range(len(batch_axes))))
  blocks = front.reshape(math.prod(front.shape[:len(batch_axes)]), -1)
  fix = ("Build the mesh with tunix_mcjax.runtime.global_mesh() (hosts"
         " outer, physical order within a host), or order its devices host"
         f" by host along {tuple(batch_axes)}.")
  owners = []
  for index, block in enumerate(blocks):
    hosts = sorted({d.process_index for d in block})
    if len(hosts) > 1:
      return Problem(
          message=f"the mesh {tuple(names)} puts devices of hosts {hosts} at"
          f" batch index {index} of {tuple(batch_axes)} (an axis outside the"
          f" batch would span hosts). {fix}")
    owners.append(hosts[0])
  processes = sorted({d.process_index for d in grid.flat})
  per_host, rest = divmod(len(owners), len(processes))
  expected = [p for p in processes for _ in range(per_host)]
  if rest or owners != expected:
    return Problem(
        message=f"the mesh {tuple(names)} does not give each host one"
        f" contiguous block of its batch axes {tuple(batch_axes)}, hosts in"
        f" process order: along them the hosts run {_runs(owners)}"
        " (admission puts host h's rows in block h). " + fix)
  return None
