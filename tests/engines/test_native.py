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


"""Tests of the host-local, placement-invariant native rollout engine.

Single process, four CPU devices (see tests/conftest.py), a tiny random Qwen3.
"""

# pylint: disable=protected-access

from __future__ import annotations

import dataclasses
import functools
import logging

from flax import nnx
import jax
from jax.interpreters import pxla
import jax.numpy as jnp
import numpy as np
import pytest
from tunix.models.qwen3 import model as qwen3_lib
from tunix.rl import common
from tunix.rl.rollout import base_rollout

from tunix_mcjax import engines
from tunix_mcjax.engines import base as engines_base
from tunix_mcjax.engines import native
from tunix_mcjax.engines import per_row_keys
from tunix_mcjax.registry import ENGINES

Mesh = jax.sharding.Mesh
NamedSharding = jax.sharding.NamedSharding
P = jax.sharding.PartitionSpec

PAD, BOS, EOS = 0, 1, 2
G = 4  # Samples per prompt.


class TinyTokenizer:
  """Character-level tokenizer with the methods TokenizerAdapter needs."""

  ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789 .,?!+-*/="

  def encode(self, text: str, **kwargs) -> list[int]:
    del kwargs
    return [3 + self.ALPHABET.index(c) for c in text]

  def decode(self, ids: list[int], **kwargs) -> str:
    del kwargs
    n = len(self.ALPHABET)
    return "".join(self.ALPHABET[i - 3] for i in ids if 3 <= i < 3 + n)

  def bos_id(self) -> int:
    return BOS

  def eos_id(self) -> int:
    return EOS

  def pad_id(self) -> int:
    return PAD


class ArrayRowIds:
  """A RowIdSource over an explicit (N, 2) array; records what was taken."""

  def __init__(self, ids: np.ndarray | None = None):
    self._ids = np.zeros((0, 2), np.int64) if ids is None else np.asarray(ids)
    self.taken = 0

  def feed(self, ids: np.ndarray) -> "ArrayRowIds":
    self._ids = np.concatenate([self._ids[self.taken :], np.asarray(ids)])
    self.taken = 0
    return self

  def take(self, num_rows: int) -> np.ndarray:
    if self.taken + num_rows > len(self._ids):
      raise RuntimeError(f"asked for {num_rows} rows, only {len(self._ids)}")
    out = self._ids[self.taken : self.taken + num_rows]
    self.taken += num_rows
    return out.astype(np.int64)


def _tiny_qwen3(seed: int = 0) -> qwen3_lib.Qwen3:
  config = qwen3_lib.ModelConfig(
      num_layers=2,
      vocab_size=64,
      embed_dim=32,
      hidden_dim=64,
      num_heads=2,
      head_dim=16,
      num_kv_heads=1,
      rope_theta=10_000,
      norm_eps=1e-6,
  )
  # Abstract init plus numpy weights: JAX's initializers would compile one
  # program per parameter shape, which dominates a tiny model's set-up time.
  model = nnx.eval_shape(lambda: qwen3_lib.Qwen3(config, rngs=nnx.Rngs(0)))
  # Random weights everywhere (Qwen3 initializes its MLPs to zero and its
  # embeddings near zero, which gives near-uniform next-token distributions)
  # make greedy decoding meaningful and sampled tokens noise-sensitive.
  _perturb(model, seed=seed, scale=0.3, replace=True)
  return model


def _perturb(
    model: nnx.Module, *, seed: int, scale: float, replace: bool = False
) -> None:
  rng = np.random.default_rng(seed)
  state = nnx.state(model, nnx.Param)
  new = []
  for x in jax.tree.leaves(state):
    noise = scale * rng.standard_normal(x.shape).astype(np.float32)
    if replace:
      # RMSNorm scales stay 1.
      new.append(jnp.ones(x.shape) if x.ndim < 2 else jnp.asarray(noise))
    else:
      new.append(x + noise)
  nnx.update(model, jax.tree.unflatten(jax.tree.structure(state), new))


def _mesh(devices) -> Mesh:
  return Mesh(np.array(devices).reshape(len(devices), 1), ("fsdp", "tp"))


def _rollout_config(**overrides) -> base_rollout.RolloutConfig:
  defaults = dict(
      max_tokens_to_generate=10,
      max_prompt_length=16,
      temperature=0.9,
      top_p=1.0,
      top_k=None,
      kv_cache_size=32,
  )
  defaults.update(overrides)
  return base_rollout.RolloutConfig(**defaults)


