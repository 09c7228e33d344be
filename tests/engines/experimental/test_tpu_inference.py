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

"""The pure-JAX part of the tpu-inference engine (its mapping), on CPU.

tpu-inference itself cannot run here (TPU only), so the engine state is a
synthetic nnx.State with the parameter names, shapes and shardings of
tpu-inference's flax_nnx Qwen3 (`tpu_inference/models/jax/qwen3.py`) on a
("data", "model") mesh of this host's 4 CPU devices, tensor-parallel over
"model". The trainer side is a real Tunix Qwen3 published the way the
cluster does it: replicated on the host's ("fsdp", "tp") engine mesh.
"""

import jax
import jax.numpy as jnp
from flax import nnx
import numpy as np
import pytest

from tunix_mcjax import tree_paths
from tunix_mcjax.recipes import models
from tunix_mcjax.engines.experimental import tpu_inference as ti
from tunix_mcjax.engines.experimental import tpu_inference_weights as tiw

pytestmark = [pytest.mark.slow]

P = jax.sharding.PartitionSpec
TP = 4


@pytest.fixture(scope="module")
def devices():
  devs = jax.devices()
  if len(devs) < TP:
    pytest.fail(f"needs {TP} CPU devices (tests/conftest.py); JAX"
                f" was initialised with {len(devs)} before it ran.")
  return devs[:TP]


def _config(tied=False, **kw):
  # head_dim 64: tpu-inference keeps it unpadded. 2 KV heads over TP=4 are
  # replicated; vocab 18 is padded to 20.
  return models.tiny_qwen3_config(use_tied_embedding=tied, head_dim=64,
                                  vocab_size=18, **kw)


