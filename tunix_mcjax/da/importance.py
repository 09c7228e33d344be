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

"""Truncated importance weights for rollouts sampled by an older policy.

With staleness K >= 1 a batch was sampled by policy version v - k (k <= K)
while the trainer holds version v. The PPO ratio stays against the trainer's
own log-probs at the start of the update (the proximal policy, recomputed on
the trainer hosts), and each completion token t is weighted by

  w_t = min(exp(logp_prox_t - logp_sampler_t), C)

(truncated importance sampling, as in verl and Tunix's agentic learner; Tunix
multiplies `TrainExample.sampler_is_weights` into the per-token policy loss
before aggregation). Masked positions get weight 1: the loss ignores them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def padded_sampler_logps(
    logprobs: Sequence[Sequence[float]], width: int
) -> np.ndarray:
  """Per-row sampler log-probs, right-padded with 0 to `width` columns.

  Args:
    logprobs: one sequence per row: the log-prob of each generated token
      (the engine's `RolloutOutput.logprobs`; padding past a row's own
      length is allowed and dropped).
    width: the completion width of the learner's `TrainExample`.
  """
  out = np.zeros((len(logprobs), width), np.float32)
  for i, row in enumerate(logprobs):
    row = np.asarray(row, np.float32)[:width]
    out[i, :row.shape[0]] = row
  return out


def truncated_weights(
    prox_logps: np.ndarray,
    sampler_logps: np.ndarray,
    completion_mask: np.ndarray,
    cap: float,
) -> np.ndarray:
  """`min(exp(prox - sampler), cap)` on completion tokens, 1 elsewhere."""
  prox = np.asarray(prox_logps, np.float64)
  sampler = np.asarray(sampler_logps, np.float64)
  mask = np.asarray(completion_mask).astype(bool)
  if prox.shape != sampler.shape or prox.shape != mask.shape:
    raise ValueError(
        f"Log-prob and mask shapes differ: proximal {prox.shape}, sampler"
        f" {sampler.shape}, mask {mask.shape}."
    )
  # Clip the exponent first: a far-off token must give the cap, not inf.
  w = np.minimum(np.exp(np.minimum(prox - sampler, np.log(cap))), cap)
  return np.where(mask, w, 1.0).astype(np.float32)


def context_aligned(completion_ids: np.ndarray, mask: np.ndarray,
                    pad_id: int) -> np.ndarray:
  """Completion tokens whose context the trainer sees as the sampler did.

  The sampler conditions on every token it generated, a sampled pad token
  included; Tunix's trainer masks pad tokens out of the attention, so after
  a pad inside a completion (small vocabularies sample it) the two compute
  log-probs of different contexts, and the weights there measure that
  difference too, not only the policies'.
  """
  ids = np.asarray(completion_ids)
  after_pad = np.cumsum(ids == pad_id, axis=1) > 0
  return np.asarray(mask).astype(bool) & ~after_pad


def weight_stats(weights: np.ndarray, mask: np.ndarray,
                 aligned: np.ndarray | None = None) -> dict[str, float]:
  """Mean, min and max weight over completion tokens.

  With `aligned` (`context_aligned`) also the largest |w - 1| over those
  tokens and how many completion tokens are not aligned.
  """
  mask = np.asarray(mask).astype(bool)
  all_w = np.asarray(weights, np.float64)
  w = all_w[mask]
  out = ({"is_weight_mean": 1.0, "is_weight_min": 1.0, "is_weight_max": 1.0}
         if not w.size else
         {"is_weight_mean": float(w.mean()), "is_weight_min": float(w.min()),
          "is_weight_max": float(w.max())})
  if aligned is not None:
    aligned = np.asarray(aligned).astype(bool) & mask
    dev = np.abs(all_w[aligned] - 1.0)
    out["is_weight_max_dev_aligned"] = float(dev.max()) if dev.size else 0.0
    out["misaligned_tokens"] = int((mask & ~aligned).sum())
  return out