def _engine(
    model: nnx.Module,
    devices,
    row_ids=None,
    **kwargs,
) -> native.NativeEngine:
  # Built the way Tunix's ClusterConfig.rollout_engine plug point calls it.
  factory = functools.partial(
      ENGINES.get("native"),
      context=engines.EngineContext(
          engine_mesh=_mesh(devices), row_ids=row_ids, seed=1234
      ),
      **kwargs,
  )
  return factory(
      rollout_actor=model,
      tokenizer=TinyTokenizer(),
      mesh=_mesh(jax.devices()),
      rollout_config=_rollout_config(),
  )


# Six prompts of mixed lengths (2..8 tokens + BOS), G rows each, contiguous.
PROMPTS = ["ab", "hello", "1+2=3", "xy z", "what is 7*6?", "q"]
ROWS = [p for p in PROMPTS for _ in range(G)]
ROW_IDS = np.array(
    [(1000 + i, s) for i in range(len(PROMPTS)) for s in range(G)], np.int64
)


@pytest.fixture(scope="module")
def devices():
  devs = jax.devices()
  if len(devs) < 4 or devs[0].platform != "cpu":
    pytest.fail(
        "These tests need 4 CPU devices; JAX was initialized before"
        f" tests/conftest.py could configure it: {devs}."
    )
  return devs[:4]


@pytest.fixture(scope="module")
def trainer_model():
  return _tiny_qwen3()


@pytest.fixture(scope="module")
def placement_engines(devices, trainer_model):
  """One 4-device engine and three 2-device engines on different subsets.

  Each comes with its ArrayRowIds, to be fed before each generate call.
  """
  wide_ids = ArrayRowIds()
  # A longer KV cache, so that the wide engine can pad prompts differently.
  wide = _engine(trainer_model, devices, wide_ids, cache_size=48)
  subsets = [devices[0:2], devices[2:4], [devices[3], devices[1]]]
  narrow = []
  for subset in subsets:
    ids = ArrayRowIds()
    narrow.append((_engine(trainer_model, subset, ids), ids))
  return (wide, wide_ids), narrow


def _tokens(out: base_rollout.RolloutOutput) -> list[list[int]]:
  return [np.asarray(t).tolist() for t in out.tokens]


@pytest.mark.slow
@pytest.mark.parametrize(
    "sampling",
    [dict(top_p=1.0, top_k=None), dict(top_p=0.95, top_k=50)],
    ids=["top_p_1", "top_k_50_top_p_0.95"],
)
def test_placement_invariance(placement_engines, sampling):
  (wide, wide_ids), narrow = placement_engines
  config = _rollout_config(temperature=0.9, **sampling)

  # Twice the left padding in the one-call run: keys must not depend on
  # buffer positions.
  wide_ids.feed(ROW_IDS)
  wide_config = dataclasses.replace(config, max_prompt_length=32)
  one_call = _tokens(wide.generate(ROWS, wide_config))

  three_calls = []
  for k, (engine, ids) in enumerate(narrow):
    rows = slice(8 * k, 8 * (k + 1))
    ids.feed(ROW_IDS[rows])
    three_calls += _tokens(engine.generate(ROWS[rows], config))

  assert len(one_call) == len(ROWS)
  for i, (a, b) in enumerate(zip(one_call, three_calls)):
    assert a == b, f"row {i} ({ROWS[i]!r}, ids {ROW_IDS[i]}): {a} != {b}"
  # Sampling really is random: the G samples of each prompt all differ.
  for p in range(len(PROMPTS)):
    group = {tuple(t) for t in one_call[G * p : G * (p + 1)]}
    assert len(group) == G, f"prompt {PROMPTS[p]!r}: {one_call[G*p:G*p+G]}"


def test_rows_are_sharded_over_the_engine_mesh(placement_engines):
  """Prefill and decode really run data-parallel, one row shard per device."""
  (wide, wide_ids), _ = placement_engines
  seen = {}
  sampler = wide._sampler
  prefill = sampler._compiled_prefill_fn
  decode = sampler._compiled_decode_fn

  def spy_prefill(params, state, *args, **kwargs):
    seen["prefill_in"] = state
    return prefill(params, state, *args, **kwargs)

  def spy_decode(params, state):
    seen["decode_out"] = out = decode(params, state)
    return out

  sampler._compiled_prefill_fn = spy_prefill
  sampler._compiled_decode_fn = spy_decode
  try:
    wide_ids.feed(ROW_IDS[:8])
    wide.generate(ROWS[:8], _rollout_config())
  finally:
    sampler._compiled_prefill_fn = prefill
    sampler._compiled_decode_fn = decode
  assert set(seen) == {"prefill_in", "decode_out"}  # The spies ran.
  for stage, state in seen.items():
    for name, x in [
        ("token_buffer", state.token_buffer),
        ("kv_cache", state.cache["layer_0"]["k"]),
        ("keys", state.seed),
    ]:
      assert x.sharding.mesh == wide.engine_mesh, (stage, name)
      # 8 rows over 4 devices.
      assert x.sharding.shard_shape(x.shape)[0] == 2, (stage, name, x.sharding)


