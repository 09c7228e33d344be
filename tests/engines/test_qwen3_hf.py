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

"""Tunix Qwen3 -> Hugging Face names and layouts (no vLLM needed).

The conversion is checked against Tunix's own HF -> Tunix loader rules
(`tunix.models.qwen3.params`): converting a model to HF and applying Tunix's
loading transforms must give the model back exactly.
"""

import json
import re

from flax import nnx
import numpy as np
import pytest
from tunix.models.qwen3 import params as qwen3_params

from tunix_mcjax.recipes import models
from tunix_mcjax.engines import qwen3_hf


def _flat(model):
  flat = {}
  pure = nnx.to_pure_dict(nnx.state(model, nnx.Param))

  def walk(prefix, node):
    if isinstance(node, dict):
      for k, v in node.items():
        walk(prefix + (k,), v)
    else:
      flat[prefix] = np.asarray(node)

  walk((), pure)
  return flat


def _tunix_load(config, hf):
  """Tunix's own loader rules applied to HF tensors -> flat Tunix params."""
  rules = qwen3_params._get_key_and_transform_mapping(config)  # pylint: disable=protected-access
  out = {}
  for name, value in hf.items():
    for pattern, (target, transform) in rules.items():
      if re.fullmatch(pattern, name):
        key = re.sub(pattern, target, name)
        if transform is not None:
          permute, reshape = transform
          if permute:
            value = value.transpose(permute)
          if reshape:
            value = value.reshape(reshape)
        path = tuple(int(p) if p.isdigit() else p for p in key.split("."))
        out[path] = value
        break
    else:
      raise AssertionError(f"Tunix has no rule for {name}")
  return out


@pytest.mark.parametrize("tied", [True, False])
def test_roundtrip_through_tunix_loader(tied):
  config = models.tiny_qwen3_config(use_tied_embedding=tied, head_dim=32,
                                    num_layers=2)
  flat = _flat(models.create_tiny_model(config, seed=1))
  hf = qwen3_hf.numpy_reference_convert(config, flat)
  assert ("lm_head.weight" in hf) == (not tied)
  assert len(hf) == len(flat)
  back = _tunix_load(config, hf)
  assert sorted(back) == sorted(flat)
  for path, value in flat.items():
    np.testing.assert_array_equal(back[path], value, err_msg=str(path))


def test_hf_shapes():
  config = models.tiny_qwen3_config(use_tied_embedding=False, head_dim=32)
  tensors = {t.hf_name: t for t in qwen3_hf.qwen3_hf_tensors(config)}
  d, n, k, h = config.embed_dim, config.num_heads, config.num_kv_heads, 32
  assert tensors["model.layers.0.self_attn.q_proj.weight"].hf_shape == (
      n * h, d)
  assert tensors["model.layers.1.self_attn.k_proj.weight"].hf_shape == (
      k * h, d)
  assert tensors["model.layers.0.self_attn.o_proj.weight"].hf_shape == (
      d, n * h)
  assert tensors["model.layers.0.mlp.down_proj.weight"].hf_shape == (
      d, config.hidden_dim)
  assert tensors["lm_head.weight"].hf_shape == (config.vocab_size, d)
  # vLLM packs q/k/v and gate/up; a module is reloaded as a whole.
  assert tensors["model.layers.0.self_attn.v_proj.weight"].vllm_module == (
      "model.layers.0.self_attn.qkv_proj")
  assert tensors["model.layers.0.mlp.up_proj.weight"].vllm_module == (
      "model.layers.0.mlp.gate_up_proj")
  assert tensors["model.norm.weight"].vllm_module == "model.norm"


def test_errors_name_the_parameter():
  config = models.tiny_qwen3_config(head_dim=32)
  mapping = qwen3_hf.TunixQwen3ToHf(config)
  flat = _flat(models.create_tiny_model(config, seed=0))

  bad = dict(flat)
  bad[("layers", 1, "attn", "k_proj", "w")] = np.zeros((3, 3, 3))
  with pytest.raises(ValueError, match=r"layers\.1\.attn\.k_proj\.w.*shape"):
    mapping.check(bad)

  missing = dict(flat)
  del missing[("layers", 0, "mlp", "up_proj", "kernel")]
  with pytest.raises(ValueError, match=r"layers\.0\.mlp\.up_proj\.kernel"):
    mapping.check(missing)
  mapping.check(missing, subset=True)  # Subsets are fine when asked for.
  with pytest.raises(ValueError, match=r"layers\.0\.mlp\.up_proj\.kernel"):
    mapping.convert(missing)  # convert checks unless told it was checked.
  assert len(mapping.convert(missing, checked=True)) == len(flat) - 1

  extra = dict(flat)
  extra[("lm_head", "w")] = np.zeros((64, 16))  # The model ties embeddings.
  with pytest.raises(ValueError, match=r"lm_head\.w"):
    mapping.check(extra)


def test_complete_modules():
  config = models.tiny_qwen3_config(head_dim=32, num_layers=1)
  mapping = qwen3_hf.TunixQwen3ToHf(config)
  q = ("layers", 0, "attn", "q_proj", "w")
  k = ("layers", 0, "attn", "k_proj", "w")
  v = ("layers", 0, "attn", "v_proj", "w")
  norm = ("final_norm", "w")
  assert mapping.complete_modules([q, k, norm]) == [norm]
  assert sorted(mapping.complete_modules([q, k, v])) == sorted([q, k, v])


def test_hf_config(tmp_path):
  config = models.tiny_qwen3_config(head_dim=32, rope_theta=10_000)
  hf = qwen3_hf.qwen3_hf_config(
      config, bos_id=1, eos_id=2, pad_id=0, max_position_embeddings=40,
      torch_dtype="float32")
  root = qwen3_hf.write_hf_config_dir(tmp_path / "cfg", hf)
  back = json.loads((root / "config.json").read_text())
  assert back["model_type"] == "qwen3"
  assert back["head_dim"] == 32 and back["hidden_size"] == config.embed_dim
  assert back["num_key_value_heads"] == config.num_kv_heads
  assert back["tie_word_embeddings"] is True
  # What Tunix 0.1.7 computes, whatever the config says (it ignores it).
  assert back["rope_theta"] == 1e6
  assert back["rope_parameters"]["rope_theta"] == 1e6
  # The result reads back into the same Tunix architecture.
  again = models.qwen3_config_from_hf(back)
  for field in ("num_layers", "vocab_size", "embed_dim", "hidden_dim",
                "num_heads", "head_dim", "num_kv_heads", "use_tied_embedding"):
    assert getattr(again, field) == getattr(config, field), field
