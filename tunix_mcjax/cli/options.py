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

"""What the GRPO command line adds to Tunix's config, and its error type."""

from __future__ import annotations

import dataclasses

import tunix_mcjax

# The stock backend, the default; the others as the registry lists them.
DEFAULT_BACKEND = "tunix"
BACKENDS = (
    DEFAULT_BACKEND,
    *(n for n in tunix_mcjax.backend_names() if n != DEFAULT_BACKEND),
)


class ConfigError(ValueError):
  """A config the chosen backend cannot run; raised before hosts start."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class CliOptions:
  """What this entry point adds to Tunix's GRPO config.

  Attributes:
    backend: a registered backend name (BACKENDS), e.g. "tunix" or "mcjax".
    metrics_out: JSONL file of per-step records, or None.
    placement_invariant_sampling: tunix backend only; see
      `tunix_mcjax.cli.grpo_main`.
  """

  backend: str = DEFAULT_BACKEND
  metrics_out: str | None = None
  placement_invariant_sampling: bool = False

  def __post_init__(self):
    if self.backend not in BACKENDS:
      raise ConfigError(
          f"--backend={self.backend!r} is not one of {list(BACKENDS)}."
      )
    if self.placement_invariant_sampling and self.backend != "tunix":
      raise ConfigError(
          "--placement_invariant_sampling applies to --backend=tunix only;"
          " mcjax always samples placement-invariantly."
      )

  @property
  def deals_prompts(self) -> bool:
    """Whether batches go through admission (row ids, equal host shares)."""
    return self.backend == "mcjax" or self.placement_invariant_sampling
