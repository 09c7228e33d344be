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

"""Evaluation and Tunix's own logged metrics: mcjax gives stock numbers.

The core equivalence runs of the GRPO example (the session fixture
`equivalence_runs` in tests/conftest.py), which evaluate before every step
(`--eval_every=1`): stock Tunix (1 process x 4 devices) and mcjax (2 hosts x
2 devices), same seed and data. Compared: every evaluation
completion and reward (exactly), and every value Tunix's learner logs itself
(`rewards/*`, `completions/*`, train and eval, as its external metrics
logger receives them). Means are combined from equal host shares, so they
may differ from the single controller's by float summation order only:
rtol 1e-6 (observed equal on CPU).
"""

import json
import pathlib

import numpy as np
import pytest

import example_runs

pytestmark = [pytest.mark.multihost, pytest.mark.e2e]

@pytest.fixture(name="runs")
def runs_fixture(equivalence_runs):
  return equivalence_runs


def _eval_calls(out: pathlib.Path) -> list[list[dict]]:
  """Per host, its evaluation reward calls (hosts in order)."""
  return [json.loads(p.read_text())
          for p in sorted(out.glob("eval_rollouts_host*.json"))]


def _global_eval_calls(out: pathlib.Path) -> list[dict]:
  """Per call, all hosts' rows in global order (contiguous host blocks)."""
  hosts = _eval_calls(out)
  return [
      {key: sum((h[k][key] for h in hosts), [])
       for key in ("prompts", "completions", "rewards")}
      for k in range(len(hosts[0]))
  ]


def _logged(out: pathlib.Path) -> dict[tuple[str, int], dict[str, float]]:
  entries = json.loads((out / "learner_metrics.json").read_text())
  return {(e["mode"], e["step"]): e["metrics"] for e in entries if e["metrics"]}


def test_training_rollouts_are_unchanged_by_evaluation(runs):
  example_runs.assert_same_rollouts_and_rewards(runs["tunix"], runs["mcjax2"])


def test_same_eval_rollouts_and_rewards(runs):
  ref, got = _global_eval_calls(runs["tunix"]), _global_eval_calls(
      runs["mcjax2"])
  assert len(ref) == len(got) == 2  # One evaluation pass per step.
  for a, b in zip(ref, got):
    assert a == b
  # Both hosts evaluated (a share each), and sampling was not degenerate.
  assert all(len(h) == 2 for h in _eval_calls(runs["mcjax2"]))
  assert len(set(ref[0]["completions"])) > 1


def test_learner_logged_metrics_equal_stock(runs):
  ref, got = _logged(runs["tunix"]), _logged(runs["mcjax2"])
  assert sorted(got) == sorted(ref)
  assert {m for m, _ in ref} == {"train", "eval"}
  for key, metrics in ref.items():
    for name in ("rewards/score/mean", "rewards/score/max",
                 "rewards/score/min", "completions/mean_length",
                 "completions/max_length", "completions/min_length"):
      assert name in metrics, (key, name)
    assert sorted(got[key]) == sorted(metrics), key
    for name, value in metrics.items():
      np.testing.assert_allclose(got[key][name], value, rtol=1e-6,
                                 atol=1e-12, err_msg=f"{key} {name}")


def test_logged_eval_mean_is_over_all_hosts(runs):
  # The comparison above could pass with host 0's rows only if both hosts
  # happened to score alike; show that here they do not.
  hosts = _eval_calls(runs["mcjax2"])
  logged = _logged(runs["mcjax2"])
  differs = False
  for step in range(2):
    rewards = [h[step]["rewards"] for h in hosts]
    everyone = float(np.mean(sum(rewards, [])))
    np.testing.assert_allclose(
        logged[("eval", step)]["rewards/score/mean"], everyone, rtol=1e-6)
    differs |= not np.isclose(np.mean(rewards[0]), everyone)
  assert differs
