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

"""Engine tensor parallelism (`--engine_tp`, issue 25 item 3).

Single process, four CPU devices (tests/conftest.py): the native engine on
a (dp 2, tp 2) host mesh holds its parameters split over tp as the model's
annotations say and replicated over dp, shards rows over dp only, splits
the KV cache by head, receives publication in that layout, and generates
what it generates on (4, 1). The job checks refuse what engine tp cannot
run. One 2-host x 4-device example run with --engine_tp=2 equals the shared
stock and tp 1 runs (tests/conftest.py `equivalence_runs`' flags).
"""

# pylint: disable=protected-access

from __future__ import annotations

import dataclasses
import json

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tunix.models.qwen3 import model as qwen3_lib
from tunix.rl.rollout import base_rollout

from tunix_mcjax import cluster_options
from tunix_mcjax import engine_weights
from tunix_mcjax import publication
from tunix_mcjax import rules
from tunix_mcjax import runtime
from tunix_mcjax import tree_paths
from tunix_mcjax.engines import base as engines_base
from tunix_mcjax.engines import native
from tunix_mcjax.engines import vllm_options
from tunix_mcjax.recipes import job_checks
from tunix_mcjax.recipes import job_config
from tunix_mcjax.recipes import validation

import example_runs

P = jax.sharding.PartitionSpec
NamedSharding = jax.sharding.NamedSharding

PAD, BOS, EOS = 0, 1, 2
G = 4
PROMPTS = ["ab", "hello", "1+2=3", "xy z", "what is 7*6?"]
ROWS = [p for p in PROMPTS for _ in range(G)]
ROW_IDS = np.array(
    [(500 + i, s) for i in range(len(PROMPTS)) for s in range(G)], np.int64)


class _Tokenizer:
  """Character-level tokenizer with the methods TokenizerAdapter needs."""

  ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789 .,?!+-*/="

  def encode(self, text, **kwargs):
    del kwargs
    return [3 + self.ALPHABET.index(c) for c in text]

  def decode(self, ids, **kwargs):
    del kwargs
    n = len(self.ALPHABET)
    return "".join(self.ALPHABET[i - 3] for i in ids if 3 <= i < 3 + n)

  def bos_id(self):
    return BOS

  def eos_id(self):
    return EOS

  def pad_id(self):
    return PAD


class _RowIds:
  """Row identities fed before each call."""

  def __init__(self):
    self._ids = np.zeros((0, 2), np.int64)

  def feed(self, ids):
    self._ids = np.asarray(ids)
    return self

  def take(self, num_rows):
    out, self._ids = self._ids[:num_rows], self._ids[num_rows:]
    return out


def _model(seed: int = 0) -> qwen3_lib.Qwen3:
  # Two KV heads, so that tp 2 splits every attention projection and the
  # KV cache; random weights everywhere (not Tunix's near-zero embeddings)
  # make greedy decoding meaningful.
  config = qwen3_lib.ModelConfig(
      num_layers=2, vocab_size=64, embed_dim=32, hidden_dim=64, num_heads=4,
      head_dim=16, num_kv_heads=2, rope_theta=10_000, norm_eps=1e-6)
  model = nnx.eval_shape(lambda: qwen3_lib.Qwen3(config, rngs=nnx.Rngs(0)))
  rng = np.random.default_rng(seed)
  state = nnx.state(model, nnx.Param)
  new = [jnp.ones(x.shape) if x.ndim < 2 else jnp.asarray(
      0.3 * rng.standard_normal(x.shape).astype(np.float32))
         for x in jax.tree.leaves(state)]
  nnx.update(model, jax.tree.unflatten(jax.tree.structure(state), new))
  return model


def _config(**overrides) -> base_rollout.RolloutConfig:
  return base_rollout.RolloutConfig(**{
      **dict(max_tokens_to_generate=8, max_prompt_length=16, temperature=0.9,
             top_p=1.0, top_k=None, kv_cache_size=32, return_logprobs=True),
      **overrides})


GREEDY = dict(top_p=None, temperature=0.0)


def _engine(model, tp: int) -> native.NativeEngine:
  return native.NativeEngine(
      rollout_actor=model, tokenizer=_Tokenizer(), rollout_config=_config(),
      context=engines_base.EngineContext(
          engine_mesh=runtime.local_mesh(tp=tp), row_ids=_RowIds(),
          seed=1234))


