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

"""The trainer mesh's device grid (tunix_mcjax.device_meshes.device_grid).

`device_grid` and `rules.host_blocks` are pure functions over device
objects; the stand-ins below carry what a jax.Device carries (id, process
index, platform, kind, torus coordinates, core on chip), so TPU layouts are
tested without a TPU and without mocking JAX. The user meshes come from
`mesh_utils.create_device_mesh`, which is what `jax.make_mesh` calls.
"""

from __future__ import annotations

import dataclasses

from jax.experimental import mesh_utils
import numpy as np
import pytest

from tunix_mcjax import device_meshes
from tunix_mcjax import rules


@dataclasses.dataclass(frozen=True)
class Device:
  """A stand-in for a jax.Device (these functions take any such object)."""

  id: int
  process_index: int
  coords: tuple[int, int, int] | None = None
  core_on_chip: int = 0
  platform: str = "tpu"
  device_kind: str = "TPU v4"


def _slice_4x2(host_of, kind="TPU v4"):
  """A 4x2 slice of 8 chips whose ids run x-minor over the whole slice (as
  a TPU runtime numbers them), so neither host's ids are in physical order
  along its block; `host_of(x, y)` is the chip's process."""
  return [Device(id=y * 4 + x, process_index=host_of(x, y), coords=(x, y, 0),
                 device_kind=kind)
          for y in range(2) for x in range(4)]


def _two_hosts_by_x(kind="TPU v4"):
  # Host 0: x in 0..1, host 1: x in 2..3 (a 2x2 block of chips each).
  return _slice_4x2(lambda x, y: x // 2, kind)


def _two_hosts_by_y():
  # Host 0: row y=0, host 1: row y=1.
  return _slice_4x2(lambda x, y: y)


def test_tpu_grid_has_hosts_outer_and_physical_order_within():
  chips = _two_hosts_by_x()
  grid = device_meshes.device_grid(list(reversed(chips)))
  assert grid.shape == (8, 1)
  assert [d.process_index for d in grid.flat] == [0] * 4 + [1] * 4
  # By position (x, then y), not by id: host 0 is 0, 4, 1, 5.
  assert [d.coords[:2] for d in grid.flat[:4]] == [(0, 0), (0, 1), (1, 0),
                                                    (1, 1)]
  assert [d.id for d in grid.flat] == [0, 4, 1, 5, 2, 6, 3, 7]
  assert rules.host_blocks(grid, ("fsdp", "tp"), ("fsdp",)) is None


@pytest.mark.parametrize("kind", ["TPU v4", "TPU v5 lite", "TPU v5p"])
@pytest.mark.parametrize("tp,mesh_kind", [(1, "fsdp"), (2, "fsdp"),
                                          (2, "hsdp")])
def test_tpu_grid_is_mesh_utils_hybrid_mesh_over_processes(kind, tp,
                                                            mesh_kind):
  chips = _two_hosts_by_x(kind)
  grid = device_meshes.device_grid(chips, tp=tp, kind=mesh_kind)
  local, dcn = (4 // tp, tp), (2, 1)
  if mesh_kind == "hsdp":
    local, dcn = (1, *local), (2, 1, 1)
  expected = mesh_utils.create_hybrid_device_mesh(
      local, dcn, chips, process_is_granule=True)
  assert [d.id for d in grid.flat] == [d.id for d in expected.flat]
  assert grid.shape == expected.shape
  batch = ("data", "fsdp") if mesh_kind == "hsdp" else ("fsdp",)
  names = ("data", "fsdp", "tp") if mesh_kind == "hsdp" else ("fsdp", "tp")
  assert rules.host_blocks(grid, names, batch) is None


def test_tpu_layout_mesh_utils_refuses_falls_back_to_coordinate_order():
  # Two cores per chip on a kind mesh_utils lays out one core per chip.
  cores = [Device(id=i, process_index=i // 4, coords=(i // 2, 0, 0),
                  core_on_chip=1 - i % 2) for i in range(8)]
  grid = device_meshes.device_grid(cores)
  assert [(d.process_index, d.coords[0], d.core_on_chip)
          for d in grid.flat] == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1),
                                  (1, 2, 0), (1, 2, 1), (1, 3, 0), (1, 3, 1)]


def test_cpu_grid_keeps_id_order_host_by_host():
  cpus = [Device(id=i, process_index=i // 4, platform="cpu", device_kind="cpu")
          for i in (5, 0, 7, 2, 1, 6, 3, 4)]
  grid = device_meshes.device_grid(cpus, tp=2)
  assert [d.id for d in grid.flat] == list(range(8)) and grid.shape == (4, 2)
  hsdp = device_meshes.device_grid(cpus, tp=2, kind="hsdp")
  assert hsdp.shape == (2, 2, 2)
  assert [d.id for d in hsdp.flat] == list(range(8))


def test_grid_refuses_uneven_hosts_and_a_tp_that_spans_hosts():
  cpus = [Device(id=i, process_index=int(i > 2), platform="cpu")
          for i in range(8)]
  with pytest.raises(ValueError, match="different device counts"):
    device_meshes.device_grid(cpus)
  even = [dataclasses.replace(d, process_index=d.id // 4) for d in cpus]
  with pytest.raises(ValueError, match="tp=3 must divide"):
    device_meshes.device_grid(even, tp=3)


def test_user_mesh_in_topology_order_is_accepted():
  # jax.make_mesh((8, 1), ...) on this slice: ids 0, 4, 1, 5, 2, 6, 3, 7,
  # not contiguous, but each host one block along "fsdp".
  grid = mesh_utils.create_device_mesh((8, 1), _two_hosts_by_x())
  assert [d.id for d in grid.flat] == [0, 4, 1, 5, 2, 6, 3, 7]
  assert rules.host_blocks(grid, ("fsdp", "tp"), ("fsdp",)) is None
  # hsdp's (data, fsdp) batch axes flatten to the same host blocks.
  assert rules.host_blocks(grid.reshape(2, 4, 1), ("data", "fsdp", "tp"),
                             ("data", "fsdp")) is None


def test_user_mesh_that_splits_a_host_along_the_data_axis_is_refused():
  # Hosts are rows of the slice; make_mesh's x-major order alternates them.
  grid = mesh_utils.create_device_mesh((8, 1), _two_hosts_by_y())
  problem = rules.host_blocks(grid, ("fsdp", "tp"), ("fsdp",))
  assert problem is not None and "\n" not in problem.message
  assert "hosts run 0 x1, 1 x1, 0 x1, 1 x1" in problem.message
  assert "tunix_mcjax.runtime.global_mesh()" in problem.message
  # The fix it names works: the default grid over the same devices.
  fixed = device_meshes.device_grid(_two_hosts_by_y())
  assert rules.host_blocks(fixed, ("fsdp", "tp"), ("fsdp",)) is None


def test_user_mesh_whose_tp_pairs_two_hosts_is_refused():
  grid = mesh_utils.create_device_mesh((4, 2), _two_hosts_by_y())
  problem = rules.host_blocks(grid, ("fsdp", "tp"), ("fsdp",))
  assert problem is not None and "\n" not in problem.message
  assert "hosts [0, 1] at batch index 0" in problem.message