def test_padding_non_divisible_batch(placement_engines):
  (wide, wide_ids), _ = placement_engines
  config = _rollout_config()
  wide_ids.feed(ROW_IDS[:6])
  out = wide.generate(ROWS[:6], config)
  assert wide_ids.taken == 6  # Padded rows consume no row ids.
  assert len(out.text) == len(out.tokens) == 6
  assert out.left_padded_prompt_tokens.shape == (6, 16)
  # And the padded call agrees with the unpadded one for the real rows.
  wide_ids.feed(ROW_IDS[:8])
  full = _tokens(wide.generate(ROWS[:8], config))
  assert _tokens(out) == full[:6]


def test_without_row_ids_warns_and_counts_rows(
    devices, trainer_model, caplog
):
  with caplog.at_level(logging.WARNING):
    engine = _engine(trainer_model, devices[:1])
  assert "not placement-invariant" in caplog.text
  assert not hasattr(engine, "mesh")  # Would switch on Tunix's async rollout.
  assert isinstance(engine, engines.Engine)
  assert isinstance(engine, base_rollout.BaseRollout)
  counter = engine._row_ids
  np.testing.assert_array_equal(counter.take(2), [[0, 0], [1, 0]])
  np.testing.assert_array_equal(counter.take(1), [[2, 0]])


_LP_PROBE_TOKENS = (
    np.array([[PAD, BOS, 5, 6, 7], [BOS, 9, 10, 11, 12]], np.int32),
    np.array([[20, 21, 22, EOS], [30, 31, PAD, PAD]], np.int32),
)


def _lp_probe(engine: native.NativeEngine) -> np.ndarray:
  return np.asarray(engine.get_per_token_logps(*_LP_PROBE_TOKENS))


def _published(engine: native.NativeEngine, model: nnx.Module):
  """The trainer's params in the engine's layout, as publication makes them."""
  return jax.device_put(
      nnx.state(model, nnx.Param), engine.param_shardings()
  )


@pytest.mark.parametrize("trainer_layout", ["default_device", "engine_layout"])
def test_engine_copy_is_independent(devices, trainer_layout):
  trainer = _tiny_qwen3(seed=3)
  mesh = _mesh(devices[:2])
  if trainer_layout == "engine_layout":
    # Where a plain device_put returns the trainer's own arrays.
    nnx.update(
        trainer,
        jax.device_put(
            nnx.state(trainer, nnx.Param), NamedSharding(mesh, P())
        ),
    )
  engine = _engine(trainer, devices[:2])
  greedy = _rollout_config(top_p=None, temperature=0.0)
  check_completions = trainer_layout == "default_device"
  before = _lp_probe(engine)
  if check_completions:
    completions_before = _tokens(engine.generate(ROWS, greedy))

  def buffers(tree):
    return {
        s.data.unsafe_buffer_pointer()
        for x in jax.tree.leaves(tree)
        for s in x.addressable_shards
    }

  engine_state = nnx.state(engine.model(), nnx.Param)
  assert not buffers(engine_state) & buffers(nnx.state(trainer, nnx.Param))

  # Trainer changes (new values, and donated/deleted old buffers) do not leak.
  old = jax.tree.leaves(nnx.state(trainer, nnx.Param))
  _perturb(trainer, seed=7, scale=0.5)
  for x in old:
    x.delete()
  np.testing.assert_array_equal(_lp_probe(engine), before)
  if check_completions:
    assert _tokens(engine.generate(ROWS, greedy)) == completions_before

  # ... until they are published.
  engine.update_params(_published(engine, trainer))
  after = _lp_probe(engine)
  assert np.max(np.abs(after - before)) > 1e-2
  graphdef, state = nnx.split(trainer)
  with engines_base.use_mesh(mesh):
    expected = common.compute_per_token_logps(
        graphdef,
        jax.device_put(state, NamedSharding(mesh, P())),
        *_LP_PROBE_TOKENS,
        pad_id=PAD,
        eos_id=EOS,
    )
  np.testing.assert_allclose(after, np.asarray(expected), atol=1e-5)
  if check_completions:
    completions_after = _tokens(engine.generate(ROWS, greedy))
    assert completions_after != completions_before