@pytest.fixture(scope="module")
def model():
  if jax.device_count() < 4:
    pytest.fail(f"needs 4 CPU devices (tests/conftest.py): {jax.devices()}")
  return _model()


@pytest.fixture(scope="module")
def engines(model):
  return {tp: _engine(model, tp) for tp in (1, 2)}


def _generate(engine, rows, ids, config):
  engine._row_ids.feed(ids)
  return engine.generate(rows, config)


def _tokens(out):
  return [np.asarray(t).tolist() for t in out.tokens]


# --- layout ------------------------------------------------------------------


def test_parameters_split_over_tp_and_replicated_over_dp(engines):
  engine = engines[2]
  mesh = engine.engine_mesh
  assert mesh.shape == {"fsdp": 2, "tp": 2}
  specs = {tree_paths.dotted(p): s.spec for p, s in
           tree_paths.flat_params(engine.param_shardings()).items()}
  # Tunix's Qwen3 annotations with the data axis ("fsdp") dropped.
  assert specs["embedder.input_embedding"] == P("tp")
  assert specs["layers.0.attn.q_proj.w"] == P(None, "tp")
  assert specs["layers.0.attn.k_proj.w"] == P(None, "tp")
  assert specs["layers.0.attn.o_proj.w"] == P("tp")
  assert specs["layers.0.mlp.down_proj.kernel"] == P("tp")
  assert specs["layers.0.mlp.gate_proj.kernel"] == P(None, "tp")
  assert all("fsdp" not in tuple(s) for s in specs.values()), specs
  # One copy per tp group: each device holds half of a split weight, and
  # the two dp rows hold the same halves.
  q = engine.model().layers[0].attn.q_proj.w.value
  shards = {s.device: s for s in q.addressable_shards}
  assert all(s.data.shape == (32, 2, 16) for s in shards.values())
  grid = mesh.devices
  for col in range(2):
    a, b = shards[grid[0, col]], shards[grid[1, col]]
    assert a.index == b.index
    np.testing.assert_array_equal(np.asarray(a.data), np.asarray(b.data))
  assert shards[grid[0, 0]].index != shards[grid[0, 1]].index
  # Engine tp 1 keeps the replicated layout.
  assert all(s.spec == P() for s in
             jax.tree.leaves(engines[1].param_shardings()))


def test_rows_over_dp_and_kv_cache_by_head(engines):
  engine = engines[2]
  seen = {}
  sampler = engine._sampler
  prefill = sampler._compiled_prefill_fn

  def spy(params, state, *args, **kwargs):
    seen["state"] = state
    return prefill(params, state, *args, **kwargs)

  sampler._compiled_prefill_fn = spy
  try:
    # 6 rows: a multiple of dp (2) needs no padding rows, though not of the
    # device count (4).
    _generate(engine, ROWS[:6], ROW_IDS[:6], _config())
  finally:
    sampler._compiled_prefill_fn = prefill
  state = seen["state"]
  assert state.token_buffer.shape[0] == 6
  assert state.token_buffer.sharding.spec == P(("fsdp",))
  k = state.cache["layer_0"]["k"]
  assert k.sharding.spec == P(("fsdp",), None, "tp", None)
  assert k.sharding.shard_shape(k.shape) == (3, k.shape[1], 1, 16)


def test_padding_to_a_multiple_of_dp(engines):
  engine = engines[2]
  out = _generate(engine, ROWS[:5], ROW_IDS[:5], _config())
  assert len(out.tokens) == 5
  full = _generate(engine, ROWS[:6], ROW_IDS[:6], _config())
  assert _tokens(out) == _tokens(full)[:5]


# --- tp 2 generates what tp 1 generates ------------------------------------


@pytest.mark.parametrize("sampling", [GREEDY, {}], ids=["greedy", "sampled"])
def test_tp2_equals_tp1(engines, sampling):
  config = _config(**sampling)
  one, two = (_generate(engines[tp], ROWS, ROW_IDS, config) for tp in (1, 2))
  assert _tokens(two) == _tokens(one)
  assert two.text == one.text
  # Split contractions sum in another order: ~1e-6 apart in fp32.
  for a, b in zip(one.logprobs, two.logprobs):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-5)
  if sampling == GREEDY:
    return
  # Not vacuous: the sampled groups differ within.
  groups = [{tuple(t) for t in _tokens(one)[i:i + G]}
            for i in range(0, len(ROWS), G)]
  assert any(len(g) > 1 for g in groups)


