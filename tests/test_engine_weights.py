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

"""TrainedState: the step's state without Flax's graph walk, never stale.

EngineWeights: a step's publication writes the new weights into the native
engine's buffers of the old ones (one copy of the engine's weights per
host, never two), and the engine runs on them.
"""

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from tunix_mcjax import engine_weights
from tunix_mcjax import tree_paths


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


def _native_engine(actor, *, reshard_on_update=False):
  # pylint: disable=g-import-not-at-top
  from tunix.rl.rollout import base_rollout
  from tunix_mcjax import runtime
  from tunix_mcjax.engines import base as engines_base
  from tunix_mcjax.engines import native
  from tunix_mcjax.recipes import models
  # pylint: enable=g-import-not-at-top

  lm = runtime.local_mesh()
  config = base_rollout.RolloutConfig(max_tokens_to_generate=3,
                                      max_prompt_length=4)
  engine = native.NativeEngine(
      tokenizer=models.ToyTokenizer(), rollout_config=config,
      context=engines_base.EngineContext(
          engine_mesh=lm,
          initial_model=engine_weights.initial_model(actor, None, lm, None),
          row_ids=engines_base.CounterRowIds(),
          reshard_on_update=reshard_on_update))
  return engine, config


def _bf16_actor():
  from tunix_mcjax import runtime  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.recipes import models  # pylint: disable=g-import-not-at-top

  cfg = models.tiny_qwen3_config(dtype=jnp.bfloat16,
                                 param_dtype=jnp.bfloat16)
  return models.create_tiny_model(cfg, seed=3, mesh=runtime.global_mesh())


def _pointers(state):
  return [s.data.unsafe_buffer_pointer() for x in jax.tree.leaves(state)
          for s in x.addressable_shards]


def _live_bytes():
  seen = {}
  for a in jax.live_arrays():
    for s in a.addressable_shards:
      seen[s.data.unsafe_buffer_pointer()] = s.data.nbytes
  return sum(seen.values())


def test_a_publication_writes_into_the_native_engines_weights():
  from tunix_mcjax import runtime  # pylint: disable=g-import-not-at-top

  actor = _bf16_actor()
  engine, config = _native_engine(actor)
  weights = engine_weights.EngineWeights(
      engine, local_mesh=runtime.local_mesh(), spec=None, lora_enabled=False)
  old = _pointers(nnx.state(engine.model(), nnx.Param))
  for step in range(2):
    nnx.update(actor, jax.tree.map(lambda x: x * 1.5 + 0.25,
                                   nnx.state(actor, nnx.Param)))
    before = _live_bytes()
    assert weights.publish(actor) == 1
    state = nnx.state(engine.model(), nnx.Param)
    # The new weights sit in the old ones' buffers (each local device's
    # replica): the host never held two copies of them, nor does now.
    assert _pointers(state) == old, step
    assert _live_bytes() == before, step
    for got, want in zip(jax.tree.leaves(state),
                         jax.tree.leaves(nnx.state(actor, nnx.Param))):
      np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    out = engine.generate(["ab", "cd"], config)
    assert len(out.text) == 2


def test_an_engine_that_relays_out_keeps_its_arrays():
  actor = _bf16_actor()
  engine, _ = _native_engine(actor, reshard_on_update=True)
  assert engine.retiring_params() is None
  plain, _ = _native_engine(actor)
  flat = plain.retiring_params()
  assert sorted(map(str, flat)) == sorted(
      map(str, tree_paths.flat_params(
          nnx.state(plain.model(), nnx.Param))))
