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

"""Statistics of the measurement protocol (LoCoJAX brief, "Measurement").

- Step time: the median over steady steps (the second pass over the same
  batches).
- Speedup T_baseline / T_other, per step and per generated token, with a
  95% percentile bootstrap interval over steady steps (10,000 resamples;
  each arm's steps resampled independently).
- "Faster" only if the interval's lower bound exceeds 1.111 (a 10% shorter
  step time); "slower" only if its upper bound is below 1 / 1.111.
- Equal work: same prompts in the same order; mean and longest output
  lengths within [0.8, 1.25]x of the baseline; truncation shares within 10
  percentage points.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
from typing import Any

import numpy as np

RESAMPLES = 10_000
CONFIDENCE = 0.95
FASTER_THRESHOLD = 1.111
LENGTH_RATIO_RANGE = (0.8, 1.25)
TRUNCATION_POINTS = 0.10


@dataclasses.dataclass(frozen=True, kw_only=True)
class Interval:
  """A point estimate with its bootstrap interval."""

  value: float
  low: float
  high: float

  def __post_init__(self):
    if not self.low <= self.high:
      raise ValueError(f"Interval low {self.low} > high {self.high}.")

  def as_dict(self) -> dict[str, float]:
    return dataclasses.asdict(self)


def _as_samples(x: Sequence[float], name: str) -> np.ndarray:
  a = np.asarray(x, dtype=np.float64)
  if a.ndim != 1 or a.size == 0:
    raise ValueError(f"{name} must be a non-empty 1-D sequence.")
  if not np.all(np.isfinite(a)):
    raise ValueError(f"{name} has non-finite values.")
  return a


def _bootstrap_medians(
    a: np.ndarray, resamples: int, rng: np.random.Generator
) -> np.ndarray:
  idx = rng.integers(0, a.size, size=(resamples, a.size))
  return np.median(a[idx], axis=1)


def _percentiles(x: np.ndarray, confidence: float) -> tuple[float, float]:
  tail = (1.0 - confidence) / 2 * 100
  lo, hi = np.percentile(x, [tail, 100 - tail])
  return float(lo), float(hi)


def median_interval(
    samples: Sequence[float],
    *,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> Interval:
  """Median with a percentile bootstrap interval."""
  a = _as_samples(samples, "samples")
  rng = np.random.default_rng(seed)
  lo, hi = _percentiles(_bootstrap_medians(a, resamples, rng), confidence)
  return Interval(value=float(np.median(a)), low=lo, high=hi)


def ratio_interval(
    baseline: Sequence[float],
    other: Sequence[float],
    *,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> Interval:
  """median(baseline) / median(other) with a percentile bootstrap interval.

  Each sample is resampled independently (the arms ran separately); a
  ratio above 1 means `other` is faster.

  Args:
    baseline: the baseline's per-step times (or times per token).
    other: the other arm's.
    resamples: bootstrap resamples.
    confidence: two-sided coverage of the interval.
    seed: seed of the resampling (results are reproducible).

  Returns:
    The ratio of medians and its interval.
  """
  a = _as_samples(baseline, "baseline")
  b = _as_samples(other, "other")
  if np.any(b <= 0) or np.any(a <= 0):
    raise ValueError("times must be positive.")
  rng = np.random.default_rng(seed)
  ratios = _bootstrap_medians(a, resamples, rng) / _bootstrap_medians(
      b, resamples, rng
  )
  lo, hi = _percentiles(ratios, confidence)
  return Interval(
      value=float(np.median(a) / np.median(b)), low=lo, high=hi
  )


def verdict(ratio: Interval, threshold: float = FASTER_THRESHOLD) -> str:
  """"faster", "slower" or "no difference shown" for a speedup interval."""
  if ratio.low > threshold:
    return "faster"
  if ratio.high < 1.0 / threshold:
    return "slower"
  return "no difference shown"


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkSummary:
  """What an arm generated over its scored steps.

  Attributes:
    prompts: per scored step, a fingerprint of the global batch's prompts in
      order.
    mean_length: mean completion length (tokens) over all scored rows.
    longest: longest completion (tokens).
    truncated_share: share of completions that used the whole budget.
  """

  prompts: tuple[str | None, ...]
  mean_length: float
  longest: float
  truncated_share: float | None


def summarize_work(records: Sequence[dict[str, Any]]) -> WorkSummary:
  """A WorkSummary from per-step records (scored steps only)."""
  if not records:
    raise ValueError("No records to summarize.")
  # Every step generates equally many rows: the mean of step means is the
  # mean over rows.
  mean_length = float(np.mean([r["completion_len_mean"] for r in records]))
  shares = [r.get("truncated_share") for r in records]
  return WorkSummary(
      prompts=tuple(r.get("prompts_digest") for r in records),
      mean_length=mean_length,
      longest=float(max(r["completion_len_max"] for r in records)),
      truncated_share=(
          float(np.mean(shares)) if all(s is not None for s in shares)
          else None
      ),
  )


def equal_work(baseline: WorkSummary, other: WorkSummary) -> dict[str, Any]:
  """The equal-work check of `other` against `baseline`.

  Returns:
    {"equal": bool, "checks": {name: {"ok": bool, ...}}}.
  """
  lo, hi = LENGTH_RATIO_RANGE
  checks = {}
  checks["same_prompts"] = {
      "ok": baseline.prompts == other.prompts and None not in other.prompts,
      "steps": len(other.prompts),
  }
  for name, a, b in (("mean_length", baseline.mean_length, other.mean_length),
                     ("longest", baseline.longest, other.longest)):
    ratio = b / a if a > 0 else float("inf")
    checks[name] = {"ok": bool(lo <= ratio <= hi), "ratio": ratio,
                    "baseline": a, "other": b}
  if baseline.truncated_share is None or other.truncated_share is None:
    checks["truncation"] = {"ok": False, "reason": "not recorded"}
  else:
    gap = abs(other.truncated_share - baseline.truncated_share)
    checks["truncation"] = {
        "ok": bool(gap <= TRUNCATION_POINTS + 1e-12),
        "points": gap,
        "baseline": baseline.truncated_share,
        "other": other.truncated_share,
    }
  return {"equal": all(c["ok"] for c in checks.values()), "checks": checks}


# --- the paper's verdict over launches (Appendix A) -------------------------

# Launches per arm a "faster" verdict needs; fewer make a result provisional.
REQUIRED_LAUNCHES = 3


def welch_ratio_interval(
    baseline: Sequence[float],
    other: Sequence[float],
    *,
    confidence: float = CONFIDENCE,
) -> Interval | None:
  """Ratio of launch values, baseline / other, from a Welch interval on logs.

  The difference of the mean log launch values (each launch's steady median)
  gets a Welch t interval (unequal variances, Welch-Satterthwaite degrees of
  freedom); exponentiated, it is an interval on the geometric-mean ratio.

  Args:
    baseline: the baseline's per-launch values (e.g. median step times).
    other: the other arm's.
    confidence: two-sided coverage.

  Returns:
    The interval, or None with fewer than 2 launches on either side.
  """
  a = np.log(_as_samples(baseline, "baseline"))
  b = np.log(_as_samples(other, "other"))
  if a.size < 2 or b.size < 2:
    return None
  from scipy import stats as scipy_stats  # pylint: disable=g-import-not-at-top

  va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
  diff = float(a.mean() - b.mean())
  se = float(np.sqrt(va + vb))
  if se == 0.0:
    return Interval(value=float(np.exp(diff)), low=float(np.exp(diff)),
                    high=float(np.exp(diff)))
  dof = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
  half = float(scipy_stats.t.ppf(0.5 + confidence / 2, dof)) * se
  return Interval(value=float(np.exp(diff)), low=float(np.exp(diff - half)),
                  high=float(np.exp(diff + half)))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Evidence:
  """Everything the verdict of one comparison rests on.

  Attributes:
    per_step: per launch pair, the bootstrap speedup interval per step.
    per_token: the same per generated token.
    welch_per_step: Welch interval on log launch medians (None: < 2
      launches).
    welch_per_token: the same per token.
    equal_work: per launch pair, whether the equal-work check held.
    launches: (baseline launches, other launches).
  """

  per_step: tuple[Interval, ...]
  per_token: tuple[Interval, ...]
  welch_per_step: Interval | None
  welch_per_token: Interval | None
  equal_work: tuple[bool, ...]
  launches: tuple[int, int]


def decide(
    ev: Evidence,
    *,
    threshold: float = FASTER_THRESHOLD,
    required_launches: int = REQUIRED_LAUNCHES,
) -> dict[str, Any]:
  """The paper's verdict: "faster", "slower" or "not shown faster", and why.

  "faster" needs all of: `required_launches` launches per arm; every per-step
  and every per-token lower bound (each launch pair's bootstrap and the
  Welch interval over launches) above `threshold`; equal work in every
  launch pair. Otherwise `reasons` names each condition that failed.
  "slower" is the mirror image on the per-step upper bounds (reported for
  information; it needs no launch count).

  Returns:
    {"verdict": str, "reasons": [str, ...]}.
  """
  reasons = []
  for kind, boot, welch in (("per-step", ev.per_step, ev.welch_per_step),
                            ("per-token", ev.per_token,
                             ev.welch_per_token)):
    bounds = [(f"launch {i + 1}", iv.low) for i, iv in enumerate(boot)]
    if welch is not None:
      bounds.append(("Welch over launches", welch.low))
    if not bounds:
      reasons.append(f"{kind}: no interval")
    for where, low in bounds:
      if not low > threshold:
        reasons.append(f"{kind} lower bound {low:.3f} <= {threshold}"
                       f" ({where})")
  if not ev.equal_work or not all(ev.equal_work):
    bad = [str(i + 1) for i, ok in enumerate(ev.equal_work) if not ok]
    reasons.append("equal work failed" + (
        f" (launch {', '.join(bad)})" if bad else " (not checked)"))
  if min(ev.launches) < required_launches:
    reasons.append(f"launches {ev.launches[0]} and {ev.launches[1]} <"
                   f" {required_launches} per arm (provisional)")
  if not reasons:
    return {"verdict": "faster", "reasons": []}
  uppers = [iv.high for iv in ev.per_step]
  if ev.welch_per_step is not None:
    uppers.append(ev.welch_per_step.high)
  if uppers and all(u < 1.0 / threshold for u in uppers):
    return {"verdict": "slower", "reasons": reasons}
  return {"verdict": "not shown faster", "reasons": reasons}