def test_per_token_logps_tp2_equal_tp1(engines):
  prompts = np.array([[PAD, BOS, 5, 6, 7], [BOS, 9, 10, 11, 12],
                      [BOS, 4, 4, 4, 4]], np.int32)
  completions = np.array([[20, 21, 22, EOS], [30, 31, PAD, PAD],
                          [7, 8, 9, 10]], np.int32)
  one, two = (np.asarray(engines[tp].get_per_token_logps(prompts,
                                                         completions))
              for tp in (1, 2))
  assert two.shape == (3, 4)
  np.testing.assert_allclose(two, one, atol=1e-5)


# --- publication into the tp layout --------------------------------------------


def _trainer(seed: int):
  """A trainer model on a 4-device fsdp mesh, as the cluster's actor."""
  model = _model(seed)
  mesh = runtime.global_mesh()
  state = nnx.state(model)
  nnx.update(model, jax.device_put(state, nnx.get_named_sharding(state,
                                                                 mesh)))
  return model


def test_publication_lands_as_tp_shards(model):
  engine = _engine(model, 2)
  trainer = _trainer(seed=5)
  target = engine.publication_target()
  publisher = publication.Publisher(dst=target, local_mesh=engine.engine_mesh)
  out = publisher(nnx.state(trainer, nnx.Param))
  want = tree_paths.flat_params(engine.param_shardings())
  got = tree_paths.flat_params(out)
  assert set(got) == set(want)
  for path, x in got.items():
    assert x.sharding == want[path], path
  # Each device holds 1/tp of a split weight: the publication moved only
  # that tp group's half onto it.
  w = got[("layers", 0, "mlp", "gate_proj", "kernel")]
  assert w.shape == (32, 64)
  assert {s.data.shape for s in w.addressable_shards} == {(32, 32)}
  engine.update_params(out)
  np.testing.assert_array_equal(
      np.asarray(engine.model().layers[0].mlp.gate_proj.kernel.value),
      np.asarray(trainer.layers[0].mlp.gate_proj.kernel.value))
  # The engine now generates what a tp 1 engine of the trainer generates.
  reference = _engine(trainer, 1)
  config = _config(**GREEDY)
  assert (_tokens(_generate(engine, ROWS[:8], ROW_IDS[:8], config))
          == _tokens(_generate(reference, ROWS[:8], ROW_IDS[:8], config)))


def test_initial_model_is_gathered_into_the_tp_layout():
  trainer = _trainer(seed=6)
  mesh = runtime.local_mesh(tp=2)
  local = engine_weights.initial_model(trainer, None, mesh, None)
  want = engines_base.param_shardings(nnx.state(local, nnx.Param), mesh)
  for path, x in tree_paths.flat_params(nnx.state(local, nnx.Param)).items():
    assert x.sharding == tree_paths.flat_params(want)[path], path
  # The engine takes it over as it is (no copy into another layout).
  engine = native.NativeEngine(
      tokenizer=_Tokenizer(), rollout_config=_config(),
      context=engines_base.EngineContext(engine_mesh=mesh, row_ids=_RowIds(),
                                         seed=0, initial_model=local))
  a = nnx.state(local, nnx.Param)["embedder"]["input_embedding"].value
  b = nnx.state(engine.model(), nnx.Param)["embedder"]["input_embedding"]
  assert b.value is a


def test_tp_spec_replicates_what_tp_does_not_divide():
  mesh = runtime.local_mesh(tp=4)
  assert engines_base.tp_spec(P("tp", "fsdp"), (8, 4), mesh) == P("tp")
  assert engines_base.tp_spec(P("tp", "fsdp"), (6, 4), mesh) == P()
  assert engines_base.tp_spec(P(("fsdp", "tp"), None), (8, 3), mesh) == P(
      "tp")
  assert engines_base.tp_spec(P("tp"), (8,), runtime.local_mesh()) == P()
  assert engines_base.row_axes(mesh) == ("fsdp",)
  assert engines_base.row_axes(runtime.local_mesh()) == ("fsdp", "tp")
  assert engines_base.engine_tp(mesh) == 4


