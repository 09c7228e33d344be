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

"""Writes a tiny local Hugging Face Qwen3 checkpoint for the CLI tests.

A randomly initialised 2-layer Qwen3 (config.json + model.safetensors) and a
character-level `tokenizers` tokenizer with Qwen-style chat markers and a chat
template, saved through `transformers.PreTrainedTokenizerFast`, so that
Tunix's CLI loads both from the directory exactly as it would a real
checkpoint (`AutoTokenizer.from_pretrained(dir)`), with nothing downloaded.
"""

from __future__ import annotations

import pathlib
import string

import numpy as np

PAD = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
# Every printable ASCII character plus newline: GSM8K prompts tokenize without
# unknowns, one token per character.
CHARS = "\n" + "".join(c for c in string.printable if c.isprintable())
CHAT_TEMPLATE = (
    "{% for m in messages %}" + IM_START + "{{ m['role'] }}\n"
    "{{ m['content'] }}" + IM_END + "\n{% endfor %}"
    "{% if add_generation_prompt %}" + IM_START + "assistant\n{% endif %}"
)


def write(directory: pathlib.Path, *, seed: int = 0) -> pathlib.Path:
  """Writes the checkpoint into `directory` (created); returns it."""
  # pylint: disable=g-import-not-at-top
  import safetensors.numpy
  import tokenizers
  from tokenizers import decoders, pre_tokenizers
  import transformers
  # pylint: enable=g-import-not-at-top

  directory.mkdir(parents=True, exist_ok=True)
  vocab = {PAD: 0, IM_START: 1, IM_END: 2}
  vocab.update({c: i + 3 for i, c in enumerate(CHARS)})
  vocab_size = len(vocab)
  d, f, nh, nkv, hd, layers = 32, 64, 4, 2, 16, 2
  transformers.Qwen3Config(
      vocab_size=vocab_size,
      hidden_size=d,
      intermediate_size=f,
      num_hidden_layers=layers,
      num_attention_heads=nh,
      num_key_value_heads=nkv,
      head_dim=hd,
      rope_theta=1e6,  # What Tunix 0.1.7's Qwen3 hardcodes.
      rms_norm_eps=1e-6,
      tie_word_embeddings=True,
      eos_token_id=2,
      pad_token_id=0,
  ).save_pretrained(directory)

  rng = np.random.default_rng(seed)

  def w(*shape, scale=0.3):
    return (rng.standard_normal(shape) * scale).astype(np.float32)

  weights = {
      "model.embed_tokens.weight": w(vocab_size, d, scale=1.0),
      "model.norm.weight": 1 + w(d, scale=0.1),
  }
  for i in range(layers):
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
  safetensors.numpy.save_file(
      weights, str(directory / "model.safetensors"), metadata={"format": "pt"}
  )

  tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, PAD))
  tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
  tok.decoder = decoders.Fuse()
  fast = transformers.PreTrainedTokenizerFast(
      tokenizer_object=tok,
      eos_token=IM_END,
      pad_token=PAD,
      additional_special_tokens=[IM_START],
  )
  fast.chat_template = CHAT_TEMPLATE
  fast.save_pretrained(directory)
  return directory
