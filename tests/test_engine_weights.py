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

"""TrainedState: the step's state without Flax's graph walk, never stale."""

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from tunix_mcjax import engine_weights


class _Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.a = nnx.Linear(3, 4, rngs=rngs)
    self.b = nnx.Linear(4, 2, rngs=rngs)
    self.count = nnx.BatchStat(jnp.zeros(()))


def _paths_and_leaves(state):
  flat = jax.tree_util.tree_flatten_with_path(state)[0]
  return [p for p, _ in flat], [x for _, x in flat]


def _assert_same(got, want):
  (gp, gl), (wp, wl) = _paths_and_leaves(got), _paths_and_leaves(want)
  assert gp == wp
  assert all(g is w for g, w in zip(gl, wl))
  assert jax.tree.structure(got) == jax.tree.structure(want)


def test_each_call_equals_nnx_state_and_sees_updated_arrays():
  model = _Model(nnx.Rngs(0))
  read = engine_weights.TrainedState(nnx.Param)
  _assert_same(read(model), nnx.state(model, nnx.Param))
  assert read._picks is not None  # pylint: disable=protected-access
  # As an optimizer step does: new arrays in the same Variables.
  nnx.update(model, jax.tree.map(lambda x: x + 1, nnx.state(model, nnx.Param)))
  got = read(model)
  _assert_same(got, nnx.state(model, nnx.Param))
  np.testing.assert_array_equal(got["a"]["bias"][...],
                                nnx.state(model, nnx.Param)["a"]["bias"][...])
  # The filter holds: no BatchStat in a Param state.
  assert "count" not in got


def test_a_changed_structure_is_walked_again():
  model = _Model(nnx.Rngs(0))
  read = engine_weights.TrainedState(nnx.Param)
  read(model)
  model.c = nnx.Linear(2, 2, rngs=nnx.Rngs(1))
  got = read(model)
  assert "c" in got
  _assert_same(got, nnx.state(model, nnx.Param))


def test_the_lora_filter_reads_only_adapters():
  model = _Model(nnx.Rngs(0))
  model.lora = nnx.LoRAParam(jnp.ones((2, 2)))
  read = engine_weights.TrainedState(nnx.LoRAParam)
  read(model)
  nnx.update(model, jax.tree.map(lambda x: x * 3,
                                 nnx.state(model, nnx.LoRAParam)))
  got = read(model)
  _assert_same(got, nnx.state(model, nnx.LoRAParam))
  assert list(got) == ["lora"]
  np.testing.assert_array_equal(got["lora"][...], 3 * np.ones((2, 2)))


def test_shared_arrays_are_always_walked():
  model = _Model(nnx.Rngs(0))
  model.b.bias = nnx.Param(model.a.bias[...][:2])
  model.tied = nnx.Param(model.a.kernel[...])  # The same array twice.
  read = engine_weights.TrainedState(nnx.Param)
  _assert_same(read(model), nnx.state(model, nnx.Param))
  assert read._picks is None  # pylint: disable=protected-access
  model.tied = nnx.Param(model.a.kernel[...] + 1)
  _assert_same(read(model), nnx.state(model, nnx.Param))