# --- checks before hosts start ---------------------------------------------------


@pytest.mark.parametrize("kwargs, message", [
    (dict(engine_tp=0), "--engine_tp must be an integer >= 1"),
    (dict(engine_tp=2, backend="tunix"),
     "--engine_tp=2 lays out the host engines of --backend=mcjax and"
     " mcjax_da's rollout hosts; --backend=tunix does not take it"),
    (dict(engine_tp=2, backend="mcjax_da", trainer="maxtext"),
     "--engine_tp=2 with --trainer=maxtext"),
    (dict(engine_tp=2, engine="vllm_tpu"),
     "--engine_tp=2 with --engine=vllm_tpu: that engine has no"
     " tensor-parallel layout here; use --engine=native or vllm, or"
     " --engine_tp=1."),
])
def test_job_config_refuses(kwargs, message):
  with pytest.raises(ValueError) as e:
    job_config.GrpoJobConfig(**kwargs)
  assert message in str(e.value)
  assert "\n" not in str(e.value)


def test_mcjax_da_rollout_hosts_take_engine_tp():
  # Their engines are host-local like a colocated host's (tests/da/
  # test_disaggregated.py's synchronous run uses tp 2).
  assert job_config.GrpoJobConfig(backend="mcjax_da", engine_tp=2,
                                  max_staleness=0).engine_tp == 2
  from tunix_mcjax.cli import options  # pylint: disable=g-import-not-at-top

  assert options.CliOptions(backend="mcjax_da", engine_tp=2).engine_tp == 2


def test_engine_tp_must_divide_the_devices_per_host():
  cfg = job_config.GrpoJobConfig(engine_tp=2)
  job_checks.check_job(cfg, num_hosts=2, devices_per_host=4)
  with pytest.raises(validation.InputError) as e:
    job_checks.check_job(dataclasses.replace(cfg, engine_tp=3), num_hosts=2,
                         devices_per_host=4)
  assert str(e.value) == (
      "--engine_tp=3 must divide the devices per host (4) so that an engine"
      " replica stays on one host; use one of [1, 2, 4].")
  with pytest.raises(validation.InputError, match="use one of"):
    job_checks.check_job(cfg, num_hosts=4, devices_per_host=1)


def test_maxtext_trainer_is_refused():
  problem = rules.engine_tp(2, trainer="maxtext")
  assert problem is not None and "--trainer=maxtext" in problem.message
  # vLLM's staging is replicated at any tp: a MaxText trainer publishes to
  # it as at tp 1 (tests/cli/test_recipe_agentic_disagg.py runs it).
  assert rules.engine_tp(2, trainer="maxtext", engine="vllm") is None


def test_cluster_options():
  assert cluster_options.McJaxOptions().engine_tp == 1
  assert cluster_options.McJaxOptions(engine_tp=2).engine_tp == 2
  for bad in (0, 1.5, True):
    with pytest.raises(ValueError, match="engine_tp must be an integer"):
      cluster_options.McJaxOptions(engine_tp=bad)


def test_cli_options():
  from tunix_mcjax.cli import options  # pylint: disable=g-import-not-at-top

  assert options.CliOptions(backend="mcjax", engine_tp=2).engine_tp == 2
  with pytest.raises(options.ConfigError,
                     match="--backend=tunix does not take it"):
    options.CliOptions(backend="tunix", engine_tp=2)
  assert options.CliOptions(backend="mcjax", engine="vllm",
                            engine_tp=2).engine_tp == 2


def test_vllm_tensor_parallel_size_from_engine_tp():
  assert vllm_options.parallel_settings(1) == dict(
      tensor_parallel_size=1, distributed_executor_backend="uni")
  assert vllm_options.parallel_settings(2) == dict(
      tensor_parallel_size=2, distributed_executor_backend="mp")
  for bad in (0, True, 1.5):
    with pytest.raises(ValueError, match="engine tp must be an integer"):
      vllm_options.parallel_settings(bad)
  assert engines_base.engine_tp(runtime.local_mesh(tp=2)) == 2
  assert job_config.GrpoJobConfig(engine="vllm", engine_tp=2).engine_tp == 2


