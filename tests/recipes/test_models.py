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

"""Tests of the tiny Qwen3, the toy tokenizer and the HF checkpoint loader.

The loader is checked against an independent numpy implementation of Qwen3
on a checkpoint this file writes itself (torch is not needed).
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
from typing import Any

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tunix.generate import sampler as sampler_lib
from tunix.generate import tokenizer_adapter

import hf_qwen3

from tunix_mcjax.recipes import models
from tunix_mcjax.recipes import tasks

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def _mesh(fsdp: int, tp: int = 1) -> jax.sharding.Mesh:
  if jax.device_count() < fsdp * tp:
    pytest.skip(
        f"needs {fsdp * tp} devices, have {jax.device_count()} (tests/conftest"
        " sets 4 unless JAX started before it)"
    )
  devices = np.array(jax.devices()[: fsdp * tp]).reshape(fsdp, tp)
  return jax.sharding.Mesh(devices, ("fsdp", "tp"))


def _params(model: nnx.Module) -> dict[str, np.ndarray]:
  flat = jax.tree_util.tree_flatten_with_path(nnx.state(model, nnx.Param))[0]
  return {jax.tree_util.keystr(p): np.asarray(v) for p, v in flat}


def _causal_inputs(tokens: np.ndarray) -> dict[str, Any]:
  b, t = tokens.shape
  return dict(
      input_tokens=jnp.asarray(tokens, jnp.int32),
      positions=jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t)),
      cache=None,
      attention_mask=jnp.broadcast_to(
          jnp.tril(jnp.ones((t, t), jnp.bool_)), (b, t, t)
      ),
  )


# ----------------------------------------------------------------------------
# ToyTokenizer.


def test_tokenizer_round_trip():
  tok = models.ToyTokenizer()
  text = "abc:kj"
  ids = tok.encode(text)
  assert len(ids) == len(text)
  assert min(ids) >= 4 and max(ids) < tok.vocab_size
  assert tok.decode(ids) == text
  assert tok.encode(text, add_bos=True, add_eos=True) == [1, *ids, 2]
  assert tok.vocab_size == len(tok) == 4 + len(models.TOY_ALPHABET)


def test_tokenizer_decode_stops_at_eos_and_skips_pad_and_bos():
  tok = models.ToyTokenizer()
  a, b = tok.encode("ab")
  assert tok.decode([0, 0, 1, a, 0, b, 2, a, a]) == "ab"
  assert tok.decode(np.array([[1, a], [b, 2]])) == "ab"
  assert tok.decode(jnp.array([a, b, 0, 0])) == "ab"
  assert tok.decode([]) == ""


def test_tokenizer_unknown_characters_and_ids():
  tok = models.ToyTokenizer()
  assert tok.encode("a?z") == [tok.encode("a")[0], 3, 3]
  # Ids past the vocabulary come from a model whose vocab was padded.
  assert tok.decode([tok.vocab_size + 5]) == "\N{REPLACEMENT CHARACTER}"
  assert tok.decode([3]) == "\N{REPLACEMENT CHARACTER}"


def test_tokenizer_rejects_bad_alphabets():
  with pytest.raises(ValueError, match="non-empty"):
    models.ToyTokenizer("")
  with pytest.raises(ValueError, match="duplicate"):
    models.ToyTokenizer("abca")


def test_tokenizer_covers_toy_task_and_printable_text():
  tok = models.ToyTokenizer()
  batch = tasks.toy_dataset(num_batches=1, batch_size=32, seed=0)[0]
  for text in [*batch["prompts"], *batch["answer"]]:
    assert models.UNK_ID not in tok.encode(text), text
  wide = models.ToyTokenizer(models.PRINTABLE_ALPHABET)
  text = "Q: 12 + 3,000 = ?\n#### 3012"
  assert wide.decode(wide.encode(text)) == text


def test_tokenizer_through_tunix_adapter():
  tok = models.ToyTokenizer()
  adapter = tokenizer_adapter.TokenizerAdapter(tok)
  assert adapter._tokenizer_type == tokenizer_adapter.TokenizerType.NONE  # pylint: disable=protected-access
  assert (adapter.bos_id(), adapter.eos_id(), adapter.pad_id()) == (1, 2, 0)
  assert adapter.encode("b:") == tok.encode("b:")
  assert adapter.decode(tok.encode("b:") + [2, 5]) == "b:"
  assert adapter.dedup_bos_ids([1, 1, 1, 4]) == [1, 4]


def test_tokenizer_drives_tunix_sampler():
  tok = models.ToyTokenizer()
  cfg = models.tiny_qwen3_config()
  model = models.create_tiny_model(cfg, seed=0)
  sampler = sampler_lib.Sampler(
      transformer=model,
      tokenizer=tok,
      cache_config=sampler_lib.CacheConfig(
          cache_size=32,
          num_layers=cfg.num_layers,
          num_kv_heads=cfg.num_kv_heads,
          head_dim=cfg.head_dim,
      ),
  )
  out = sampler(
      ["a:", "bc:"],
      max_generation_steps=6,
      max_prompt_length=4,
      temperature=1.0,
      top_p=1.0,
      seed=jax.random.PRNGKey(0),
  )
  assert len(out.text) == 2
  for text, tokens in zip(out.text, out.tokens):
    assert len(text) <= 6
    assert text == tok.decode(tokens)
  # Prompts are left padded with pad_id and start with bos.
  assert out.padded_prompt_tokens.tolist() == [
      [0, 1, *tok.encode("a:")],
      [1, *tok.encode("bc:")],
  ]


# ----------------------------------------------------------------------------
# Tiny model.


def test_tiny_config_defaults_and_overrides():
  cfg = models.tiny_qwen3_config()
  assert cfg.vocab_size == models.ToyTokenizer().vocab_size
  assert cfg.use_tied_embedding
  assert cfg.num_heads % cfg.num_kv_heads == 0
  assert cfg.shd_config.q_weight_dnh == ("fsdp", "tp", None)
  cfg = models.tiny_qwen3_config(num_layers=1, vocab_size=64)
  assert (cfg.num_layers, cfg.vocab_size) == (1, 64)
  with pytest.raises(ValueError, match="unknown fields"):
    models.tiny_qwen3_config(num_layer=1)
  with pytest.raises(ValueError, match="multiple of"):
    models.tiny_qwen3_config(num_heads=3, num_kv_heads=2)


def test_tiny_model_forward_shape():
  cfg = models.tiny_qwen3_config()
  model = models.create_tiny_model(cfg, seed=0)
  tokens = np.array([[1, 4, 5, 15], [1, 6, 7, 15]])
  logits, cache = model(**_causal_inputs(tokens))
  assert logits.shape == (2, 4, cfg.vocab_size)
  assert logits.dtype == jnp.float32
  assert cache is None
  assert np.isfinite(np.asarray(logits)).all()


def test_tiny_model_is_deterministic_and_seed_dependent():
  cfg = models.tiny_qwen3_config()
  a = _params(models.create_tiny_model(cfg, seed=5))
  b = _params(models.create_tiny_model(cfg, seed=5))
  c = _params(models.create_tiny_model(cfg, seed=6))
  assert a.keys() == b.keys() == c.keys()
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)
  emb = "['embedder']['input_embedding'].value"
  assert not np.array_equal(a[emb], c[emb])


def test_tiny_model_mlps_are_trainable():
  # Tunix initialises MLP kernels to zero, where their gradients vanish.
  cfg = models.tiny_qwen3_config()
  model = models.create_tiny_model(cfg, seed=0)
  for layer in model.layers:
    for proj in (layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj):
      assert np.std(np.asarray(proj.kernel[...])) > 0.01
  tokens = np.array([[1, 4, 5, 15]])

  def loss(m):
    return m(**_causal_inputs(tokens))[0].sum()

  grads = nnx.grad(loss)(model)
  g = np.asarray(grads.layers[0].mlp.gate_proj.kernel[...])
  assert np.abs(g).max() > 0


@pytest.mark.parametrize("fsdp,tp", [(4, 1), (2, 2)])
def test_sharded_creation_matches_unsharded(fsdp, tp):
  cfg = models.tiny_qwen3_config()
  mesh = _mesh(fsdp, tp)
  sharded = models.create_tiny_model(cfg, seed=3, mesh=mesh)
  plain = _params(models.create_tiny_model(cfg, seed=3))
  state = nnx.state(sharded, nnx.Param)
  flat = jax.tree_util.tree_flatten_with_path(state)[0]
  assert {jax.tree_util.keystr(p) for p, _ in flat} == plain.keys()
  for path, arr in flat:
    key = jax.tree_util.keystr(path)
    assert isinstance(arr.sharding, jax.sharding.NamedSharding), key
    assert arr.sharding.mesh == mesh, key
    np.testing.assert_array_equal(np.asarray(arr), plain[key], err_msg=key)
  q = sharded.layers[0].attn.q_proj.w[...]
  assert q.sharding.spec == jax.sharding.PartitionSpec("fsdp", "tp", None)
  assert q.addressable_shards[0].data.shape == (
      cfg.embed_dim // fsdp,
      cfg.num_heads // tp,
      cfg.head_dim,
  )
  # The sharded model runs and agrees with the unsharded one.
  tokens = np.array([[1, 4, 5, 15]] * 4)
  got = sharded(**_causal_inputs(tokens))[0]
  want = models.create_tiny_model(cfg, seed=3)(**_causal_inputs(tokens))[0]
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_mesh_errors_say_what_to_change():
  cfg = models.tiny_qwen3_config()
  devices = np.array(jax.devices()[:1]).reshape(1, 1)
  with pytest.raises(ValueError, match="lack"):
    models.create_tiny_model(
        cfg, seed=0, mesh=jax.sharding.Mesh(devices, ("data", "model"))
    )
  explicit = jax.sharding.Mesh(
      devices,
      ("fsdp", "tp"),
      axis_types=(jax.sharding.AxisType.Explicit,) * 2,
  )
  with pytest.raises(ValueError, match="Auto"):
    models.create_tiny_model(cfg, seed=0, mesh=explicit)


# ----------------------------------------------------------------------------
# Hugging Face checkpoints.

_HF_VOCAB = 32


def write_tiny_hf_checkpoint(
    directory: pathlib.Path,
    *,
    tied: bool,
    seed: int = 0,
    rope_theta: float = 1e6,
    drop: tuple[str, ...] = (),
    half_matrices: bool = False,
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
  """Writes a random tiny Qwen3 checkpoint with HF names; returns it.

  Args:
    directory: Where to write.
    tied: tie_word_embeddings (no lm_head.weight when true).
    seed: Weight seed.
    rope_theta: Written to config.json.
    drop: Tensor names to leave out of the file.
    half_matrices: Store 2-D tensors as float16 and norms as float32 (a
      mixed-dtype file); the returned weights hold the stored values.

  Returns:
    (weights as written, config.json as a dict).
  """
  # pylint: disable=g-import-not-at-top
  import tokenizers
  from tokenizers import decoders, pre_tokenizers
  import transformers
  # pylint: enable=g-import-not-at-top

  weights, hf = hf_qwen3.write_qwen3_weights(
      directory,
      transformers.Qwen3Config(
          vocab_size=_HF_VOCAB,
          hidden_size=32,
          intermediate_size=48,
          num_hidden_layers=2,
          num_attention_heads=4,
          num_key_value_heads=2,
          head_dim=16,  # != hidden_size / heads: the loader must read it.
          rope_theta=rope_theta,
          rms_norm_eps=1e-6,
          tie_word_embeddings=tied,
          bos_token_id=1,
          eos_token_id=2,
          pad_token_id=0,
      ),
      seed=seed,
      drop=drop,
      half_matrices=half_matrices,
  )

  vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
  vocab.update({c: i + 4 for i, c in enumerate("abcdefghij :0123456789")})
  tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, "<unk>"))
  tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
  tok.decoder = decoders.Fuse()
  transformers.PreTrainedTokenizerFast(
      tokenizer_object=tok,
      bos_token="<s>",
      eos_token="</s>",
      pad_token="<pad>",
      unk_token="<unk>",
  ).save_pretrained(directory)
  return weights, hf


def _rms(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
  return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _rope(x: np.ndarray, theta: float) -> np.ndarray:
  """Rotate-half RoPE as in HF Qwen3; x is [T, heads, head_dim]."""
  t, _, hd = x.shape
  inv = 1.0 / theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
  ang = np.arange(t, dtype=np.float64)[:, None] * inv[None, :]
  cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
  x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
  return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def numpy_qwen3_logits(
    weights: dict[str, np.ndarray], hf: dict[str, Any], tokens: list[int]
) -> np.ndarray:
  """Reference Qwen3 forward pass (float64) straight from HF tensors."""
  w = {k: v.astype(np.float64) for k, v in weights.items()}
  nh, nkv = hf["num_attention_heads"], hf["num_key_value_heads"]
  hd, eps = hf["head_dim"], hf["rms_norm_eps"]
  theta = hf["rope_parameters"]["rope_theta"]
  t = len(tokens)
  x = w["model.embed_tokens.weight"][tokens]
  causal = np.tril(np.ones((t, t), bool))
  for i in range(hf["num_hidden_layers"]):
    p = f"model.layers.{i}."
    h = _rms(x, w[p + "input_layernorm.weight"], eps)
    q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(t, nh, hd)
    k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(t, nkv, hd)
    v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(t, nkv, hd)
    q = _rope(_rms(q, w[p + "self_attn.q_norm.weight"], eps), theta)
    k = _rope(_rms(k, w[p + "self_attn.k_norm.weight"], eps), theta)
    k, v = np.repeat(k, nh // nkv, axis=1), np.repeat(v, nh // nkv, axis=1)
    s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd)
    s = np.where(causal[None], s, -np.inf)
    a = np.exp(s - s.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    o = np.einsum("hts,shd->thd", a, v).reshape(t, nh * hd)
    x = x + o @ w[p + "self_attn.o_proj.weight"].T
    h = _rms(x, w[p + "post_attention_layernorm.weight"], eps)
    g = h @ w[p + "mlp.gate_proj.weight"].T
    u = h @ w[p + "mlp.up_proj.weight"].T
    x = x + (g / (1 + np.exp(-g)) * u) @ w[p + "mlp.down_proj.weight"].T
  x = _rms(x, w["model.norm.weight"], eps)
  head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
  return x @ head.T


@pytest.mark.parametrize("tied", [True, False])
def test_load_hf_qwen3_matches_numpy_reference(tmp_path, tied):
  weights, hf = write_tiny_hf_checkpoint(tmp_path / "ck", tied=tied, seed=1)
  model, tokenizer, cfg = models.load_hf_qwen3(
      str(tmp_path / "ck"), mesh=None, dtype=jnp.float32
  )
  assert os.environ.get("HF_HUB_OFFLINE") == "1"
  assert (cfg.num_layers, cfg.embed_dim, cfg.hidden_dim) == (2, 32, 48)
  assert (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (4, 2, 16)
  assert cfg.vocab_size == _HF_VOCAB and cfg.use_tied_embedding == tied
  assert hasattr(model, "lm_head") != tied

  alone = models.load_hf_qwen3_tokenizer(tmp_path / "ck")
  assert type(alone) is type(tokenizer)

  text = "abc 12:"
  ids = tokenizer.encode(text, add_special_tokens=False)
  assert alone.encode(text, add_special_tokens=False) == ids
  assert tokenizer.decode(ids) == text
  adapter = tokenizer_adapter.TokenizerAdapter(tokenizer)
  assert adapter._tokenizer_type == tokenizer_adapter.TokenizerType.HF  # pylint: disable=protected-access
  assert (adapter.bos_id(), adapter.eos_id(), adapter.pad_id()) == (1, 2, 0)

  tokens = [1, *ids]
  got = np.asarray(model(**_causal_inputs(np.array([tokens])))[0][0])
  want = numpy_qwen3_logits(weights, hf, tokens)
  assert np.std(want) > 0.1  # Logits carry signal, not ~0 everywhere.
  np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)

  # Parameters round-trip exactly (layout transforms only).
  np.testing.assert_array_equal(
      np.asarray(model.layers[1].attn.q_proj.w[...]),
      weights["model.layers.1.self_attn.q_proj.weight"].T.reshape(32, 4, 16),
  )


def test_load_hf_qwen3_sharded_matches_unsharded(tmp_path):
  write_tiny_hf_checkpoint(tmp_path / "ck", tied=False, seed=2)
  mesh = _mesh(4, 1)
  sharded, _, _ = models.load_hf_qwen3(str(tmp_path / "ck"), mesh=mesh)
  plain, _, _ = models.load_hf_qwen3(str(tmp_path / "ck"), mesh=None)
  want = _params(plain)
  flat = jax.tree_util.tree_flatten_with_path(nnx.state(sharded, nnx.Param))[0]
  assert {jax.tree_util.keystr(p) for p, _ in flat} == want.keys()
  for path, arr in flat:
    key = jax.tree_util.keystr(path)
    assert arr.sharding.mesh == mesh, key
    np.testing.assert_array_equal(np.asarray(arr), want[key], err_msg=key)
  emb = sharded.embedder.input_embedding[...]
  assert emb.addressable_shards[0].data.shape == (_HF_VOCAB, 32 // 4)


def test_load_hf_qwen3_bfloat16(tmp_path):
  weights, _ = write_tiny_hf_checkpoint(tmp_path / "ck", tied=True)
  model, _, cfg = models.load_hf_qwen3(
      str(tmp_path / "ck"), mesh=None, dtype=jnp.bfloat16
  )
  assert cfg.param_dtype == jnp.bfloat16
  emb = model.embedder.input_embedding[...]
  assert emb.dtype == jnp.bfloat16
  np.testing.assert_allclose(
      np.asarray(emb, np.float32),
      weights["model.embed_tokens.weight"],
      rtol=1e-2,
  )


def test_load_hf_qwen3_mixed_dtype_file(tmp_path):
  # Tunix's fast loader would read the float32 norms as float16 pairs.
  weights, hf = write_tiny_hf_checkpoint(
      tmp_path / "ck", tied=True, half_matrices=True
  )
  model, _, _ = models.load_hf_qwen3(str(tmp_path / "ck"), mesh=None)
  np.testing.assert_array_equal(
      np.asarray(model.final_norm.w[...]), weights["model.norm.weight"]
  )
  np.testing.assert_array_equal(
      np.asarray(model.embedder.input_embedding[...]),
      weights["model.embed_tokens.weight"].astype(np.float32),
  )
  tokens = [1, 4, 5, 6]
  got = np.asarray(model(**_causal_inputs(np.array([tokens])))[0][0])
  want = numpy_qwen3_logits(weights, hf, tokens)
  np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


def test_load_hf_qwen3_rope_theta_guard(tmp_path):
  write_tiny_hf_checkpoint(tmp_path / "ck", tied=True, rope_theta=5e6)
  with pytest.raises(ValueError, match="allow_rope_theta_mismatch"):
    models.load_hf_qwen3(str(tmp_path / "ck"), mesh=None)
  _, _, cfg = models.load_hf_qwen3(
      str(tmp_path / "ck"), mesh=None, allow_rope_theta_mismatch=True
  )
  assert cfg.rope_theta == 5_000_000


def test_load_hf_qwen3_errors(tmp_path):
  with pytest.raises(FileNotFoundError, match="does not exist"):
    models.load_hf_qwen3(str(tmp_path / "nope"), mesh=None)
  with pytest.raises(FileNotFoundError, match="does not exist"):
    models.load_hf_qwen3_tokenizer(tmp_path / "nope")
  (tmp_path / "empty").mkdir()
  with pytest.raises(FileNotFoundError, match="config.json"):
    models.load_hf_qwen3(str(tmp_path / "empty"), mesh=None)

  write_tiny_hf_checkpoint(
      tmp_path / "nohead", tied=False, drop=("lm_head.weight",)
  )
  with pytest.raises(ValueError, match=r"lacks tensors \['lm_head.weight'\]"):
    models.load_hf_qwen3(str(tmp_path / "nohead"), mesh=None)

  write_tiny_hf_checkpoint(tmp_path / "moe", tied=True)
  hf = json.loads((tmp_path / "moe" / "config.json").read_text())
  hf["model_type"] = "qwen3_moe"
  (tmp_path / "moe" / "config.json").write_text(json.dumps(hf))
  with pytest.raises(ValueError, match="dense 'qwen3'"):
    models.load_hf_qwen3(str(tmp_path / "moe"), mesh=None)


# ----------------------------------------------------------------------------
# Several processes (needs the launcher).

# Runs on each of 2 hosts: `tiny_models_host.py CHECKPOINT`.
_MULTIHOST_PROGRAM = REPO_ROOT / "tests" / "support" / "tiny_models_host.py"


@pytest.mark.multihost
def test_multihost_creation_and_loading_agree(tmp_path):
  if not (REPO_ROOT / "tunix_mcjax" / "launch.py").exists():
    pytest.skip("tunix_mcjax/launch.py (the multi-host launcher) is missing")
  import launch_utils  # pylint: disable=g-import-not-at-top

  write_tiny_hf_checkpoint(tmp_path / "ck", tied=False, seed=4)
  result = launch_utils.run_launched(
      [sys.executable, str(_MULTIHOST_PROGRAM), str(tmp_path / "ck")],
      num_hosts=2,
      devices_per_host=2,
      timeout=180,
  )
  launch_utils.assert_ok(result)
  reports = []
  for host in range(2):
    lines = [
        line.removeprefix("REPORT ")
        for line in launch_utils.host_lines(result.stdout, host)
        if line.startswith("REPORT ")
    ]
    assert len(lines) == 1, launch_utils.describe(result)
    reports.append(json.loads(lines[0]))
  for name in ("tiny", "hf"):
    a, b = reports[0][name], reports[1][name]
    assert a["digest"] == b["digest"], name
    # Each host holds 2 of the 4 devices' shards of every leaf, and the
    # fsdp-sharded leaves span both hosts.
    assert a["shards"] == b["shards"] == 2 * a["leaves"], name
    assert a["global_leaves"] == a["leaves"], name
