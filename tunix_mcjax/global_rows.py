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

"""This host's rows <-> one global array sharded over the data axes.

Each host holds the learner's batch fields for its own rows; the log-prob
passes and the train step run on global arrays in which those rows are
this host's block of the batch (leading) axis, sharded over the data axes.
Built explicitly: Tunix's `shard_input` would silently replicate rows that
do not divide, i.e. treat different hosts' rows as one value.
"""

from __future__ import annotations

import math
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec
import numpy as np

from tunix_mcjax import rules
from tunix_mcjax import transfers


def _device_rows_to_global(x: jax.Array, sharding: NamedSharding,
                           num_hosts: int) -> jax.Array:
  """This host's rows, already on its devices, as the global array: each
  of this host's shards comes from the block of `x` that holds its rows,
  as it is where it already lies on that device, else copied device to
  device (no host round trip).

  Not `jax.make_array_from_process_local_data(sharding, x)`: for a jax.Array
  it indexes `x` with slice objects, whose bounds go to the device as
  scalars (an implicit transfer the guard refuses); `lax.slice_in_dim`
  keeps them static. Nor a `device_put` of a slice of a multi-device `x`,
  which goes through the host.
  """
  global_shape = (x.shape[0] * num_hosts, *x.shape[1:])
  index_map = sharding.addressable_devices_indices_map(global_shape)
  start = min(idx[0].start or 0 for idx in index_map.values())
  blocks = [(s.index[0].start or 0,
             x.shape[0] if s.index[0].stop is None else s.index[0].stop,
             s) for s in x.addressable_shards]
  pieces = []
  for device, idx in index_map.items():
    lo = (idx[0].start or 0) - start
    hi = (global_shape[0] if idx[0].stop is None else idx[0].stop) - start
    holders = [b for b in blocks if b[0] <= lo and hi <= b[1]]
    # The block on the target device, else any that holds the rows.
    holders.sort(key=lambda b: b[2].device != device)
    if not holders:
      piece = jax.lax.slice_in_dim(x, lo, hi, axis=0)
    else:
      b_lo, b_hi, shard = holders[0]
      piece = shard.data
      if (lo, hi) != (b_lo, b_hi):
        piece = jax.lax.slice_in_dim(piece, lo - b_lo, hi - b_lo, axis=0)
    if piece.sharding.device_set != {device}:
      piece = jax.device_put(piece, device)
    pieces.append(piece)
  return jax.make_array_from_single_device_arrays(global_shape, sharding,
                                                  pieces)


def mesh_axis_size(mesh: Mesh, axes: tuple[str, ...]) -> int:
  """The number of devices along `axes` of `mesh`."""
  return math.prod(mesh.shape[a] for a in axes)


def to_global(x: Any, mesh: Mesh, data_sharding_axis: Any,
              num_hosts: int) -> Any:
  """This host's rows -> one global array sharded over the data axes.

  Args:
    x: this host's rows (numpy, or a jax.Array on this host's devices);
      returned as it is without rows (None, a scalar) or when already
      global.
    mesh: the global mesh.
    data_sharding_axis: the training config's `data_sharding_axis`.
    num_hosts: the number of hosts.
  """
  if x is None or not hasattr(x, "shape") or x.ndim == 0:
    return x
  if isinstance(x, jax.Array) and not x.is_fully_addressable:
    return x
  axes = rules.batch_axes(data_sharding_axis)
  sharding = NamedSharding(mesh, PartitionSpec(axes))
  per_host = mesh_axis_size(mesh, axes) // num_hosts
  if per_host == 0 or x.shape[0] % per_host:
    # Tunix's shard_input would silently fall back to a replicated array
    # here, i.e. treat different hosts' rows as one value.
    raise ValueError(
        f"This host has {x.shape[0]} rows, not a multiple of its"
        f" {per_host} data-parallel devices; choose batch sizes (prompts x"
        " num_generations per host and per micro-batch) that divide."
    )
  if isinstance(x, jax.Array):
    return _device_rows_to_global(x, sharding, num_hosts)
  with transfers.deliberate("host_rows"):
    return jax.make_array_from_process_local_data(sharding, np.asarray(x))


def take_rows(x: Any, sl: slice) -> Any:
  """Rows `sl` of `x` (numpy or a jax.Array), without a host round trip.

  `x[sl]` on a jax.Array sends the slice bounds to the device as scalars
  (an implicit transfer); `lax.slice_in_dim` keeps them static.
  """
  start, stop, step = sl.indices(x.shape[0])
  if step != 1:
    raise ValueError(f"take_rows takes contiguous rows, not {sl}.")
  if not isinstance(x, jax.Array):
    return np.asarray(x)[start:stop]
  if (start, stop) == (0, x.shape[0]):
    return x
  return jax.lax.slice_in_dim(x, start, stop, axis=0)


def local_rows(x: jax.Array) -> np.ndarray:
  """This host's rows of a global array sharded over the leading axis, as
  numpy (a device-to-host copy: for dumps and tests, not a step)."""
  if x.is_fully_addressable:
    return np.asarray(x)
  return np.concatenate(
      [np.asarray(d) for _, d in _row_blocks(x)], axis=0)


def _row_blocks(x: jax.Array) -> list[tuple[jax.Device, jax.Array]]:
  """This host's row blocks of `x` in row order: one (device, block) per
  distinct block (replicas skipped); each block holds whole rows."""
  seen: dict[int, tuple[jax.Device, jax.Array]] = {}
  for s in sorted(x.addressable_shards, key=lambda s: s.device.id):
    idx = s.index
    if any((sl.start or 0) != 0 or (sl.stop is not None and sl.stop != n)
           for sl, n in zip(idx[1:], x.shape[1:])):
      raise ValueError(
          f"An array of shape {x.shape} split along a non-row axis"
          f" ({x.sharding}) has no per-host rows.")
    seen.setdefault(idx[0].start or 0, (s.device, s.data))
  return [seen[k] for k in sorted(seen)]


def local_rows_on_device(x: jax.Array) -> jax.Array:
  """This host's rows of a global array, still on this host's devices.

  No copy: the host's distinct row blocks become one array sharded over
  the devices that hold them (a single block is returned as it is), so
  reference log-probs go back to the learner without a host round trip.
  """
  if x.is_fully_addressable:
    return x
  blocks = _row_blocks(x)
  if len(blocks) == 1:
    return blocks[0][1]
  rows = {d.shape[0] for _, d in blocks}
  if len(rows) != 1:
    raise ValueError(
        f"This host's row blocks of {x.shape} differ in size ({sorted(rows)});"
        " choose batch sizes that divide the data-parallel devices.")
  devices = np.array([dev for dev, _ in blocks], dtype=object)
  sharding = NamedSharding(Mesh(devices, ("rows",)), PartitionSpec("rows"))
  shape = (rows.pop() * len(blocks), *x.shape[1:])
  return jax.make_array_from_single_device_arrays(
      shape, sharding, [d for _, d in blocks])
