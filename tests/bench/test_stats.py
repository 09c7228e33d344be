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

"""The measurement protocol's statistics."""

import numpy as np
import pytest

from tunix_mcjax.bench import arms
from tunix_mcjax.bench import stats


def test_ratio_interval_covers_the_true_speedup():
  rng = np.random.default_rng(1)
  base = 2.0 * (1 + 0.05 * rng.standard_normal(40))
  fast = 1.0 * (1 + 0.05 * rng.standard_normal(40))
  iv = stats.ratio_interval(base, fast)
  assert iv.value == pytest.approx(np.median(base) / np.median(fast))
  assert iv.low < 2.0 < iv.high
  assert 1.8 < iv.low <= iv.value <= iv.high < 2.2
  assert stats.verdict(iv) == "faster"
  assert stats.verdict(stats.ratio_interval(fast, base)) == "slower"


def test_bootstrap_is_reproducible_and_uses_10k_resamples(monkeypatch):
  a, b = [1.0, 1.2, 0.9, 1.1], [0.8, 0.85, 0.9, 0.7]
  assert stats.ratio_interval(a, b) == stats.ratio_interval(a, b)
  assert stats.RESAMPLES == 10_000 and stats.CONFIDENCE == 0.95
  sizes = []
  real = stats._bootstrap_medians  # pylint: disable=protected-access

  def spy(x, resamples, rng):
    sizes.append(resamples)
    return real(x, resamples, rng)

  monkeypatch.setattr(stats, "_bootstrap_medians", spy)
  stats.ratio_interval(a, b)
  assert sizes == [10_000, 10_000]


def test_percentile_interval_of_a_known_case():
  # Constant samples: no spread, the interval collapses onto the ratio.
  iv = stats.ratio_interval([3.0] * 5, [2.0] * 7)
  assert (iv.low, iv.value, iv.high) == (1.5, 1.5, 1.5)
  med = stats.median_interval([1.0, 2.0, 3.0])
  assert med.value == 2.0 and 1.0 <= med.low <= 2.0 <= med.high <= 3.0


@pytest.mark.parametrize("low,high,want", [
    (1.12, 1.5, "faster"),
    (1.111, 1.5, "no difference shown"),  # Must exceed, not reach.
    (1.05, 1.3, "no difference shown"),
    (0.5, 0.89, "slower"),
    (0.5, 0.9001, "no difference shown"),
])
def test_faster_only_if_lower_bound_exceeds_1111(low, high, want):
  iv = stats.Interval(value=(low + high) / 2, low=low, high=high)
  assert stats.verdict(iv) == want


def test_bad_samples_are_refused():
  with pytest.raises(ValueError, match="non-empty"):
    stats.ratio_interval([], [1.0])
  with pytest.raises(ValueError, match="non-finite"):
    stats.median_interval([1.0, float("nan")])
  with pytest.raises(ValueError, match="positive"):
    stats.ratio_interval([1.0], [0.0])


def _work(**kw):
  base = dict(prompts=("a", "b"), mean_length=10.0, longest=20.0,
              truncated_share=0.2)
  return stats.WorkSummary(**(base | kw))


@pytest.mark.parametrize("other,equal,failed", [
    (_work(), True, None),
    (_work(mean_length=8.0, longest=25.0), True, None),  # Edges included.
    (_work(mean_length=7.9), False, "mean_length"),
    (_work(longest=25.1), False, "longest"),
    (_work(prompts=("a", "c")), False, "same_prompts"),
    (_work(prompts=("b", "a")), False, "same_prompts"),  # Order matters.
    (_work(truncated_share=0.31), False, "truncation"),
    (_work(truncated_share=0.3), True, None),
])
def test_equal_work_verdict(other, equal, failed):
  got = stats.equal_work(_work(), other)
  assert got["equal"] is equal
  if failed:
    assert not got["checks"][failed]["ok"]
    assert [k for k, v in got["checks"].items() if not v["ok"]] == [failed]


