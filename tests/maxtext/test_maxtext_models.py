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

"""MaxText actor -> Tunix-layout engine: mapping, publication, parity, errors.

In-process on 4 fake CPU devices (tests/conftest.py). Parity tolerance: fp32
logits within 1e-5 absolute (observed ~2e-6 on logits of magnitude ~3;
both sides run the same fp32 math in a different op order).
"""

import os

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

import pytest

from tunix_mcjax.recipes import grpo_job
from tunix_mcjax.maxtext import models as maxtext_models
from tunix_mcjax import publication
from tunix_mcjax import runtime
from tunix_mcjax import rules
from tunix_mcjax.engines import base as engines_base

VOCAB = 256


def _actor(scan_layers: bool, seed: int = 3):
  config = maxtext_models.maxtext_config(
      scan_layers=scan_layers, vocab_size=VOCAB
  )
  mesh = maxtext_models.maxtext_mesh(config)
  return config, mesh, maxtext_models.create_actor(
      config, mesh, pad_id=0, rng_seed=seed
  )


@pytest.fixture(scope="module", params=[True, False],
                ids=["scanned", "unscanned"])
def setup(request):
  config, mesh, actor = _actor(request.param)
  spec = maxtext_models.engine_model_spec(config)
  local = runtime.local_mesh(axis_names=spec.axis_names)
  engine = publication.build_engine_model(
      spec, nnx.state(actor, nnx.Param), local
  )
  return config, mesh, actor, spec, local, engine


def _tokens(batch=2, length=9, seed=0):
  rng = np.random.RandomState(seed)
  tokens = rng.randint(1, VOCAB, (batch, length)).astype(np.int32)
  positions = np.broadcast_to(np.arange(length, dtype=np.int32),
                              (batch, length))
  mask = np.tril(np.ones((batch, length, length), bool))
  return jnp.asarray(tokens), jnp.asarray(positions), jnp.asarray(mask)


def test_layout_is_maxtext(setup):
  config, _, actor, *_ = setup
  names = list(publication.flat_by_name(nnx.state(actor, nnx.Param)))
  if config.scan_layers:
    key = ("['base']['decoder']['layers']['self_attention']['query']"
           "['kernel'].value")
    assert key in names
    x = dict(zip(names, jax.tree.leaves(nnx.state(actor, nnx.Param))))[key]
    # Layers stacked on param_scan_axis, embed dim FSDP-sharded.
    assert x.shape[config.param_scan_axis] == config.base_num_decoder_layers
    assert "fsdp" in str(x.sharding.spec)
  else:
    assert any("['layers_1']" in n for n in names)


def test_engine_logits_equal_actor_logits(setup):
  _, mesh, actor, _, local, engine = setup
  tokens, positions, mask = _tokens()
  with jax.set_mesh(mesh):
    want, _ = actor(tokens, positions, None, mask)
  with engines_base.use_mesh(local):
    got, _ = engine(tokens, positions, None, mask)
  want, got = np.asarray(want), np.asarray(got)
  assert want.shape == got.shape == (2, 9, VOCAB)
  assert np.abs(want).max() > 0.1  # not a degenerate all-zero model
  np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_published_values_are_the_unstacked_trainer_values(setup):
  config, _, actor, spec, local, _ = setup
  params = nnx.state(actor, nnx.Param)
  flat = {k: np.asarray(v) for k, v in publication.flat_by_name(params).items()}
  engine_state = nnx.state(nnx.eval_shape(spec.create), nnx.Param)
  pub = publication.Publisher(
      dst=publication.replicated_like(engine_state, local),
      local_mesh=local,
      mapping=spec.mapping,
  )
  out = publication.flat_by_name(pub(params))
  pub(params)
  # The mapping runs inside the one cached publication program.
  assert pub._gather._cache_size() == 1
  for i in range(config.base_num_decoder_layers):
    if config.scan_layers:
      src = flat["['base']['decoder']['layers']['mlp']['wi_0']['kernel'].value"]
      want = np.take(src, i, axis=config.param_scan_axis)
    else:
      want = flat[
          f"['base']['decoder']['layers_{i}']['mlp']['wi_0']['kernel'].value"]
    got = out[f"['layers'][{i}]['mlp']['gate_proj']['kernel'].value"]
    np.testing.assert_array_equal(np.asarray(got), want)
    assert got.sharding.mesh.devices.tolist() == local.devices.tolist()


