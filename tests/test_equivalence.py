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

"""The core correctness test: mcjax gives stock Tunix's numbers.

Runs the GRPO example end to end (2 steps, KL on so the reference path is
exercised, an evaluation pass before every step) as: stock Tunix single
controller (1 process x 4 devices), mcjax with 2 hosts x 2 devices, and
mcjax with 1 host x 4 devices; same seed and data (the session fixture
`equivalence_runs` in tests/conftest.py, shared with
tests/test_eval_equivalence.py). Compared: every completion and reward
(exactly), per-step losses and rewards, and the final parameters.

Tolerances (fp32): completions and rewards must match exactly; losses and
parameters within rtol = atol = 1e-6. On CPU all three runs are observed to
be bit-identical; the slack only admits a different float summation order
(other backends or device counts), which Adam can amplify in tiny gradients.
"""

import json

import pytest

import example_runs

pytestmark = [pytest.mark.multihost, pytest.mark.e2e]


@pytest.fixture(name="runs")
def runs_fixture(equivalence_runs):
  return equivalence_runs


@pytest.mark.parametrize("other", ["mcjax2", "mcjax1"])
def test_same_rollouts_and_rewards(runs, other):
  example_runs.assert_same_rollouts_and_rewards(runs["tunix"], runs[other])


@pytest.mark.parametrize("other", ["mcjax2", "mcjax1"])
def test_same_losses_and_parameters(runs, other):
  example_runs.assert_same_losses_and_parameters(runs["tunix"], runs[other])


@pytest.mark.parametrize("run", ["tunix", "mcjax2"])
def test_training_changed_the_parameters(runs, run):
  example_runs.assert_parameters_moved(runs[run])


def test_metrics_jsonl_schema(runs):
  lines = (runs["mcjax2"] / "metrics.jsonl").read_text().splitlines()
  assert len(lines) == 2
  for line in lines:
    rec = json.loads(line)
    for key in ("step", "backend", "num_hosts", "reward_mean", "loss",
                "completion_len_mean", "step_time_s", "phases"):
      assert key in rec, key
    assert rec["backend"] == "mcjax" and rec["num_hosts"] == 2
    assert set(rec["phases"]) == {"admission", "generate", "logps", "reward",
                                  "learner_host", "train", "publish"}
    assert rec["step_time_s"] >= max(rec["phases"].values())
