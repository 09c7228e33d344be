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

"""Writes random tiny Qwen3 checkpoints in Hugging Face layout for tests.

One writer for every test that needs a local checkpoint (the model loader's
tests, the Tunix CLI tests, MaxText's tokenizer path); each caller chooses
the shapes through the `transformers.Qwen3Config` it passes and writes its
own tokenizer.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np


def write_qwen3_weights(
    directory: pathlib.Path,
    config: Any,
    *,
    seed: int = 0,
    drop: tuple[str, ...] = (),
    half_matrices: bool = False,
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
  """Writes config.json and model.safetensors for `config`.

  Args:
    directory: Where to write (created).
    config: a `transformers.Qwen3Config`; `lm_head.weight` is written unless
      `tie_word_embeddings`.
    seed: Weight seed.
    drop: Tensor names to leave out of the file.
    half_matrices: Store 2-D tensors as float16 and norms as float32 (a
      mixed-dtype file); the returned weights hold the stored values.

  Returns:
    (weights as written, config.json as a dict).
  """
  import safetensors.numpy  # pylint: disable=g-import-not-at-top

  directory.mkdir(parents=True, exist_ok=True)
  config.save_pretrained(directory)
  hf = json.loads((directory / "config.json").read_text())
  rng = np.random.default_rng(seed)
  vocab, d, f = config.vocab_size, config.hidden_size, config.intermediate_size
  nh, nkv, hd = (config.num_attention_heads, config.num_key_value_heads,
                 config.head_dim)

  def w(*shape, scale=0.3):
    return (rng.standard_normal(shape) * scale).astype(np.float32)

  weights = {"model.embed_tokens.weight": w(vocab, d, scale=1.0),
             "model.norm.weight": 1 + w(d, scale=0.1)}
  for i in range(config.num_hidden_layers):
    p = f"model.layers.{i}."
    weights.update({
        p + "input_layernorm.weight": 1 + w(d, scale=0.1),
        p + "post_attention_layernorm.weight": 1 + w(d, scale=0.1),
        p + "self_attn.q_proj.weight": w(nh * hd, d),
        p + "self_attn.k_proj.weight": w(nkv * hd, d),
        p + "self_attn.v_proj.weight": w(nkv * hd, d),
        p + "self_attn.o_proj.weight": w(d, nh * hd),
        p + "self_attn.q_norm.weight": 1 + w(hd, scale=0.1),
        p + "self_attn.k_norm.weight": 1 + w(hd, scale=0.1),
        p + "mlp.gate_proj.weight": w(f, d),
        p + "mlp.up_proj.weight": w(f, d),
        p + "mlp.down_proj.weight": w(d, f),
    })
  if not config.tie_word_embeddings:
    weights["lm_head.weight"] = w(vocab, d)
  if half_matrices:
    weights = {k: v.astype(np.float16) if v.ndim == 2 else v
               for k, v in weights.items()}
  safetensors.numpy.save_file(
      {k: v for k, v in weights.items() if k not in drop},
      str(directory / "model.safetensors"),
      metadata={"format": "pt"},
  )
  return weights, hf
