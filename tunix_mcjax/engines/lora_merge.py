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

"""LoRA adapters merged into their base weights, for engines outside JAX.

qwix's LoRA (what Tunix's `lora_config` applies) computes, for each adapted
projection with base weight W, `x @ W + (x @ A) @ B * (alpha / rank)`, where
A holds W's contracting (input) dimensions then the rank, and B the rank then
W's other (output) dimensions, in W's order. So the merged weight is
`W + (alpha / rank) * tensordot(A, B, 1)`, the shape of W. An engine that
cannot run the adapters itself (vLLM with PyTorch loads LoRA adapters from
files only) keeps W host-local and installs the merged weights.
"""

from __future__ import annotations

from collections.abc import Mapping
import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp

from tunix_mcjax import tree_paths

ParamPath = tree_paths.ParamPath
_SUFFIXES = ("_lora_a", "_lora_b")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Adapter:
  """One adapted projection: the paths of its base weight, A and B."""

  weight: ParamPath
  a: ParamPath
  b: ParamPath


def is_adapter(path: ParamPath) -> bool:
  """Whether `path` names a qwix LoRA A or B parameter."""
  last = path[-1] if path else None
  return isinstance(last, str) and last.endswith(_SUFFIXES)


def adapters(paths: Any) -> tuple[Adapter, ...]:
  """The adapted projections among `paths` (qwix's `<w>_lora_a/b` names).

  Raises:
    ValueError: An A without its B (or base weight), or the reverse.
  """
  paths = set(paths)
  out = []
  for path in sorted(
      (p for p in paths if is_adapter(p) and p[-1].endswith("_lora_a")),
      key=tree_paths.dotted,
  ):
    base = path[-1].removesuffix("_lora_a")
    weight, b = (*path[:-1], base), (*path[:-1], f"{base}_lora_b")
    for need in (weight, b):
      if need not in paths:
        raise ValueError(
            f"LoRA parameter {tree_paths.dotted(path)!r} has no"
            f" {tree_paths.dotted(need)!r}."
        )
    out.append(Adapter(weight=weight, a=path, b=b))
  lone = [p for p in paths if is_adapter(p) and p[-1].endswith("_lora_b")
          and (*p[:-1], p[-1].replace("_lora_b", "_lora_a")) not in paths]
  if lone:
    raise ValueError(
        f"LoRA parameter {tree_paths.dotted(lone[0])!r} has no A matrix."
    )
  return tuple(out)


def scale(lora_config: Mapping[str, Any] | None, *, where: str) -> float:
  """qwix's adapter scale alpha / rank from a Tunix `lora_config` mapping."""
  if not lora_config or "rank" not in lora_config or (
      "alpha" not in lora_config):
    raise ValueError(
        f"{where} needs the actor's LoRA rank and alpha to merge its"
        " adapters (they are not stored in the model): set it to the"
        " actor's lora_config, e.g. {'rank': 8, 'alpha': 16.0}."
    )
  rank, alpha = lora_config["rank"], lora_config["alpha"]
  if not isinstance(rank, int) or rank < 1 or float(alpha) <= 0:
    raise ValueError(f"{where}: rank={rank!r} / alpha={alpha!r} are invalid.")
  return float(alpha) / rank


def merge_one(w: jax.Array, a: jax.Array, b: jax.Array,
              scale_: float) -> jax.Array:
  """`w + scale * tensordot(a, b, 1)`, computed in float32, in w's dtype."""
  delta = jnp.tensordot(a.astype(jnp.float32), b.astype(jnp.float32), 1)
  if delta.shape != w.shape:
    raise ValueError(
        f"LoRA A {a.shape} x B {b.shape} gives {delta.shape}, not the base"
        f" weight's {w.shape}: this projection's layout is not supported."
    )
  return (w.astype(jnp.float32) + scale_ * delta).astype(w.dtype)


# The scale is static: a traced scalar argument would be a host-to-device
# transfer, which the cluster's publication guard forbids.
@functools.partial(jax.jit, static_argnums=3)
def _merge_all(weights, a, b, scale_):
  return [merge_one(w, x, y, scale_) for w, x, y in zip(weights, a, b)]


def merge(
    base: Mapping[ParamPath, jax.Array],
    lora: Mapping[ParamPath, jax.Array],
    adapted: tuple[Adapter, ...],
    scale_: float,
) -> dict[ParamPath, jax.Array]:
  """Merged weights of every adapted projection (one jitted program).

  Args:
    base: base weights by path (at least every `adapted[i].weight`).
    lora: A and B matrices by path.
    adapted: the projections to merge (`adapters(...)`).
    scale_: alpha / rank.

  Returns:
    weight path -> merged weight, the base weight's shape and dtype.
  """
  merged = _merge_all(
      [base[t.weight] for t in adapted], [lora[t.a] for t in adapted],
      [lora[t.b] for t in adapted], float(scale_),
  )
  return {t.weight: m for t, m in zip(adapted, merged)}
