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

"""Trainer parameters -> tpu-inference's Qwen3 state, in one local program.

Pure JAX, tested on CPU (tests/engines/experimental/): a plan mapping the
trainer's Qwen3 parameters onto the parameter layout of tpu-inference's
flax_nnx Qwen3 (`tpu_inference/models/jax/qwen3.py`, read at
vllm-project/tpu-inference b8692ff, Aug 2026), and `local_write`, which
writes a published, host-local parameter tree into an engine state of that
layout with ONE jitted program: renaming, the per-layer unstack of scanned
(stacked) trainer layers, KV-head replication for tensor parallelism,
vocabulary padding, the dtype cast and the placement into the engine's
shardings all happen in that program. Upstream
(`tunix.generate.utils.transfer_state_with_mappings`) dispatches one slice
per layer and parameter and reshards each separately. The old engine
buffers are donated, so XLA can write the new weights in place instead of
holding two copies. A LoRA actor's adapters are merged into their base
weights in that same program (`with_lora`: W + (alpha / rank) *
tensordot(A, B), `engines.lora_merge`, as the vLLM engine merges), so
publication sends only the adapters and tpu-inference runs plain weights.

The engine that installs publications with it is `tpu_inference`
(`TpuInferenceEngine`); this module needs neither vLLM nor a TPU.

tpu-inference Qwen3 state (names as in `model_runner.state`; N/K/H padded as
`tpu_inference.utils.get_padded_num_heads` / `get_padded_head_dim` say,
V aligned to the tensor-parallel size):

  model.embed_tokens.weight                       [V', D]
  model.layers.i.input_layernorm.weight           [D]
  model.layers.i.self_attn.q_proj.weight          [D, N', H'] ("DNH"; or
                                                  [N', D, H'] with
                                                  LAYOUT_Q_PROJ_AS_NDH)
  model.layers.i.self_attn.{k,v}_proj.weight      [D, K', H']
  model.layers.i.self_attn.o_proj.weight          [N', H', D]
  model.layers.i.self_attn.{q,k}_norm.weight      [H']
  model.layers.i.post_attention_layernorm.weight  [D]
  model.layers.i.mlp.{gate,up}_proj.weight        [D, F]
  model.layers.i.mlp.down_proj.weight             [F, D]
  model.norm.weight                               [D]
  lm_head.weight                                  [D, V'] (untied only)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import dataclasses
import threading
from typing import Any

import jax
import jax.numpy as jnp

from tunix_mcjax import tree_paths
from tunix_mcjax.engines import lora_merge

_TRANSFORMS = ("copy", "repeat_heads", "pad_rows", "pad_cols", "dnh_to_ndh")


def _padded_head_dim(head_dim: int) -> int:
  # tpu_inference.utils.get_padded_head_dim.
  return 64 if head_dim == 64 else (head_dim + 127) // 128 * 128


def _padded_num_heads(num_heads: int, tp_size: int) -> int:
  # tpu_inference.utils.get_padded_num_heads.
  if num_heads >= tp_size:
    if num_heads % tp_size:
      raise ValueError(
          f"{num_heads} heads do not divide over tensor parallelism {tp_size}."
      )
    return num_heads
  if tp_size % num_heads:
    raise ValueError(
        f"tensor parallelism {tp_size} is not a multiple of {num_heads} heads."
    )
  return tp_size


@dataclasses.dataclass(frozen=True, kw_only=True)
class TargetParam:
  """How one engine parameter is computed from one trainer parameter.

  Attributes:
    name: the engine state's dotted name, e.g.
      "model.layers.3.self_attn.q_proj.weight".
    source: the trainer's dotted name, e.g. "layers.3.attn.q_proj.w", or
      for scanned trainer layers "layers.attn.q_proj.w".
    layer: with a scanned source, which layer to take.
    layer_axis: with a scanned source, the axis holding the layers.
    transform: after taking the layer: "copy"; "repeat_heads" (repeat
      each head `factor` times along `axis`: KV heads replicated for tensor
      parallelism, as grouped-query attention allows); "pad_rows" /
      "pad_cols" (zero-pad axis 0 / 1 to `size`: the vocabulary);
      "dnh_to_ndh" (q_proj in tpu-inference's LAYOUT_Q_PROJ_AS_NDH layout).
    axis: the axis of "repeat_heads".
    factor: the repeat factor of "repeat_heads".
    size: the padded size of "pad_rows" / "pad_cols".
    lora_a, lora_b: a LoRA actor's adapter of `source` (trainer dotted
      names, qwix's `<weight>_lora_a/b`); the engine then gets the merged
      weight `source + lora_scale * tensordot(A, B, 1)` (computed in float32
      before any transform). None: no adapter.
    lora_scale: alpha / rank of the adapter.
  """

  name: str
  source: str
  layer: int | None = None
  layer_axis: int | None = None
  transform: str = "copy"
  axis: int = 0
  factor: int = 1
  size: int = 0
  lora_a: str | None = None
  lora_b: str | None = None
  lora_scale: float = 0.0

  def __post_init__(self):
    if self.transform not in _TRANSFORMS:
      raise ValueError(f"{self.name}: transform must be one of {_TRANSFORMS};"
                       f" got {self.transform!r}.")
    if (self.layer is None) != (self.layer_axis is None):
      raise ValueError(f"{self.name}: give both layer and layer_axis (scanned"
                       " source) or neither.")
    if self.transform == "repeat_heads" and self.factor < 2:
      raise ValueError(f"{self.name}: repeat_heads needs factor >= 2.")
    if self.transform in ("pad_rows", "pad_cols") and self.size < 1:
      raise ValueError(f"{self.name}: {self.transform} needs a size.")
    if (self.lora_a is None) != (self.lora_b is None):
      raise ValueError(f"{self.name}: give both lora_a and lora_b or neither.")
    if self.lora_a is not None:
      if not self.lora_scale > 0:
        raise ValueError(f"{self.name}: an adapter needs lora_scale > 0.")
      if self.layer is not None:
        raise NotImplementedError(
            f"{self.name}: merging adapters of a scanned (stacked) trainer"
            " layer is not mapped; LoRA actors here are Tunix's unscanned"
            " Qwen3.")

  @property
  def sources(self) -> tuple[str, ...]:
    """The trainer parameters this engine parameter is computed from."""
    if self.lora_a is None:
      return (self.source,)
    return (self.source, self.lora_a, self.lora_b)

  def apply(self, x: jax.Array, *lora: jax.Array) -> jax.Array:
    """Traced inside the writer's jit: trainer arrays -> this parameter.

    Args:
      x: the `source` array.
      *lora: with an adapter, its A and B arrays.
    """
    if self.lora_a is not None:
      x = lora_merge.merge_one(x, *lora, self.lora_scale)
    if self.layer is not None:
      x = jax.lax.index_in_dim(x, self.layer, self.layer_axis, keepdims=False)
    if self.transform == "repeat_heads":
      x = jnp.repeat(x, self.factor, axis=self.axis)
    elif self.transform == "pad_rows":
      x = jnp.pad(x, ((0, self.size - x.shape[0]), (0, 0)))
    elif self.transform == "pad_cols":
      x = jnp.pad(x, ((0, 0), (0, self.size - x.shape[1])))
    elif self.transform == "dnh_to_ndh":
      x = jnp.transpose(x, (1, 0, 2))
    return x


def qwen3_plan(
    config: Any,
    *,
    tp_size: int = 1,
    scanned: bool = False,
    layer_axis: int = 0,
    q_proj_layout: str = "DNH",
) -> tuple[TargetParam, ...]:
  """The plan: Tunix Qwen3 trainer parameters -> tpu-inference Qwen3 state.

  Args:
    config: the trainer's `tunix.models.qwen3.model.ModelConfig` (dense).
    tp_size: the engine's tensor-parallel size (its "model" mesh axis).
    scanned: the trainer stacks its layers: every per-layer parameter is one
      array named without the layer index ("layers.attn.q_proj.w"), with
      the layers along `layer_axis` (e.g. a Tunix-layout trainer built with
      nnx.scan; MaxText's scanned decoder uses axis 1).
    layer_axis: the layer axis of scanned parameters.
    q_proj_layout: "DNH" (tpu-inference's default) or "NDH"
      (LAYOUT_Q_PROJ_AS_NDH=1).

  Returns:
    One `TargetParam` per engine parameter.

  Raises:
    ValueError: for layouts the engine would compute differently from the
      trainer (a padded head dimension changes Qwen3's q/k RMS norms;
      padded query heads would be summed twice by o_proj).
  """
  if getattr(config, "num_experts", None):
    raise NotImplementedError("Only dense Qwen3 models are mapped.")
  if q_proj_layout not in ("DNH", "NDH"):
    raise ValueError(f"q_proj_layout must be 'DNH' or 'NDH'; got"
                     f" {q_proj_layout!r}.")
  h = config.head_dim
  if _padded_head_dim(h) != h:
    raise ValueError(
        f"tpu-inference pads head_dim {h} to {_padded_head_dim(h)}; its"
        " RMS norms over the padded width would then differ from the"
        " trainer's. Use head_dim 64 or a multiple of 128."
    )
  if _padded_num_heads(config.num_heads, tp_size) != config.num_heads:
    raise ValueError(
        f"{config.num_heads} query heads would be padded to {tp_size} for"
        " tensor parallelism, which this mapping does not support."
    )
  kv = _padded_num_heads(config.num_kv_heads, tp_size)
  v_pad = -(-config.vocab_size // tp_size) * tp_size

  def per_layer(i: int, src_suffix: str) -> dict[str, Any]:
    if scanned:
      return dict(source=f"layers.{src_suffix}", layer=i,
                  layer_axis=layer_axis)
    return dict(source=f"layers.{i}.{src_suffix}")

  plan = [
      TargetParam(
          name="model.embed_tokens.weight", source="embedder.input_embedding",
          **({"transform": "pad_rows", "size": v_pad}
             if v_pad != config.vocab_size else {}),
      )
  ]
  kv_repeat = (
      {"transform": "repeat_heads", "axis": 1,
       "factor": kv // config.num_kv_heads}
      if kv != config.num_kv_heads else {}
  )
  for i in range(config.num_layers):
    pre = f"model.layers.{i}."
    plan += [
        TargetParam(name=pre + "input_layernorm.weight",
                    **per_layer(i, "input_layernorm.w")),
        TargetParam(name=pre + "self_attn.q_proj.weight",
                    **per_layer(i, "attn.q_proj.w"),
                    **({"transform": "dnh_to_ndh"}
                       if q_proj_layout == "NDH" else {})),
        TargetParam(name=pre + "self_attn.k_proj.weight",
                    **per_layer(i, "attn.k_proj.w"), **kv_repeat),
        TargetParam(name=pre + "self_attn.v_proj.weight",
                    **per_layer(i, "attn.v_proj.w"), **kv_repeat),
        TargetParam(name=pre + "self_attn.o_proj.weight",
                    **per_layer(i, "attn.o_proj.w")),
        TargetParam(name=pre + "self_attn.q_norm.weight",
                    **per_layer(i, "attn.q_norm.w")),
        TargetParam(name=pre + "self_attn.k_norm.weight",
                    **per_layer(i, "attn.k_norm.w")),
        TargetParam(name=pre + "post_attention_layernorm.weight",
                    **per_layer(i, "post_attention_layernorm.w")),
        TargetParam(name=pre + "mlp.gate_proj.weight",
                    **per_layer(i, "mlp.gate_proj.kernel")),
        TargetParam(name=pre + "mlp.up_proj.weight",
                    **per_layer(i, "mlp.up_proj.kernel")),
        TargetParam(name=pre + "mlp.down_proj.weight",
                    **per_layer(i, "mlp.down_proj.kernel")),
    ]
  plan.append(TargetParam(name="model.norm.weight", source="final_norm.w"))
  if not config.use_tied_embedding:
    plan.append(TargetParam(
        name="lm_head.weight", source="lm_head.w",
        **({"transform": "pad_cols", "size": v_pad}
           if v_pad != config.vocab_size else {}),
    ))
  return tuple(plan)


def with_lora(
    plan: Sequence[TargetParam],
    trainer_params: Any,
    *,
    scale: float,
) -> tuple[TargetParam, ...]:
  """`plan` with every LoRA adapter of `trainer_params` merged in.

  Args:
    plan: e.g. `qwen3_plan(...)`.
    trainer_params: the trainer's parameters (a LoRA actor's
      `nnx.state(model, nnx.Param)`: base weights and qwix adapters), or
      just their paths.
    scale: alpha / rank (`lora_merge.scale` of the actor's lora_config).

  Returns:
    The plan; each engine parameter whose source has an adapter is computed
    from the merged weight. Without adapters, `plan` unchanged.

  Raises:
    ValueError: an adapter whose base weight no engine parameter takes
      (it would be dropped silently), or an A without its B.
  """
  paths = (trainer_params if isinstance(trainer_params, (set, frozenset))
           else set(tree_paths.flat_params(trainer_params)))
  adapted = {tree_paths.dotted(t.weight): t
             for t in lora_merge.adapters(paths)}
  out = []
  for t in plan:
    adapter = adapted.pop(t.source, None)
    out.append(t if adapter is None else dataclasses.replace(
        t, lora_a=tree_paths.dotted(adapter.a),
        lora_b=tree_paths.dotted(adapter.b), lora_scale=float(scale)))
  if adapted:
    name = sorted(adapted)[0]
    raise ValueError(
        f"LoRA adapter on {name!r}, whose weight no engine parameter takes"
        f" ({len(adapted)} in all); the engine would run without it.")
  return tuple(out)


def _signature(flat: Mapping[str, Any]) -> tuple[Any, ...]:
  return tuple(
      (n, tuple(x.shape), str(x.dtype), getattr(x, "sharding", None))
      for n, x in flat.items()
  )


class LocalWriter:
  """One jitted program: trainer parameters -> a new engine state.

  Built once per (plan, trainer layout, engine layout) and reused for every
  publication; `local_write` caches writers.
  """

  def __init__(
      self,
      plan: Sequence[TargetParam],
      *,
      src: Mapping[str, Any],
      dst: Mapping[str, Any],
      donate: bool = True,
  ):
    """Checks the plan against both layouts and compiles lazily.

    Args:
      plan: from e.g. `qwen3_plan`.
      src: trainer name -> array / ShapeDtypeStruct (flat, dotted names).
      dst: engine name -> array / ShapeDtypeStruct with a sharding.
      donate: donate the old engine buffers to the write (in-place update).

    Raises:
      ValueError: naming the first engine or trainer parameter that is
        missing, unmatched, or whose mapped shape differs.
    """
    plan = tuple(plan)
    by_name = {t.name: t for t in plan}
    if len(by_name) != len(plan):
      raise ValueError("The plan names an engine parameter twice.")
    missing_dst = [n for n in dst if n not in by_name]
    if missing_dst:
      raise ValueError(
          f"Engine parameter {missing_dst[0]!r} has no source in the plan"
          f" ({len(missing_dst)} in all); it would keep stale weights."
      )
    extra = [t.name for t in plan if t.name not in dst]
    if extra:
      raise ValueError(f"The plan writes {extra[0]!r}, which the engine state"
                       " does not have.")
    missing_src = [(t, n) for t in plan for n in t.sources if n not in src]
    if missing_src:
      raise ValueError(
          f"Trainer parameter {missing_src[0][1]!r} (for engine"
          f" {missing_src[0][0].name!r}) is missing from the published tree."
      )
    used = {n for t in plan for n in t.sources}
    unused = sorted(n for n in src if n not in used)
    if unused:
      raise ValueError(
          f"Trainer parameter {unused[0]!r} has no place in the engine"
          f" ({len(unused)} unmatched in all); nothing is dropped silently."
      )
    for t in plan:
      if t.lora_a is None:
        continue
      w, a, b = (tuple(src[n].shape) for n in t.sources)
      if not a or not b or a[-1] != b[0] or a[:-1] + b[1:] != w:
        raise ValueError(
            f"Engine parameter {t.name!r}: adapter {t.lora_a!r} {a} x"
            f" {t.lora_b!r} {b} does not give {t.source!r}'s shape {w}.")
    self._order = [n for n in dst]  # Output order = engine leaf order.
    self._src_names = sorted(used)
    src_abs = [jax.ShapeDtypeStruct(tuple(src[n].shape), src[n].dtype)
               for n in self._src_names]
    dst_dtypes = [dst[n].dtype for n in self._order]

    def transform(src_leaves, old_leaves):
      del old_leaves  # Donated: XLA may write the outputs into them.
      named = dict(zip(self._src_names, src_leaves))
      return [
          by_name[n].apply(*(named[x] for x in by_name[n].sources)).astype(dt)
          for n, dt in zip(self._order, dst_dtypes)
      ]

    out_abs = jax.eval_shape(transform, src_abs,
                             [dst[n] for n in self._order])
    for n, got in zip(self._order, out_abs):
      want = tuple(dst[n].shape)
      if tuple(got.shape) != want:
        t = by_name[n]
        raise ValueError(
            f"Engine parameter {n!r} has shape {want}, but trainer parameter"
            f" {t.source!r} {tuple(src[t.source].shape)} maps to"
            f" {tuple(got.shape)}."
        )
    shardings = [getattr(dst[n], "sharding", None) for n in self._order]
    self._fn = jax.jit(
        transform,
        out_shardings=shardings,
        donate_argnums=(1,) if donate else (),
        # The old leaves are unused; jit would prune them (and so not donate
        # them) without keep_unused.
        keep_unused=donate,
    )
    self.num_dispatches = 0

  def __call__(
      self, src: Mapping[str, jax.Array], dst: Mapping[str, jax.Array]
  ) -> list[jax.Array]:
    """New engine leaves in `dst` order (one program dispatch)."""
    self.num_dispatches += 1
    return self._fn([src[n] for n in self._src_names],
                     [dst[n] for n in self._order])


_WRITERS: dict[Any, LocalWriter] = {}
_WRITERS_LOCK = threading.Lock()


def local_write(
    engine_state: Any,
    new_params: Any,
    *,
    plan: Sequence[TargetParam],
    donate: bool = True,
    base_params: Any = None,
) -> Any:
  """Writes published trainer parameters into an engine state, locally.

  Args:
    engine_state: the engine's parameter state (e.g. tpu-inference's
      `model_runner.state`: an nnx.State whose leaves are arrays on the
      engine's mesh, named as in the module docstring).
    new_params: the trainer's parameters, already on this host (the
      publisher's output: `nnx.state(model, nnx.Param)` layout, any
      host-local sharding whose devices are the engine's).
    plan: e.g. `qwen3_plan(config, tp_size=...)`.
    donate: donate `engine_state`'s buffers (they are invalid afterwards;
      use the returned state).
    base_params: with a LoRA plan (`with_lora`), where `new_params` holds
      only the adapters (what a LoRA actor publishes): the frozen base
      weights, host-local on the engine's devices; merged with the
      adapters in the same program. None: `new_params` holds everything.

  Returns:
    A state of `engine_state`'s structure, shardings and dtypes holding the
    new weights.

  Raises:
    ValueError: naming the offending parameter on any name or shape
      mismatch (before anything is written).
  """
  dst, treedef, _ = tree_paths.flat_dotted(engine_state)
  src, _, _ = tree_paths.flat_dotted(new_params)
  if base_params is not None:
    base, _, _ = tree_paths.flat_dotted(base_params)
    src = {**{n: x for n, x in base.items() if n not in src}, **src}
  plan = tuple(plan)
  key = (plan, _signature(src), _signature(dst), donate)
  with _WRITERS_LOCK:
    writer = _WRITERS.get(key)
    if writer is None:
      writer = LocalWriter(plan, src=src, dst=dst, donate=donate)
      _WRITERS[key] = writer
  return jax.tree_util.tree_unflatten(treedef, writer(src, dst))


__all__ = [
    "LocalWriter",
    "TargetParam",
    "local_write",
    "qwen3_plan",
    "with_lora",
]