def _replace_embedding(params, value):
  params = jax.tree.map(lambda x: x, params)  # New Variables, same arrays.
  params["embedder"]["input_embedding"].set_value(value)
  return params


@pytest.mark.parametrize(
    "case", ["sharded", "other_mesh", "shape", "dtype", "numpy"]
)
def test_update_params_rejects_wrong_layout(devices, trainer_model, case):
  engine = _engine(trainer_model, devices[:2])
  good = _published(engine, trainer_model)
  emb = good["embedder"]["input_embedding"].get_value()
  replicated = NamedSharding(engine.engine_mesh, P())
  value = {
      "sharded": lambda: jax.device_put(
          emb, NamedSharding(engine.engine_mesh, P("fsdp"))
      ),
      "other_mesh": lambda: jax.device_put(
          emb, NamedSharding(_mesh(devices[2:4]), P())
      ),
      "shape": lambda: jax.device_put(emb[:-1], replicated),
      "dtype": lambda: jax.device_put(emb.astype(jnp.bfloat16), replicated),
      "numpy": lambda: np.asarray(emb),
  }[case]()
  with pytest.raises(ValueError, match=r"embedder\.input_embedding"):
    engine.update_params(_replace_embedding(good, value))


def test_update_params_checks_the_parameter_set(devices, trainer_model):
  engine = _engine(trainer_model, devices[:2])
  good = _published(engine, trainer_model)
  emb = good["embedder"]["input_embedding"].get_value()

  new_emb = jax.device_put(2 * emb, NamedSharding(engine.engine_mesh, P()))
  partial = nnx.State({"embedder": {"input_embedding": nnx.Param(new_emb)}})
  with pytest.raises(ValueError, match="missing parameter"):
    engine.update_params(partial)
  norm_before = engine.model().final_norm.w.get_value()
  engine.update_params(partial, filter_types=(nnx.Param,))
  model = engine.model()
  assert model.embedder.input_embedding.get_value() is new_emb
  assert model.final_norm.w.get_value() is norm_before

  extra = jax.tree.map(lambda x: x, good)
  extra["bogus"] = nnx.Param(emb)
  with pytest.raises(ValueError, match="bogus"):
    engine.update_params(extra)

  engine.update_params(good)  # The right layout is accepted as is.
  installed = nnx.state(engine.model(), nnx.Param)
  assert (
      installed["embedder"]["input_embedding"].get_value()
      is good["embedder"]["input_embedding"].get_value()
  )


def test_get_per_token_logps_matches_generate_logprobs(
    devices, trainer_model
):
  engine = _engine(trainer_model, devices, ArrayRowIds(ROW_IDS[:6]))
  # PAD counts as EOS here: a generated PAD would be masked out as padding by
  # the log-prob pass but attended to while decoding.
  config = _rollout_config(
      top_p=None, temperature=0.0, return_logprobs=True, eos_tokens=[EOS, PAD]
  )
  out = engine.generate(ROWS[:6], config)
  width = config.max_tokens_to_generate
  completions = np.full((6, width), PAD, np.int32)
  for i, t in enumerate(out.tokens):
    completions[i, : len(t)] = t
  logps = np.asarray(
      engine.get_per_token_logps(out.left_padded_prompt_tokens, completions)
  )
  assert logps.shape == (6, width)
  assert sum(len(t) for t in out.tokens) > 12
  # Rows already on a device (as the learner passes them) stay there, padded
  # to the 4-device engine mesh on the device: no host-to-device transfer,
  # same values.
  on_device = [jax.device_put(x) for x in
               (out.left_padded_prompt_tokens, completions)]
  with jax.transfer_guard("disallow"):
    device_logps = engine.get_per_token_logps(*on_device)
  np.testing.assert_array_equal(np.asarray(device_logps), logps)
  for i, (t, lp) in enumerate(zip(out.tokens, out.logprobs)):
    np.testing.assert_allclose(
        logps[i, : len(t)], np.asarray(lp), atol=1e-5, err_msg=f"row {i}"
    )


