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

"""The LoRA merge state of the vllm engine (a LoRA actor, merged weights).

vLLM (PyTorch) loads LoRA adapters from files only, so `VllmEngine` runs
merged weights: W + (alpha / rank) * tensordot(A, B) (`lora_merge`). The
base weights of every vLLM module an adapter touches (q/k/v and gate/up are
packed) stay in JAX on this host, in the engine dtype; the rest of the
frozen base is only in vLLM. `LoraMerge` holds that copy, the adapters'
expected shapes and the adapters of a publication still arriving, and says
which weights to reload; the engine checks the base weights and installs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import jax

from tunix_mcjax import tree_paths
from tunix_mcjax.engines import lora_merge

ParamPath = tree_paths.ParamPath


def split(
    flat: Mapping[ParamPath, Any],
) -> tuple[dict[ParamPath, Any], dict[ParamPath, Any],
           tuple[lora_merge.Adapter, ...]]:
  """(base parameters, LoRA A/B parameters, the adapted projections)."""
  adapted = lora_merge.adapters(flat)
  lora_paths = {p for t in adapted for p in (t.a, t.b)}
  base = {p: x for p, x in flat.items() if p not in lora_paths}
  lora = {p: x for p, x in flat.items() if p in lora_paths}
  return base, lora, adapted


class LoraMerge:
  """What merging a LoRA actor's adapters into vLLM's weights needs.

  Attributes:
    adapted: the adapted projections (`lora_merge.adapters`).
    expected: adapter path -> its shape in the engine dtype.
    pending: adapters of a publication that has not fully arrived.
  """

  def __init__(
      self,
      base: Mapping[ParamPath, jax.Array],
      lora: Mapping[ParamPath, jax.Array],
      *,
      adapted: tuple[lora_merge.Adapter, ...],
      scale: float,
      tensors: Iterable[Any],
      dtype: Any,
      sharding: jax.sharding.Sharding,
  ):
    """Keeps the base weights the adapters merge into.

    Args:
      base: the policy's base weights (checked by the engine).
      lora: its A and B matrices.
      adapted: `split(...)[2]`.
      scale: alpha / rank, from `rollout_config.rollout_vllm_lora_config`
        (Tunix's vLLM LoRA setting; alpha and rank are not in the model).
      tensors: the engine's HF tensors (`qwen3_hf.TunixQwen3ToHf.tensors`),
        whose `vllm_module` groups the packed weights.
      dtype: the engine dtype.
      sharding: where the kept copies live (replicated on the engine mesh).
    """
    self.adapted = adapted
    self._scale = scale
    weights = {t.weight for t in adapted}
    modules: dict[str, list[ParamPath]] = {}
    for t in tensors:
      modules.setdefault(t.vllm_module, []).append(t.src)
    # Every weight of a vLLM module an adapter touches: reloaded together.
    self._install = [src for group in modules.values()
                     if any(p in weights for p in group) for src in group]
    self._keep = jax.jit(lambda x: x.astype(dtype), out_shardings=sharding)
    self._base: dict[ParamPath, jax.Array] = {}
    self._keep_base(base)
    self.expected = {p: jax.ShapeDtypeStruct(tuple(x.shape), dtype)
                     for p, x in lora.items()}
    self.pending: dict[ParamPath, jax.Array] = {}

  def _keep_base(self, base: Mapping[ParamPath, jax.Array]) -> None:
    with jax.transfer_guard("allow"):
      self._base = {p: self._keep(base[p]) for p in self._install}

  def merged(self, lora: Mapping[ParamPath, jax.Array]
             ) -> dict[ParamPath, jax.Array]:
    """Adapted weight path -> its merged weight (one jitted program)."""
    return lora_merge.merge(self._base, lora, self.adapted, self._scale)

  def check_adapters(self, flat: Mapping[ParamPath, Any], *,
                     reshard_on_update: bool) -> dict[ParamPath, Any]:
    """Checks the adapters among `flat`; returns the rest (base weights).

    Raises:
      ValueError: naming an adapter that is not a jax.Array of its shape,
        or (without `reshard_on_update`) a multi-host global array.
    """
    for path, x in flat.items():
      want = self.expected.get(path)
      if want is None:
        continue  # A base weight: the engine checks it.
      if not isinstance(x, jax.Array) or tuple(x.shape) != want.shape:
        raise ValueError(
            f"Adapter {tree_paths.dotted(path)!r} must be a jax.Array of"
            f" shape {want.shape}."
        )
      if not reshard_on_update and not x.is_fully_addressable:
        raise ValueError(
            f"Adapter {tree_paths.dotted(path)!r} is a multi-host global"
            " array; publish it into publication_target() first."
        )
    return {p: x for p, x in flat.items() if p not in self.expected}

  def add(self, lora: Mapping[ParamPath, jax.Array]
          ) -> dict[ParamPath, jax.Array] | None:
    """Holds adapters until all have arrived; then the weights to reload.

    Returns:
      None while adapters are missing; else every weight of the vLLM
      modules the adapters touch, merged where adapted.
    """
    self.pending.update(lora)
    if len(self.pending) < len(self.expected):
      return None
    lora, self.pending = self.pending, {}
    merged = self.merged(lora)
    return {p: merged.get(p, self._base[p]) for p in self._install}

  def replace_base(self, base: Mapping[ParamPath, jax.Array],
                   flat: Mapping[ParamPath, jax.Array]
                   ) -> dict[ParamPath, jax.Array]:
    """A complete publication (base and adapters): the new merged weights.

    The disaggregated backend's rollout hosts get one (their first
    weights); its base (checked by the engine) also replaces the copy the
    adapters are merged into.

    Raises:
      ValueError: an adapter is missing from `flat`.
    """
    missing = sorted(tree_paths.dotted(p) for p in self.expected
                     if p not in flat)
    if missing:
      raise ValueError(
          f"update_params got base weights without adapter {missing[0]!r}"
          f" ({len(missing)} missing): publish the adapters alone, or the"
          " base and every adapter together."
      )
    self._keep_base(base)
    self.pending = {}
    return self.merged({p: flat[p] for p in self.expected})
