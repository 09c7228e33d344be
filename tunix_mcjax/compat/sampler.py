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

"""The private names of Tunix's sampler (`tunix.generate.sampler`) we use.

The native engine samples with Tunix's `Sampler`, replacing only its
per-token sampling step. That step is the private method `Sampler._sample`,
and its state the private `_SamplingState`; `HookedSampler` turns the step
into the overridable `sample_step`, so the engine never names either.
Upstream: a public sampling-step hook (or a per-row key option).
"""

from __future__ import annotations

from typing import Any

import jax
from tunix.generate import sampler as _sampler_lib

# The sampler's decoding state (a dataclass: token buffer, KV cache, seed,
# decoding step, ...), passed to and returned by `sample_step`.
SamplingState = _sampler_lib._SamplingState  # pylint: disable=protected-access


class HookedSampler(_sampler_lib.Sampler):
  """Tunix's `Sampler` whose per-token sampling step can be overridden."""

  def sample_step(
      self,
      logits: jax.Array,
      eos: jax.Array,
      cache: dict[str, dict[str, Any]],
      sampler_state: SamplingState,
  ) -> SamplingState:
    """Samples the next token of every row; Tunix's own step by default."""
    return super()._sample(  # pylint: disable=protected-access
        logits=logits, eos=eos, cache=cache, sampler_state=sampler_state
    )

  # Tunix calls this with keyword arguments from its decode loop.
  def _sample(
      self,
      logits: jax.Array,
      eos: jax.Array,
      cache: dict[str, dict[str, Any]],
      sampler_state: SamplingState,
  ) -> SamplingState:
    return self.sample_step(logits, eos, cache, sampler_state)
