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

"""LoRA rules: settings qwix can apply, and the engines that take a LoRA
actor."""

from __future__ import annotations

from collections.abc import Sequence
import re
from typing import Any

from tunix_mcjax.rules.problem import Problem

# Engines that take a LoRA actor: native holds base + adapters; vllm and
# vllm_tpu (tpu-inference's mapping, `with_lora`) merge the adapters into
# their weights on the host. All receive only the adapters
# (`nnx.LoRAParam`) at each publication.
LORA_ENGINES = ("native", "vllm", "vllm_tpu")

# The module paths (qwix's '/'-joined names, matched with re.fullmatch) of a
# Qwen3 layer's linear projections: what a LoRA `module_path` regex selects.
QWEN3_LORA_TARGETS = (
    "attn/q_proj", "attn/k_proj", "attn/v_proj", "attn/o_proj",
    "mlp/gate_proj", "mlp/up_proj", "mlp/down_proj",
)

# All seven projections, as Tunix's Qwen3 GSM8K recipe selects them.
DEFAULT_LORA_MODULES = (
    ".*q_proj|.*k_proj|.*v_proj|.*o_proj|.*gate_proj|.*up_proj|.*down_proj"
)


def lora_module_paths(num_layers: int = 64) -> tuple[str, ...]:
  """Qwen3 module paths a LoRA regex may select (no model needed)."""
  return tuple(
      f"layers/{i}/{t}" for i in range(num_layers) for t in QWEN3_LORA_TARGETS
  )


def lora_settings(
    rank: Any,
    alpha: Any,
    module_path: Any,
    *,
    prefix: str = "",
    module_path_key: str = "module_path",
    module_paths: Sequence[str] | None = None,
) -> Problem | None:
  """A LoRA config (Tunix's `lora_config`) that qwix can apply.

  Checked before any host starts: a rank below 1 or a regex that selects no
  projection would otherwise fail (or silently train nothing) deep inside
  qwix on every host.
  """
  if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
    return Problem(
        message=f"{prefix}rank={rank!r}: a LoRA rank must be an integer >= 1"
        " (e.g. 8); remove the LoRA settings to train full weights.",
    )
  if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or (
      alpha <= 0
  ):
    return Problem(
        message=f"{prefix}alpha={alpha!r}: LoRA alpha must be a number > 0"
        " (the adapters are scaled by alpha/rank; alpha=rank scales by 1).",
    )
  if not isinstance(module_path, str) or not module_path:
    return Problem(
        message=f"{prefix}{module_path_key}={module_path!r}: give a regex of"
        f" the modules to adapt, e.g. {DEFAULT_LORA_MODULES!r}.",
    )
  try:
    pattern = re.compile(module_path)
  except re.error as e:
    return Problem(
        message=f"{prefix}{module_path_key}={module_path!r} is not a valid"
        f" regex ({e}).",
    )
  paths = lora_module_paths() if module_paths is None else module_paths
  if not any(pattern.fullmatch(p) for p in paths):
    return Problem(
        message=f"{prefix}{module_path_key}={module_path!r} matches no module"
        " (qwix matches the whole '/'-joined path, e.g."
        " 'layers/0/attn/q_proj'); e.g."
        f" {DEFAULT_LORA_MODULES!r} selects all seven projections.",
    )
  return None


def lora_engine(engine: str, lora_enabled: bool) -> Problem | None:
  """Only engines that hold base + adapters take a LoRA actor."""
  if not lora_enabled or engine in LORA_ENGINES:
    return None
  return Problem(
      message=f"engine={engine!r} with a LoRA actor: mcjax publishes only the"
      " adapters, which this engine cannot apply yet (its weight mapping"
      " does not merge them). Use one of"
      f" {list(LORA_ENGINES)} for LoRA actors, or train full weights.",
      error=NotImplementedError,
  )