def test_constraints_on_engine_mesh_inside_a_global_mesh(
    devices, trainer_model, placement_engines, monkeypatch
):
  """Qwen3's activation constraints (off on CPU) work on the engine mesh.

  On accelerators Qwen3 constrains activations on the legacy context mesh,
  which RLCluster sets to its global role mesh around rollout calls. Forcing
  the constraints on here checks that the engine's own mesh wins and that the
  results stay placement-invariant.
  """
  used = set()

  def shard(x, spec):
    mesh = pxla.thread_resources.env.physical_mesh
    if mesh.empty:
      return x
    used.add(tuple(d.id for d in mesh.devices.flat))
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P(*spec)))

  monkeypatch.setattr(qwen3_lib, "shard", shard)
  global_mesh = Mesh(np.array(devices).reshape(2, 2), ("fsdp", "tp"))
  config = _rollout_config()
  narrow = _engine(
      trainer_model, [devices[3], devices[1]], ArrayRowIds(ROW_IDS[:8])
  )
  with engines_base.use_mesh(global_mesh):
    got = _tokens(narrow.generate(ROWS[:8], config))
  assert used == {(3, 1)}

  monkeypatch.undo()
  plain, plain_ids = placement_engines[1][0]  # Compiled for this config.
  plain_ids.feed(ROW_IDS[:8])
  assert got == _tokens(plain.generate(ROWS[:8], config))


def test_row_keys_depend_only_on_identity():
  ids = np.array([[5, 0], [5, 1], [6, 0]])
  keys = np.asarray(per_row_keys.row_keys(3, ids))
  base = jax.random.PRNGKey(3)
  for (p, s), k in zip(ids, keys):
    want = jax.random.fold_in(jax.random.fold_in(base, p), s)
    np.testing.assert_array_equal(k, np.asarray(want))
  assert len({tuple(k) for k in keys}) == 3
  with pytest.raises(ValueError, match="2\\*\\*32"):
    per_row_keys.row_keys(3, np.array([[-1, 0]]))


def test_constructor_validation(devices, trainer_model):
  explicit = jax.make_mesh(
      (2, 1),
      ("fsdp", "tp"),
      devices=devices[:2],
      axis_types=(jax.sharding.AxisType.Explicit,) * 2,
  )
  with pytest.raises(ValueError, match="Auto axis types"):
    native.NativeEngine(
        rollout_actor=trainer_model,
        tokenizer=TinyTokenizer(),
        mesh=explicit,
        rollout_config=_rollout_config(),
    )
  with pytest.raises(ValueError, match="rollout_actor"):
    native.NativeEngine(
        tokenizer=TinyTokenizer(),
        mesh=_mesh(devices[:1]),
        rollout_config=_rollout_config(),
    )
  engine = native.NativeEngine(
      rollout_actor=trainer_model,
      tokenizer=TinyTokenizer(),
      mesh=_mesh(devices[:1]),
      rollout_config=dataclasses.replace(_rollout_config(), seed=77),
  )
  assert engine.seed == 77
  assert engine.engine_mesh.devices.size == 1
  sampler = engine._sampler
  assert sampler.cache_config.cache_size == 32


def test_engine_context_is_validated(devices):
  ctx = engines.EngineContext(engine_mesh=_mesh(devices[:1]), seed=3)
  with pytest.raises(dataclasses.FrozenInstanceError):
    ctx.seed = 4  # type: ignore[misc]
  with pytest.raises(TypeError, match="engine_mesh"):
    engines.EngineContext(engine_mesh=devices)
  with pytest.raises(TypeError, match="row_ids"):
    engines.EngineContext(row_ids=[[0, 0]])
  with pytest.raises(TypeError, match="seed"):
    engines.EngineContext(seed=True)
  with pytest.raises(ValueError, match="reshard_on_update"):
    engines.EngineContext(source_mapping=lambda flat: flat)
  engines.EngineContext(source_mapping=lambda flat: flat,
                        reshard_on_update=True)


def test_no_row_ids_is_an_error_in_a_multi_process_job():
  # Single process (the stock backend's recipes): a counter, with a warning.
  counter = engines_base.row_ids_or_counter("NativeEngine", None,
                                            process_count=1)
  np.testing.assert_array_equal(counter.take(2), [[0, 0], [1, 0]])
  given = engines_base.CounterRowIds()
  assert engines_base.row_ids_or_counter(
      "NativeEngine", given, process_count=2) is given
  with pytest.raises(ValueError, match=r"NativeEngine has no row-id source"
                     r" in a 2-process job.*EngineContext\(row_ids=...\)"):
    engines_base.row_ids_or_counter("NativeEngine", None, process_count=2)