def test_summarize_work_from_records():
  recs = [
      {"prompts_digest": "x", "completion_len_mean": 4.0,
       "completion_len_max": 8, "truncated_share": 0.5},
      {"prompts_digest": "y", "completion_len_mean": 6.0,
       "completion_len_max": 7, "truncated_share": 0.0},
  ]
  w = stats.summarize_work(recs)
  assert w == stats.WorkSummary(prompts=("x", "y"), mean_length=5.0,
                                longest=8.0, truncated_share=0.25)


def test_modes_are_consistent():
  for mode in (arms.MODES["quick"], arms.MODES["full"]):
    assert mode.arms[0].name == arms.BASELINE
    assert len({a.total_devices for a in mode.arms}) == 1
    assert {a.num_hosts for a in mode.arms if a.profile == "optimized"} == {
        1, 2, 4}
  wl = arms.Workload(steps=3, passes=2)
  assert [s for s in range(1, 7) if wl.scored(s)] == [4, 5, 6]
  with pytest.raises(ValueError, match="does not divide"):
    arms.BenchMode(name="x", micro=None, workload=arms.Workload(
        steps=1, batch_size=3), arms=arms.standard_arms(4))


def _iv(low, high=None):
  high = low + 0.2 if high is None else high
  return stats.Interval(value=(low + high) / 2, low=low, high=high)


def _evidence(**kw):
  good = dict(per_step=(_iv(1.3),) * 3, per_token=(_iv(1.25),) * 3,
              welch_per_step=_iv(1.2), welch_per_token=_iv(1.2),
              equal_work=(True,) * 3, launches=(3, 3))
  return stats.Evidence(**(good | kw))


def test_decide_faster_only_when_every_condition_holds():
  assert stats.decide(_evidence()) == {"verdict": "faster", "reasons": []}


@pytest.mark.parametrize("kw,reason", [
    # One launch pair's per-step bound at the threshold (must exceed).
    (dict(per_step=(_iv(1.3), _iv(1.111), _iv(1.3))),
     "per-step lower bound 1.111 <= 1.111 (launch 2)"),
    (dict(welch_per_step=_iv(1.05)),
     "per-step lower bound 1.050 <= 1.111 (Welch over launches)"),
    # Per step holds; per token does not (e.g. the faster arm wrote less).
    (dict(per_token=(_iv(1.25), _iv(1.25), _iv(1.0))),
     "per-token lower bound 1.000 <= 1.111 (launch 3)"),
    (dict(welch_per_token=_iv(0.9)),
     "per-token lower bound 0.900 <= 1.111 (Welch over launches)"),
    (dict(equal_work=(True, False, True)), "equal work failed (launch 2)"),
    (dict(equal_work=()), "equal work failed (not checked)"),
    (dict(per_step=(_iv(1.3),), per_token=(_iv(1.3),), welch_per_step=None,
          welch_per_token=None, equal_work=(True,), launches=(1, 1)),
     "launches 1 and 1 < 3 per arm (provisional)"),
])
def test_decide_names_the_failed_condition(kw, reason):
  got = stats.decide(_evidence(**kw))
  assert got["verdict"] == "not shown faster"
  assert got["reasons"] == [reason]


def test_decide_slower_and_several_reasons():
  got = stats.decide(_evidence(per_step=(_iv(0.5, 0.8),) * 3,
                               welch_per_step=_iv(0.6, 0.85),
                               launches=(3, 2)))
  assert got["verdict"] == "slower"
  assert len(got["reasons"]) == 5  # 3 launches + Welch + launch count.


def test_welch_interval_on_log_launch_medians():
  base, other = [2.0, 2.2, 1.8], [1.0, 1.1, 0.9]
  iv = stats.welch_ratio_interval(base, other)
  geo = np.exp(np.mean(np.log(base)) - np.mean(np.log(other)))
  assert iv.value == pytest.approx(geo)
  # By hand: equal log spreads, so dof = 4 and t = 2.776.
  se = np.sqrt(2 * np.var(np.log(base), ddof=1) / 3)
  assert iv.low == pytest.approx(geo * np.exp(-2.7764451 * se), rel=1e-5)
  assert iv.high == pytest.approx(geo * np.exp(2.7764451 * se), rel=1e-5)
  assert stats.welch_ratio_interval([1.0], [1.0, 2.0]) is None