def test_unknown_trainer_parameter_is_reported_not_dropped(setup):
  _, _, actor, spec, local, _ = setup
  tree = nnx.to_pure_dict(nnx.state(actor, nnx.Param))
  tree["base"]["extra_head"] = {"kernel": jnp.zeros((2, 2))}
  tree = jax.tree.map(nnx.Param, tree)
  engine_state = nnx.state(nnx.eval_shape(spec.create), nnx.Param)
  pub = publication.Publisher(
      dst=publication.replicated_like(engine_state, local),
      local_mesh=local, mapping=spec.mapping,
  )
  with pytest.raises(KeyError, match="extra_head.*no place in the engine"):
    pub(tree)


def test_pathways_flag_is_refused():
  overrides = dict(maxtext_models.TINY_QWEN3_OVERRIDES, use_pathways=True)
  with pytest.raises(ValueError, match="use_pathways.*Pathways"):
    maxtext_models.maxtext_config(overrides=overrides, vocab_size=VOCAB)


def test_config_leaves_xla_flags_alone(monkeypatch):
  # MaxText's config would set XLA_FLAGS to dump HLO into /tmp/xla_dump,
  # for every process this one starts.
  monkeypatch.delenv("XLA_FLAGS", raising=False)
  maxtext_models.maxtext_config(vocab_size=VOCAB)
  assert "XLA_FLAGS" not in os.environ
  monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
  maxtext_models.maxtext_config(vocab_size=VOCAB)
  assert os.environ["XLA_FLAGS"] == "--xla_cpu_enable_fast_math=false"


def test_non_qwen3_model_is_refused():
  overrides = dict(maxtext_models.TINY_QWEN3_OVERRIDES, model_name="llama2-7b")
  with pytest.raises(ValueError, match="decoder_block=qwen3"):
    maxtext_models.maxtext_config(overrides=overrides, vocab_size=VOCAB)


def test_non_fsdp_mesh_is_refused():
  overrides = dict(maxtext_models.TINY_QWEN3_OVERRIDES,
                   ici_tensor_parallelism=2)
  config = maxtext_models.maxtext_config(overrides=overrides, vocab_size=VOCAB)
  with pytest.raises(ValueError, match="tensor.*FSDP over all devices"):
    maxtext_models.maxtext_mesh(config)


@pytest.mark.parametrize("kwargs, match", [
    (dict(trainer="megatron"), "trainer must be one of"),
    (dict(maxtext_overrides=("base_emb_dim=64",)), "need trainer='maxtext'"),
    (dict(trainer="maxtext", engine="vllm_tpu"), "only these engines take"),
    (dict(trainer="maxtext", engine="vllm", backend="tunix"),
     "Use backend='mcjax'"),
    (dict(trainer="maxtext", maxtext_overrides=("base_emb_dim",)),
     "key=value"),
])
def test_job_config_errors(kwargs, match):
  with pytest.raises(ValueError, match=match):
    grpo_job.GrpoJobConfig(**kwargs)


def test_maxtext_with_vllm_needs_both_in_one_environment():
  problem = rules.trainer_engine("maxtext", "vllm", missing=("vllm",))
  assert "needs maxtext and vllm importable in one Python environment" in (
      problem.message)
  assert "`make venv-maxtext-vllm`" in problem.message
  assert rules.trainer_engine("maxtext", "vllm", missing=()) is None
  assert rules.trainer_engine("tunix", "vllm_tpu") is None
  # The job config applies the rule with this interpreter's modules.
  if rules.missing_modules(("vllm",)):
    with pytest.raises(ValueError, match="make venv-maxtext-vllm"):
      grpo_job.GrpoJobConfig(trainer="maxtext", engine="vllm")
  else:
    grpo_job.GrpoJobConfig(trainer="maxtext", engine="vllm")


def test_rollout_engine_names_an_mcjax_engine_with_its_prefix():
  names = ["native", "vllm", "vllm_tpu"]
  assert rules.rollout_engine("mcjax:vllm", names) is None
  assert rules.mcjax_engine_name("mcjax:vllm") == "vllm"
  assert rules.mcjax_engine_name("vanilla") == "native"
  problem = rules.rollout_engine("mcjax:sglang", names)
  assert "'mcjax:vllm'" in problem.message
  # Bare 'vllm' is Tunix's name: the platform's host-local vLLM.
  assert rules.rollout_engine("vllm", names) is None
