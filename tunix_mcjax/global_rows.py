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

from tunix_mcjax import support
from tunix_mcjax import transfers


def _device_rows_to_global(x: jax.Array, sharding: NamedSharding,
                           num_hosts: int) -> jax.Array:
  """This host's rows, already on a device, as the global array: each of
  this host's shards is copied device to device (no host round trip).

  Not `jax.make_array_from_process_local_data(sharding, x)`: for a jax.Array
  it indexes `x` with slice objects, whose bounds go to the device as
  scalars (an implicit transfer the guard refuses); `lax.slice_in_dim`
  keeps them static.
  """
  global_shape = (x.shape[0] * num_hosts, *x.shape[1:])
  index_map = sharding.addressable_devices_indices_map(global_shape)
  start = min(idx[0].start or 0 for idx in index_map.values())
  pieces = []
  for device, idx in index_map.items():
    lo = (idx[0].start or 0) - start
    hi = (global_shape[0] if idx[0].stop is None else idx[0].stop) - start
    pieces.append(jax.device_put(
        jax.lax.slice_in_dim(x, lo, hi, axis=0), device))
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
  axes = support.batch_axes(data_sharding_axis)
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


def local_rows(x: jax.Array) -> np.ndarray:
  """This host's rows of a global array sharded over the leading axis."""
  if x.is_fully_addressable:
    return np.asarray(x)
  seen = {}
  for s in x.addressable_shards:
    start = s.index[0].start or 0
    if start not in seen:
      seen[start] = np.asarray(s.data)
  return np.concatenate([seen[k] for k in sorted(seen)], axis=0)
