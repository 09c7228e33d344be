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

"""Host rows <-> global arrays without host round trips (one process, four
CPU devices; the multi-host paths run in the equivalence runs)."""

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import numpy as np
import pytest

from tunix_mcjax import global_rows


def _mesh(shape, names):
  return Mesh(np.array(jax.devices()[:4]).reshape(shape), names)


def _rows(n=8, width=3):
  return np.arange(n * width, dtype=np.float32).reshape(n, width)


def test_take_rows_slices_on_the_device():
  host = _rows()
  x = jax.device_put(host)
  assert global_rows.take_rows(x, slice(0, 8)) is x
  with jax.transfer_guard("disallow"):
    part = global_rows.take_rows(x, slice(2, 6))
  np.testing.assert_array_equal(np.asarray(part), host[2:6])
  np.testing.assert_array_equal(global_rows.take_rows(host, slice(6, None)),
                                host[6:])
  with pytest.raises(ValueError, match="contiguous"):
    global_rows.take_rows(host, slice(0, 8, 2))


def test_to_global_reuses_blocks_already_on_their_devices():
  host = _rows()
  # Rows split over devices 0 and 1 (as local_rows_on_device leaves them),
  # into a global array over four: devices 0 and 1 keep their own blocks'
  # first halves, 2 and 3 get copies, all device to device.
  two = Mesh(np.array(jax.devices()[:2]), ("rows",))
  x = jax.device_put(host, NamedSharding(two, P("rows")))
  with jax.transfer_guard("disallow"):
    out = global_rows.to_global(x, _mesh((4,), ("fsdp",)), ("fsdp",),
                                num_hosts=1)
  np.testing.assert_array_equal(np.asarray(out), host)
  assert out.sharding.spec == P(("fsdp",))
  # Exact blocks are not copied: the same rows split over the same devices.
  x4 = jax.device_put(host, NamedSharding(_mesh((4,), ("d",)), P("d")))
  out4 = global_rows.to_global(x4, _mesh((4,), ("fsdp",)), ("fsdp",),
                               num_hosts=1)
  ptr = lambda a: {s.device: s.data.unsafe_buffer_pointer()
                   for s in a.addressable_shards}
  assert ptr(out4) == ptr(x4)


def test_row_blocks_skip_replicas_and_refuse_column_splits():
  host = _rows()
  # Rows over "data", replicated over "tp": two distinct blocks.
  x = jax.device_put(host, NamedSharding(_mesh((2, 2), ("data", "tp")),
                                         P("data")))
  blocks = global_rows._row_blocks(x)  # pylint: disable=protected-access
  assert [b.shape for _, b in blocks] == [(4, 3), (4, 3)]
  np.testing.assert_array_equal(
      np.concatenate([np.asarray(b) for _, b in blocks]), host)
  np.testing.assert_array_equal(global_rows.local_rows(x), host)
  assert global_rows.local_rows_on_device(x) is x  # One host: all of it.
  cols = jax.device_put(host[:, :2], NamedSharding(_mesh((2, 2), ("a", "b")),
                                                   P("a", "b")))
  with pytest.raises(ValueError, match="non-row axis"):
    global_rows._row_blocks(cols)  # pylint: disable=protected-access


def test_rows_that_do_not_divide_are_refused():
  with pytest.raises(ValueError, match="not a multiple"):
    global_rows.to_global(_rows(6), _mesh((4,), ("fsdp",)), ("fsdp",),
                          num_hosts=1)