def _engine_spec(config, tp=TP):
  """name -> (shape, PartitionSpec) of tpu-inference's Qwen3 state."""
  d, f, n, h = (config.embed_dim, config.hidden_dim, config.num_heads,
                config.head_dim)
  k = max(config.num_kv_heads, tp)
  v = -(-config.vocab_size // tp) * tp
  spec = {"model.embed_tokens.weight": ((v, d), P("model", None)),
          "model.norm.weight": ((d,), P(None))}
  for i in range(config.num_layers):
    pre = f"model.layers.{i}."
    spec.update({
        pre + "input_layernorm.weight": ((d,), P(None)),
        pre + "post_attention_layernorm.weight": ((d,), P(None)),
        pre + "self_attn.q_proj.weight": ((d, n, h), P(None, "model", None)),
        pre + "self_attn.k_proj.weight": ((d, k, h), P(None, "model", None)),
        pre + "self_attn.v_proj.weight": ((d, k, h), P(None, "model", None)),
        pre + "self_attn.o_proj.weight": ((n, h, d), P("model", None, None)),
        pre + "self_attn.q_norm.weight": ((h,), P(None)),
        pre + "self_attn.k_norm.weight": ((h,), P(None)),
        pre + "mlp.gate_proj.weight": ((d, f), P(None, "model")),
        pre + "mlp.up_proj.weight": ((d, f), P(None, "model")),
        pre + "mlp.down_proj.weight": ((f, d), P("model", None)),
    })
  if not config.use_tied_embedding:
    spec["lm_head.weight"] = ((d, v), P(None, "model"))
  return spec


def _nest(flat):
  root = {}
  for name, leaf in flat.items():
    node = root
    parts = [int(p) if p.isdigit() else p for p in name.split(".")]
    for p in parts[:-1]:
      node = node.setdefault(p, {})
    node[parts[-1]] = leaf
  return root


def _engine_state(config, devices, dtype=jnp.bfloat16):
  mesh = jax.sharding.Mesh(np.array(devices).reshape(1, TP),
                           ("data", "model"))
  flat = {}
  for i, (name, (shape, spec)) in enumerate(
      sorted(_engine_spec(config).items())):
    value = jnp.full(shape, -7.0 - i, dtype)  # Recognisably stale.
    flat[name] = nnx.Param(
        jax.device_put(value, jax.sharding.NamedSharding(mesh, spec)))
  return nnx.State(_nest(flat))


def _published(config, devices, seed=3):
  """A Tunix Qwen3's params as publication delivers them to a host."""
  mesh = jax.sharding.Mesh(np.array(devices).reshape(TP, 1), ("fsdp", "tp"))
  model = models.create_tiny_model(config, seed=seed)
  rep = jax.sharding.NamedSharding(mesh, P())
  return jax.tree.map(lambda x: jax.device_put(x, rep),
                      nnx.state(model, nnx.Param))


def _np(flat_tree):
  return {n: np.asarray(x, np.float32)
          for n, x in tree_paths.flat_dotted(flat_tree)[0].items()}


@pytest.mark.parametrize("tied", [False, True])
def test_local_write_values_layout_and_semantics(devices, tied):
  config = _config(tied=tied)
  state = _engine_state(config, devices)
  old = tree_paths.flat_dotted(state)[0]
  params = _published(config, devices)
  src = _np(params)
  plan = tiw.qwen3_plan(config, tp_size=TP)

  new_state = tiw.local_write(state, params, plan=plan)

  new = tree_paths.flat_dotted(new_state)[0]
  assert sorted(new) == sorted(old)
  for name, x in new.items():
    assert x.shape == old[name].shape and x.dtype == jnp.bfloat16, name
    assert x.sharding == old[name].sharding, name
  got = {n: np.asarray(x.astype(jnp.float32)) for n, x in new.items()}
  bf16 = lambda a: np.asarray(jnp.asarray(a, jnp.bfloat16), np.float32)

  # Embedding: rows padded with zeros to the TP-aligned vocabulary.
  emb = got["model.embed_tokens.weight"]
  np.testing.assert_array_equal(emb[:18], bf16(src["embedder.input_embedding"]))
  assert not emb[18:].any()
  for i in range(config.num_layers):
    pre, t = f"model.layers.{i}.", f"layers.{i}."
    np.testing.assert_array_equal(got[pre + "self_attn.q_proj.weight"],
                                  bf16(src[t + "attn.q_proj.w"]))
    np.testing.assert_array_equal(got[pre + "mlp.down_proj.weight"],
                                  bf16(src[t + "mlp.down_proj.kernel"]))
    np.testing.assert_array_equal(got[pre + "self_attn.k_norm.weight"],
                                  bf16(src[t + "attn.k_norm.w"]))
    # GQA semantics survive the KV-head replication: query head j reads KV
    # head j // (N/K) in Tunix and KV head j // (N/K') in the engine.
    n, kv, kv_eng = config.num_heads, config.num_kv_heads, TP
    for name in ("k_proj", "v_proj"):
      tunix_kv = bf16(src[t + f"attn.{name}.w"])
      eng_kv = got[pre + f"self_attn.{name}.weight"]
      for j in range(n):
        np.testing.assert_array_equal(
            eng_kv[:, j // (n // kv_eng)], tunix_kv[:, j // (n // kv)])
  if not tied:
    head = got["lm_head.weight"]
    np.testing.assert_array_equal(head[:, :18], bf16(src["lm_head.w"]))
    assert not head[:, 18:].any()


def test_one_dispatch_one_compile_and_donation(devices):
  config = _config()
  plan = tiw.qwen3_plan(config, tp_size=TP)
  state = _engine_state(config, devices)
  old_leaves = jax.tree.leaves(state)
  params = _published(config, devices, seed=1)
  state = tiw.local_write(state, params, plan=plan)
  # The old engine buffers were donated to the write (in-place update).
  assert all(x.is_deleted() for x in old_leaves)
  writer = next(w for k, w in tiw._WRITERS.items() if k[0] == plan)  # pylint: disable=protected-access
  before = writer.num_dispatches
  params2 = _published(config, devices, seed=2)
  state = tiw.local_write(state, params2, plan=plan)
  # One program per publication, compiled once: not one dispatch per layer
  # and parameter.
  assert writer.num_dispatches == before + 1
  assert writer._fn._cache_size() == 1  # pylint: disable=protected-access
  want = _np(params2)["layers.1.mlp.gate_proj.kernel"]
  got = tree_paths.flat_dotted(state)[0]["model.layers.1.mlp.gate_proj.weight"]
  np.testing.assert_allclose(np.asarray(got, np.float32), want, rtol=1e-2,
                             atol=1e-2)


@pytest.mark.parametrize("layer_axis", [0, 1])
def test_scanned_trainer_layers_are_unstacked_in_the_same_program(
    devices, layer_axis):
  config = _config(num_layers=3)
  per_layer = _published(config, devices)
  flat = tree_paths.flat_dotted(per_layer)[0]
  scanned = {}
  for name, x in flat.items():
    parts = name.split(".")
    if parts[0] == "layers":
      key = ".".join(["layers"] + parts[2:])
      scanned.setdefault(key, []).append(x)
    else:
      scanned[name] = x
  scanned = {
      k: (jnp.stack(v, axis=layer_axis) if isinstance(v, list) else v)
      for k, v in scanned.items()
  }
  assert scanned["layers.attn.q_proj.w"].shape[layer_axis] == 3
  a = tiw.local_write(_engine_state(config, devices), per_layer,
                     plan=tiw.qwen3_plan(config, tp_size=TP))
  b = tiw.local_write(
      _engine_state(config, devices), _nest(scanned),
      plan=tiw.qwen3_plan(config, tp_size=TP, scanned=True,
                         layer_axis=layer_axis))
  fa, fb = tree_paths.flat_dotted(a)[0], tree_paths.flat_dotted(b)[0]
  for name in fa:
    np.testing.assert_array_equal(np.asarray(fa[name], np.float32),
                                  np.asarray(fb[name], np.float32), name)


def test_ndh_q_proj_layout(devices):
  config = _config()
  spec = _engine_spec(config)
  for i in range(config.num_layers):
    name = f"model.layers.{i}.self_attn.q_proj.weight"
    (d, n, h), _ = spec[name]
    spec[name] = ((n, d, h), P("model", None, None))
  mesh = jax.sharding.Mesh(np.array(devices).reshape(1, TP),
                           ("data", "model"))
  state = nnx.State(_nest({
      n: nnx.Param(jax.device_put(jnp.zeros(s, jnp.float32),
                                  jax.sharding.NamedSharding(mesh, p)))
      for n, (s, p) in spec.items()}))
  params = _published(config, devices)
  out = tiw.local_write(state, params, plan=tiw.qwen3_plan(
      config, tp_size=TP, q_proj_layout="NDH"))
  got = np.asarray(
      tree_paths.flat_dotted(out)[0]["model.layers.0.self_attn.q_proj.weight"])
  want = _np(params)["layers.0.attn.q_proj.w"].transpose(1, 0, 2)
  np.testing.assert_array_equal(got, want)


def test_mismatches_name_the_parameter(devices):
  config = _config()
  plan = tiw.qwen3_plan(config, tp_size=TP)
  params = _published(config, devices)

  # An engine built for another width.
  other = _engine_state(_config(hidden_dim=96), devices)
  with pytest.raises(ValueError, match=r"model\.layers\.0\.mlp\.down_proj"
                     r"\.weight.*layers\.0\.mlp\.down_proj\.kernel"):
    tiw.local_write(other, params, plan=plan, donate=False)

  # A trainer tree without one parameter.
  flat = tree_paths.flat_dotted(params)[0]
  del flat["layers.1.attn.v_proj.w"]
  with pytest.raises(ValueError, match=r"layers\.1\.attn\.v_proj\.w"):
    tiw.local_write(_engine_state(config, devices), _nest(flat), plan=plan,
                   donate=False)

  # A trainer parameter the engine has no place for (untied head, tied engine).
  with pytest.raises(ValueError, match=r"lm_head\.w"):
    tiw.local_write(_engine_state(_config(tied=True), devices), params,
                   plan=tiw.qwen3_plan(_config(tied=True), tp_size=TP),
                   donate=False)

  # An engine parameter the plan does not write would keep stale weights.
  eng = tree_paths.flat_dotted(_engine_state(config, devices))[0]
  eng["model.layers.0.self_attn.extra.weight"] = eng["model.norm.weight"]
  with pytest.raises(ValueError, match=r"self_attn\.extra\.weight"):
    tiw.local_write(nnx.State(_nest(eng)), params, plan=plan, donate=False)


# --- LoRA: adapters merged into their base weights in the same program -----

RANK, ALPHA = 4, 8.0


@pytest.fixture(scope="module")
def lora_published(devices):
  """A LoRA Tunix Qwen3 (rank 4, all seven projections, B made non-zero) as
  publication delivers it: (base weights, adapters), host-replicated."""
  from tunix.cli.utils import model as tunix_model_lib  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import rules  # pylint: disable=g-import-not-at-top

  model = tunix_model_lib.apply_lora_to_model(
      models.create_tiny_model(_config(), seed=3), None,
      {"rank": RANK, "alpha": ALPHA,
       "module_path": rules.DEFAULT_LORA_MODULES})
  keys = iter(jax.random.split(jax.random.key(0), 100))
  nnx.update(model, jax.tree.map(
      lambda x: jax.random.normal(next(keys), x.shape, x.dtype) * 0.1,
      nnx.state(model, nnx.LoRAParam)))
  mesh = jax.sharding.Mesh(np.array(devices).reshape(TP, 1), ("fsdp", "tp"))
  rep = lambda t: jax.tree.map(
      lambda x: jax.device_put(x, jax.sharding.NamedSharding(mesh, P())), t)
  return (rep(nnx.state(model, nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam)))),
          rep(nnx.state(model, nnx.LoRAParam)))


def test_lora_adapters_are_merged_in_the_same_program(devices,
                                                      lora_published):
  base, lora = lora_published
  config = _config()
  src = {**_np(base), **_np(lora)}
  adapters = [n for n in src if n.endswith("_lora_a")]
  assert len(adapters) == config.num_layers * 7
  plan = tiw.with_lora(tiw.qwen3_plan(config, tp_size=TP), set(
      tree_paths.flat_params(base)) | set(tree_paths.flat_params(lora)),
                      scale=ALPHA / RANK)
  assert sum(t.lora_a is not None for t in plan) == len(adapters)
  # What a LoRA actor publishes: only the adapters; the engine holds the
  # base. One program per publication, as without LoRA.
  state = tiw.local_write(_engine_state(config, devices), lora, plan=plan,
                         base_params=base)
  writer = next(w for k, w in tiw._WRITERS.items() if k[0] == plan)  # pylint: disable=protected-access
  assert writer.num_dispatches == 1
  got = {n: np.asarray(x, np.float32)
         for n, x in tree_paths.flat_dotted(state)[0].items()}
  bf16 = lambda a: np.asarray(jnp.asarray(a, jnp.bfloat16), np.float32)

  def merged(weight):  # W + alpha/rank * A @ B, in numpy.
    a, b = src[weight + "_lora_a"], src[weight + "_lora_b"]
    return src[weight] + ALPHA / RANK * np.tensordot(a, b, 1)

  n, kv = config.num_heads, config.num_kv_heads
  for i in range(config.num_layers):
    pre, t = f"model.layers.{i}.", f"layers.{i}."
    for eng, trainer in (("self_attn.q_proj", "attn.q_proj.w"),
                         ("self_attn.o_proj", "attn.o_proj.w"),
                         ("mlp.gate_proj", "mlp.gate_proj.kernel"),
                         ("mlp.up_proj", "mlp.up_proj.kernel"),
                         ("mlp.down_proj", "mlp.down_proj.kernel")):
      want = merged(t + trainer)
      # The adapters matter (else the comparison is vacuous).
      assert np.abs(want - src[t + trainer]).max() > 1e-2
      np.testing.assert_allclose(got[pre + eng + ".weight"], bf16(want),
                                 rtol=1e-2, atol=1e-2, err_msg=eng)
    # Merged K/V, then replicated for tensor parallelism (GQA semantics).
    for name in ("k_proj", "v_proj"):
      want = merged(t + f"attn.{name}.w")
      eng_kv = got[pre + f"self_attn.{name}.weight"]
      for j in range(n):
        np.testing.assert_allclose(eng_kv[:, j // (n // TP)],
                                   bf16(want[:, j // (n // kv)]),
                                   rtol=1e-2, atol=1e-2)
    # Not adapted: the base weight as is.
    np.testing.assert_array_equal(got[pre + "self_attn.k_norm.weight"],
                                  bf16(src[t + "attn.k_norm.w"]))
  # The full tree (base + adapters in one) gives the same engine state.
  full = tiw.local_write(_engine_state(config, devices), _nest({
      **tree_paths.flat_dotted(base)[0], **tree_paths.flat_dotted(lora)[0]}),
                        plan=plan)
  for name, x in tree_paths.flat_dotted(full)[0].items():
    np.testing.assert_array_equal(np.asarray(x, np.float32), got[name], name)


def test_lora_mismatches_are_refused(devices, lora_published):
  base, lora = lora_published
  config = _config()
  paths = set(tree_paths.flat_params(base)) | set(tree_paths.flat_params(lora))
  # An adapter on a weight the engine does not take would be dropped.
  plan = tiw.qwen3_plan(config, tp_size=TP)
  with pytest.raises(ValueError, match=r"layers\.0\.mlp\.up_proj\.kernel"):
    tiw.with_lora([t for t in plan
                  if t.source != "layers.0.mlp.up_proj.kernel"], paths,
                 scale=2.0)
  # An adapter of another shape names the engine parameter.
  plan = tiw.with_lora(plan, paths, scale=2.0)
  flat = tree_paths.flat_dotted(lora)[0]
  flat["layers.1.attn.q_proj.w_lora_b"] = jnp.zeros((RANK + 1, 4, 64))
  with pytest.raises(ValueError, match=r"model\.layers\.1\.self_attn\.q_proj"
                     r"\.weight.*does not give"):
    tiw.local_write(_engine_state(config, devices), _nest(flat), plan=plan,
                   base_params=base, donate=False)
  # Without the base, the adapters alone cannot be written.
  with pytest.raises(ValueError, match="missing from the published tree"):
    tiw.local_write(_engine_state(config, devices), lora, plan=plan,
                   donate=False)
  with pytest.raises(NotImplementedError, match="scanned"):
    tiw.TargetParam(name="x", source="layers.attn.q_proj.w", layer=0,
                   layer_axis=0, lora_a="a", lora_b="b", lora_scale=2.0)


def test_plan_rejects_layouts_that_would_compute_differently():
  with pytest.raises(ValueError, match="head_dim 32"):
    tiw.qwen3_plan(models.tiny_qwen3_config(head_dim=32))
  with pytest.raises(ValueError, match="query heads"):
    tiw.qwen3_plan(_config(), tp_size=8)


def test_registry_marks_the_engine_experimental(caplog):
  from tunix_mcjax import engines  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.registry import ENGINES  # pylint: disable=g-import-not-at-top

  assert ENGINES.get("vllm_tpu") is ti.TpuInferenceEngine
  assert engines.experimental_engines() == ["vllm_tpu"]
  assert not engines.NativeEngine.experimental
  # Constructing it says so first, whatever fails next (no TPU here).
  with caplog.at_level("WARNING"):
    with pytest.raises((RuntimeError, ValueError)):
      ti.TpuInferenceEngine(tokenizer=None)
  assert "never run on a TPU" in caplog.text
