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

"""Tunix Qwen3 parameters <-> Hugging Face checkpoint names and layouts.

Used wherever a Tunix Qwen3 meets the Hugging Face layout: the vLLM engines
(weights and config.json) and checkpoint loading (`recipes.models`).
Importable without vLLM or PyTorch. The conversions are views (reshape +
transpose), written so that they work unchanged on NumPy arrays and on
PyTorch tensors: vLLM's weight loaders copy from them into the engine's own
storage, so publication makes no extra copy here.

Layouts, Tunix [shape] -> HF (prefix "model.", per layer "model.layers.i."):

  embedder.input_embedding [V, D]      -> embed_tokens.weight [V, D]
  layers.i.attn.q_proj.w [D, N, H]     -> self_attn.q_proj.weight [N*H, D]
  layers.i.attn.{k,v}_proj.w [D, K, H] -> self_attn.{k,v}_proj.weight [K*H, D]
  layers.i.attn.o_proj.w [N, H, D]     -> self_attn.o_proj.weight [D, N*H]
  layers.i.attn.{q,k}_norm.w [H]       -> self_attn.{q,k}_norm.weight [H]
  layers.i.mlp.{gate,up}_proj.kernel [D, F] -> mlp.{gate,up}_proj.weight [F, D]
  layers.i.mlp.down_proj.kernel [F, D] -> mlp.down_proj.weight [D, F]
  layers.i.input_layernorm.w [D]       -> input_layernorm.weight [D]
  layers.i.post_attention_layernorm.w  -> post_attention_layernorm.weight
  final_norm.w [D]                     -> norm.weight [D]
  lm_head.w [D, V]                     -> lm_head.weight [V, D] (no prefix;
                                          untied models only)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import dataclasses
import json
import os
import pathlib
import re
from typing import Any

import numpy as np

from tunix_mcjax import tree_paths

# A parameter's path in `nnx.state(model, nnx.Param)` without the trailing
# `.value`, e.g. ("layers", 0, "attn", "q_proj", "w").
ParamPath = tree_paths.ParamPath

_KINDS = ("copy", "transpose", "in_proj", "out_proj")

# Tunix 0.1.7's Qwen3 hardcodes RoPE theta 1e6 in `apply_rope` and ignores
# `ModelConfig.rope_theta`: engines must compute what the trainer computes
# (so this is what config.json says), and checkpoints trained with another
# theta are refused (`recipes.models`).
TUNIX_QWEN3_ROPE_THETA = 1_000_000


@dataclasses.dataclass(frozen=True, kw_only=True)
class HfTensor:
  """One Hugging Face checkpoint tensor and the Tunix parameter it comes from.

  Attributes:
    hf_name: the checkpoint name vLLM's `load_weights` expects.
    src: the Tunix parameter path.
    src_shape: the Tunix parameter's shape.
    kind: how the layout changes: "copy"; "transpose" (2-D); "in_proj"
      ([D, N, H] -> [N*H, D]); "out_proj" ([N, H, D] -> [D, N*H]).
  """

  hf_name: str
  src: ParamPath
  src_shape: tuple[int, ...]
  kind: str

  def __post_init__(self):
    if self.kind not in _KINDS:
      raise ValueError(f"kind must be one of {_KINDS}; got {self.kind!r}.")
    want_ndim = {"copy": None, "transpose": 2, "in_proj": 3, "out_proj": 3}
    nd = want_ndim[self.kind]
    if nd is not None and len(self.src_shape) != nd:
      raise ValueError(
          f"{self.hf_name}: a {self.kind!r} conversion needs a {nd}-D source;"
          f" got shape {self.src_shape}."
      )

  @property
  def vllm_module(self) -> str:
    """The vLLM module this tensor loads into; reloads cover whole modules.

    vLLM packs q/k/v into one `qkv_proj` and gate/up into one `gate_up_proj`.
    """
    name = re.sub(r"\.self_attn\.[qkv]_proj\.weight$", ".self_attn.qkv_proj",
                  self.hf_name)
    name = re.sub(r"\.mlp\.(gate|up)_proj\.weight$", ".mlp.gate_up_proj",
                  name)
    return name.removesuffix(".weight")

  @property
  def hf_shape(self) -> tuple[int, ...]:
    s = self.src_shape
    if self.kind == "copy":
      return s
    if self.kind == "transpose":
      return (s[1], s[0])
    if self.kind == "in_proj":
      return (s[1] * s[2], s[0])
    return (s[2], s[0] * s[1])  # out_proj

  def apply(self, x: Any) -> Any:
    """Converts one array (NumPy or PyTorch) to the HF layout, as a view."""
    s = self.src_shape
    if self.kind == "copy":
      return x
    if self.kind == "transpose":
      return x.T
    if self.kind == "in_proj":
      return x.reshape(s[0], s[1] * s[2]).T
    return x.reshape(s[0] * s[1], s[2]).T  # out_proj


def qwen3_hf_tensors(config: Any) -> tuple[HfTensor, ...]:
  """The HF tensors of a Tunix Qwen3 `ModelConfig`, grouped by vLLM layer.

  The order (embedding, then layer by layer, then the final norm and head)
  lets vLLM's layerwise reload process each layer as soon as all its
  tensors have arrived, instead of buffering many layers at once.

  Args:
    config: a `tunix.models.qwen3.model.ModelConfig` (dense).

  Returns:
    One entry per HF tensor.

  Raises:
    NotImplementedError: for mixture-of-experts configs.
  """
  if getattr(config, "num_experts", None):
    raise NotImplementedError(
        "Only dense Qwen3 models can be published into vLLM; this config has"
        f" num_experts={config.num_experts}."
    )
  d, f = config.embed_dim, config.hidden_dim
  n, k, h = config.num_heads, config.num_kv_heads, config.head_dim
  v = config.vocab_size
  out = [
      HfTensor(hf_name="model.embed_tokens.weight",
               src=("embedder", "input_embedding"), src_shape=(v, d),
               kind="copy")
  ]
  for i in range(config.num_layers):
    pre = f"model.layers.{i}."
    attn = ("layers", i, "attn")
    mlp = ("layers", i, "mlp")
    out += [
        HfTensor(hf_name=pre + "input_layernorm.weight",
                 src=("layers", i, "input_layernorm", "w"), src_shape=(d,),
                 kind="copy"),
        HfTensor(hf_name=pre + "self_attn.q_proj.weight",
                 src=attn + ("q_proj", "w"), src_shape=(d, n, h),
                 kind="in_proj"),
        HfTensor(hf_name=pre + "self_attn.k_proj.weight",
                 src=attn + ("k_proj", "w"), src_shape=(d, k, h),
                 kind="in_proj"),
        HfTensor(hf_name=pre + "self_attn.v_proj.weight",
                 src=attn + ("v_proj", "w"), src_shape=(d, k, h),
                 kind="in_proj"),
        HfTensor(hf_name=pre + "self_attn.q_norm.weight",
                 src=attn + ("q_norm", "w"), src_shape=(h,), kind="copy"),
        HfTensor(hf_name=pre + "self_attn.k_norm.weight",
                 src=attn + ("k_norm", "w"), src_shape=(h,), kind="copy"),
        HfTensor(hf_name=pre + "self_attn.o_proj.weight",
                 src=attn + ("o_proj", "w"), src_shape=(n, h, d),
                 kind="out_proj"),
        HfTensor(hf_name=pre + "post_attention_layernorm.weight",
                 src=("layers", i, "post_attention_layernorm", "w"),
                 src_shape=(d,), kind="copy"),
        HfTensor(hf_name=pre + "mlp.gate_proj.weight",
                 src=mlp + ("gate_proj", "kernel"), src_shape=(d, f),
                 kind="transpose"),
        HfTensor(hf_name=pre + "mlp.up_proj.weight",
                 src=mlp + ("up_proj", "kernel"), src_shape=(d, f),
                 kind="transpose"),
        HfTensor(hf_name=pre + "mlp.down_proj.weight",
                 src=mlp + ("down_proj", "kernel"), src_shape=(f, d),
                 kind="transpose"),
    ]
  out.append(
      HfTensor(hf_name="model.norm.weight", src=("final_norm", "w"),
               src_shape=(d,), kind="copy")
  )
  if not config.use_tied_embedding:
    out.append(
        HfTensor(hf_name="lm_head.weight", src=("lm_head", "w"),
                 src_shape=(d, v), kind="transpose")
    )
  return tuple(out)


class TunixQwen3ToHf:
  """Checks and converts a flat Tunix Qwen3 parameter dict to HF tensors.

  Everything that depends only on the config (the tensors, their sources,
  the grouping into vLLM modules) is computed once here, not per update.
  """

  def __init__(self, config: Any):
    self._tensors = qwen3_hf_tensors(config)
    self._by_src = {t.src: t for t in self._tensors}
    modules: dict[str, list[ParamPath]] = {}
    for t in self._tensors:
      modules.setdefault(t.vllm_module, []).append(t.src)
    self._module_groups = tuple(tuple(g) for g in modules.values())

  @property
  def tensors(self) -> tuple[HfTensor, ...]:
    """The HF tensors, in `qwen3_hf_tensors` order."""
    return self._tensors

  def check(self, flat: Mapping[ParamPath, Any], *, subset: bool = False
            ) -> None:
    """Raises ValueError naming the first parameter that does not fit.

    Args:
      flat: parameter path -> anything with a `.shape` (arrays, tensors,
        jax.ShapeDtypeStruct).
      subset: `flat` may hold only some of the parameters.
    """
    unexpected = sorted(
        tree_paths.dotted(p) for p in flat if p not in self._by_src
    )
    if unexpected:
      raise ValueError(
          f"Parameter {unexpected[0]!r} has no place in the vLLM Qwen3 model"
          f" ({len(unexpected)} unmatched in all: {unexpected[:5]}); nothing"
          " is dropped silently."
      )
    missing = [t for t in self._tensors if t.src not in flat]
    if missing and not subset:
      raise ValueError(
          f"Parameter {tree_paths.dotted(missing[0].src)!r} (vLLM"
          f" {missing[0].hf_name!r}) is missing ({len(missing)} missing in"
          " all); vLLM needs every tensor in each publication."
      )
    for t in self._tensors:
      if t.src not in flat:
        continue
      shape = tuple(flat[t.src].shape)
      if shape != t.src_shape:
        raise ValueError(
            f"Parameter {tree_paths.dotted(t.src)!r} (vLLM {t.hf_name!r})"
            " has shape"
            f" {shape}; the engine's model config needs {t.src_shape}."
        )

  def convert(self, flat: Mapping[ParamPath, Any], *, subset: bool = False,
              checked: bool = False) -> list[tuple[str, Any]]:
    """[(hf_name, view in HF layout)], in `tensors` order.

    Args:
      flat: parameter path -> array or tensor.
      subset: `flat` may hold only some of the parameters.
      checked: the caller has already checked `flat` against this mapping's
        names and shapes (e.g. an engine whose expected layout came from
        `check`); otherwise `check` runs first.
    """
    if not checked:
      self.check(flat, subset=subset)
    return [(t.hf_name, t.apply(flat[t.src])) for t in self._tensors
            if t.src in flat]

  def complete_modules(self, paths: Any) -> list[ParamPath]:
    """The paths among `paths` whose whole vLLM module is in `paths`."""
    have = set(paths)
    ready = []
    for group in self._module_groups:
      if all(src in have for src in group):
        ready.extend(group)
    return ready


def qwen3_hf_config(
    config: Any,
    *,
    bos_id: int | None,
    eos_id: int | Sequence[int] | None,
    pad_id: int | None,
    max_position_embeddings: int,
    torch_dtype: str,
) -> dict[str, Any]:
  """A Hugging Face `config.json` dict for a Tunix Qwen3 `ModelConfig`.

  Written from the trainer's own config so that the engine computes exactly
  what the trainer does (in particular RoPE theta: see
  `TUNIX_QWEN3_ROPE_THETA`), without any hub access.

  Args:
    config: the Tunix Qwen3 config.
    bos_id: beginning-of-sequence id (informational for vLLM).
    eos_id: end-of-sequence id(s) (the engine also passes them per request).
    pad_id: padding id.
    max_position_embeddings: the longest sequence the engine must serve.
    torch_dtype: "float32", "bfloat16" or "float16".

  Returns:
    The config dict.
  """
  qwen3_hf_tensors(config)  # Rejects what cannot be expressed (MoE).
  if max_position_embeddings < 1:
    raise ValueError(
        f"max_position_embeddings must be >= 1; got {max_position_embeddings}."
    )
  theta = float(TUNIX_QWEN3_ROPE_THETA)
  return {
      "architectures": ["Qwen3ForCausalLM"],
      "model_type": "qwen3",
      "vocab_size": int(config.vocab_size),
      "hidden_size": int(config.embed_dim),
      "intermediate_size": int(config.hidden_dim),
      "num_hidden_layers": int(config.num_layers),
      "num_attention_heads": int(config.num_heads),
      "num_key_value_heads": int(config.num_kv_heads),
      "head_dim": int(config.head_dim),
      "hidden_act": "silu",
      "rms_norm_eps": float(config.norm_eps),
      # Both spellings: transformers >= 5 reads `rope_parameters`, older
      # versions (and vLLM's fallbacks) `rope_theta`.
      "rope_theta": theta,
      "rope_parameters": {"rope_type": "default", "rope_theta": theta},
      "rope_scaling": None,
      "attention_bias": False,
      "attention_dropout": 0.0,
      "use_sliding_window": False,
      "sliding_window": None,
      "tie_word_embeddings": bool(config.use_tied_embedding),
      "max_position_embeddings": int(max_position_embeddings),
      "torch_dtype": torch_dtype,
      "bos_token_id": bos_id,
      "eos_token_id": (
          list(eos_id) if isinstance(eos_id, (list, tuple)) else eos_id
      ),
      "pad_token_id": pad_id,
  }


def write_hf_config_dir(
    directory: str | os.PathLike[str], hf_config: Mapping[str, Any]
) -> pathlib.Path:
  """Writes `config.json` (and nothing else) into `directory`.

  The engine is started with `load_format="dummy"` and
  `skip_tokenizer_init=True`: weights arrive by publication and prompts are
  tokenized by Tunix's tokenizer adapter, exactly as for the native engine,
  so neither weight nor tokenizer files are needed.

  Args:
    directory: where to write (created if needed).
    hf_config: from `qwen3_hf_config`.

  Returns:
    The directory.
  """
  root = pathlib.Path(directory)
  root.mkdir(parents=True, exist_ok=True)
  (root / "config.json").write_text(json.dumps(dict(hf_config), indent=2))
  return root


def numpy_reference_convert(
    config: Any, flat: Mapping[ParamPath, np.ndarray]
) -> dict[str, np.ndarray]:
  """HF tensors as contiguous NumPy arrays (tests and debugging)."""
  return {
      name: np.ascontiguousarray(x)
      for name, x in TunixQwen3ToHf(config).convert(flat)
  }
