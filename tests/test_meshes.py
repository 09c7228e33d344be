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

"""Topology order and host blocks (tunix_mcjax.rules.meshes).

Pure functions over device objects: the stand-ins below carry what a TPU
device carries (process index, id, torus coordinates, core on chip), so the
TPU layouts are tested here without a TPU; a real 2-host CPU job with a
reordered mesh runs in tests/test_cluster.py.
"""

import dataclasses
import itertools

import numpy as np
import pytest

from tunix_mcjax import rules


@dataclasses.dataclass(frozen=True)
class Chip:
  """A stand-in for a jax.Device (not a mock of JAX: these functions take
  any object with these attributes)."""

  id: int
  process_index: int
  coords: tuple[int, int, int] | None = None
  core_on_chip: int = 0


def _v5e_16():
  """A 4x4 slice of 4 hosts, each a 2x2 block of chips; ids run row-major
  over the slice (as a TPU runtime numbers them), not host by host."""
  chips = []
  for y, x in itertools.product(range(4), range(4)):
    host = (y // 2) * 2 + x // 2
    chips.append(Chip(id=y * 4 + x, process_index=host, coords=(x, y, 0)))
  return chips


def test_topology_order_is_hosts_outer_then_physical_position():
  chips = _v5e_16()
  ordered = rules.topology_order(list(reversed(chips)))
  assert [c.process_index for c in ordered] == [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4
  # Within host 1 (x in 2..3, y in 0..1): by coordinates, not by id.
  assert [c.coords for c in ordered[4:8]] == [(2, 0, 0), (2, 1, 0),
                                               (3, 0, 0), (3, 1, 0)]
  assert [c.id for c in ordered[4:8]] == [2, 6, 3, 7]


def test_devices_without_coordinates_keep_id_order():
  cpus = [Chip(id=i, process_index=i // 2) for i in (3, 0, 2, 1)]
  assert [c.id for c in rules.topology_order(cpus)] == [0, 1, 2, 3]


def test_cores_of_one_chip_are_neighbours():
  cores = [Chip(id=i, process_index=0, coords=(i // 2, 0, 0),
                core_on_chip=1 - i % 2) for i in range(4)]
  assert [(c.coords[0], c.core_on_chip)
          for c in rules.topology_order(cores)] == [(0, 0), (0, 1), (1, 0),
                                                      (1, 1)]


def test_a_topology_ordered_mesh_has_its_hosts_in_blocks():
  grid = np.array(rules.topology_order(_v5e_16()), dtype=object)
  assert rules.host_blocks(grid.reshape(16, 1), ("fsdp", "tp"),
                             ("fsdp",)) is None
  # hsdp: hosts on "data", a host's chips on "fsdp" and "tp".
  assert rules.host_blocks(grid.reshape(4, 2, 2), ("data", "fsdp", "tp"),
                             ("data", "fsdp")) is None


def test_a_make_mesh_order_within_hosts_is_accepted():
  # What a user's jax.make_mesh may give: each host's block contiguous along
  # the batch axis, the chips inside it in any order.
  chips = rules.topology_order(_v5e_16())
  shuffled = [c for h in range(4) for c in reversed(chips[4 * h:4 * h + 4])]
  grid = np.array(shuffled, dtype=object).reshape(8, 2)
  assert rules.host_blocks(grid, ("fsdp", "tp"), ("fsdp",)) is None


def test_a_slice_ordered_mesh_that_interleaves_hosts_is_refused_with_the_fix():
  # Ids row-major over the slice: hosts 0, 0, 1, 1, 0, 0, 1, 1, ...
  grid = np.array(_v5e_16(), dtype=object).reshape(16, 1)
  problem = rules.host_blocks(grid, ("fsdp", "tp"), ("fsdp",))
  assert problem is not None
  assert "hosts run 0 x2, 1 x2, 0 x2, 1 x2, 2 x2" in problem.message
  assert "tunix_mcjax.runtime.global_mesh()" in problem.message


def test_hosts_out_of_process_order_are_refused():
  chips = rules.topology_order(_v5e_16())
  swapped = chips[4:8] + chips[:4] + chips[8:]
  problem = rules.host_blocks(np.array(swapped, dtype=object).reshape(16, 1),
                                ("fsdp", "tp"), ("fsdp",))
  assert problem is not None and "1 x4, 0 x4, 2 x4, 3 x4" in problem.message


def test_an_axis_outside_the_batch_may_not_span_hosts():
  chips = rules.topology_order(_v5e_16())
  # tp of 2 pairing host 0's chips with host 1's.
  pairs = [[chips[i], chips[i + 4]] for h in (0, 8) for i in range(h, h + 4)]
  problem = rules.host_blocks(np.array(pairs, dtype=object),
                                ("fsdp", "tp"), ("fsdp",))
  assert problem is not None and "hosts [0, 1] at batch index 0" in (
      problem.message)


def test_batch_axes_must_be_mesh_axes():
  grid = np.array(_v5e_16(), dtype=object).reshape(16, 1)
  problem = rules.host_blocks(grid, ("fsdp", "tp"), ("data",))
  assert problem is not None and "('data',)" in problem.message


@pytest.mark.parametrize("batch_axes", [("data", "fsdp"), ("fsdp", "data")])
def test_two_batch_axes_flatten_in_the_given_order(batch_axes):
  # (data=2, fsdp=8): hosts 0-1 on data row 0, hosts 2-3 on row 1. Split as
  # ("data", "fsdp") the hosts run 0, 1, 2, 3; as ("fsdp", "data") they
  # interleave.
  grid = np.array(rules.topology_order(_v5e_16()),
                  dtype=object).reshape(2, 8)
  problem = rules.host_blocks(grid, ("data", "fsdp"), batch_axes)
  assert (problem is None) == (batch_axes == ("data", "fsdp"))