def test_vllm_tp_workers_are_spawned_on_cores_of_their_own():
  def env(tp, environ=None, **kw):
    return vllm_options.worker_environment(
        tp, rpc_dir="/e", environ={} if environ is None else environ, **kw)

  assert env(1, on_cpu=True, cpus=[0, 1]) == {}
  assert env(2, on_cpu=True, cpus=[0, 1]) == {
      "VLLM_WORKER_MULTIPROC_METHOD": "spawn", "VLLM_RPC_BASE_PATH": "/e",
      "PYTHONFAULTHANDLER": "1", "VLLM_CPU_OMP_THREADS_BIND": "0|1"}
  assert env(2, on_cpu=True, cpus=[4, 5, 6, 7, 8])[
      "VLLM_CPU_OMP_THREADS_BIND"] == "4,5|6,7"
  # More workers than cores: they share the cores in turn.
  assert env(4, on_cpu=True, cpus=[0, 1])[
      "VLLM_CPU_OMP_THREADS_BIND"] == "0|1|0|1"
  # Not on CPU: no binding. What the user set is kept.
  assert "VLLM_CPU_OMP_THREADS_BIND" not in env(2, on_cpu=False)
  assert env(2, on_cpu=True, cpus=[0, 1], environ={
      "VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_RPC_BASE_PATH": "/u",
      "VLLM_WORKER_MULTIPROC_METHOD": "spawn", "PYTHONFAULTHANDLER": ""}) == {}


# --- the example: 2 hosts x 4 devices, engine tp 2 ------------------------------


@pytest.fixture(scope="module")
def tp_runs(shared_runs):
  """The engine tp 2 run, and the shared stock and tp 1 runs it equals."""
  flags = [f for f in example_runs.EQUIVALENCE_RUNS["mcjax2"]
           if not f.startswith("--devices_per_host")]
  return {
      "tunix": shared_runs.example(*example_runs.EQUIVALENCE_RUNS["tunix"]),
      "tp1": shared_runs.example(*example_runs.EQUIVALENCE_RUNS["mcjax2"]),
      "tp2": shared_runs.example(*flags, "--devices_per_host=4",
                                 "--engine_tp=2"),
  }


# The tp 2 run trains on 8 devices, the references on 4: the gradient is
# reduced in another float order (tests/test_equivalence_variants.py, same
# cause and tolerance); the engine's layout does not enter the update.
_PARAM_TOLERANCE = example_runs.DEVICE_COUNT_PARAM_TOLERANCE


@pytest.mark.multihost
@pytest.mark.e2e
@pytest.mark.parametrize("ref", ["tunix", "tp1"])
def test_engine_tp2_run_equals(tp_runs, ref):
  got, want = tp_runs["tp2"], tp_runs[ref]
  example_runs.assert_same_rollouts_and_rewards(want, got)
  a = json.loads((want / "records.json").read_text())
  b = json.loads((got / "records.json").read_text())
  assert [r["step"] for r in b] == [r["step"] for r in a] == [1, 2]
  for key in ("loss", "reward_mean"):
    np.testing.assert_allclose([r[key] for r in b], [r[key] for r in a],
                               rtol=1e-6, atol=1e-6, err_msg=key)
  pa, pb = np.load(want / "params.npz"), np.load(got / "params.npz")
  assert sorted(pa.files) == sorted(pb.files)
  for k in pa.files:
    np.testing.assert_allclose(pb[k], pa[k], err_msg=k, **_PARAM_TOLERANCE)
  example_runs.assert_parameters_moved(got)


@pytest.mark.multihost
@pytest.mark.e2e
def test_engine_tp2_run_used_tp_layout(tp_runs):
  """The tp 2 run's hosts each ran one (dp 2, tp 2) engine with split
  parameters; the tp 1 run's, (2, 1) and replicated."""
  for host in (0, 1):
    two = json.loads(
        (tp_runs["tp2"] / f"engine_layout_host{host}.json").read_text())
    one = json.loads(
        (tp_runs["tp1"] / f"engine_layout_host{host}.json").read_text())
    assert two["mesh"] == {"fsdp": 2, "tp": 2}
    assert one["mesh"] == {"fsdp": 2, "tp": 1}
    specs = two["param_specs"]
    assert specs["layers.0.attn.q_proj.w"] == str(P(None, "tp"))
    assert specs["embedder.input_embedding"] == str(P("tp"))
    assert set(one["param_specs"].values()) == {str(P())}
