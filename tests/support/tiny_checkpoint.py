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

import hf_qwen3

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


def write(directory: pathlib.Path, *, seed: int = 0,
          head_dim: int = 16) -> pathlib.Path:
  """Writes the checkpoint into `directory` (created); returns it.
  `head_dim=32` for vLLM's CPU attention, which has no kernel for 16."""
  # pylint: disable=g-import-not-at-top
  import tokenizers
  from tokenizers import decoders, pre_tokenizers
  import transformers
  # pylint: enable=g-import-not-at-top

  vocab = {PAD: 0, IM_START: 1, IM_END: 2}
  vocab.update({c: i + 3 for i, c in enumerate(CHARS)})
  hf_qwen3.write_qwen3_weights(
      directory,
      transformers.Qwen3Config(
          vocab_size=len(vocab),
          hidden_size=32,
          intermediate_size=64,
          num_hidden_layers=2,
          num_attention_heads=4,
          num_key_value_heads=2,
          head_dim=head_dim,
          rope_theta=1e6,  # What Tunix 0.1.7's Qwen3 hardcodes.
          rms_norm_eps=1e-6,
          tie_word_embeddings=True,
          eos_token_id=2,
          pad_token_id=0,
      ),
      seed=seed,
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
