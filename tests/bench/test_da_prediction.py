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

"""DA arms: their flags and the report's predicted vs measured step time."""

import json

import pytest

from tunix_mcjax.bench import arms
from tunix_mcjax.bench import render
from tunix_mcjax.bench import report as report_lib

# 2 batches, twice: steps 3 and 4 are scored (and the advisor's steady steps).
WORKLOAD = arms.Workload(steps=2, passes=2, batch_size=4, num_generations=2)
CO, K0, K1 = arms.da_arms(1)
MODE = arms.BenchMode(name="t", arms=(CO, K0, K1), workload=WORKLOAD,
                      micro=None, trace=False)

# The colocated reference (2 hosts), scored steps: D_R = 0.01 + 0.1 + 0.02 +
# 0.02 = 0.15 s, D_T = 0.05 + 0.2 = 0.25 s, d_pub = 0.03 s, o = 0.01 s.
STEADY = {"admission": 0.01, "generate": 0.1, "reward": 0.02,
          "learner_host": 0.02, "logps": 0.05, "train": 0.2, "publish": 0.03}
# Split 1/1 of 2 hosts, linear scaling: D_R(1) = 0.3, D_T(1) = 0.5;
# rollout branch 0.3 + d_L (= d_pub) = 0.33; trainer branch 0.5 + 0.03.
ROLLOUT_BRANCH, TRAINER_BRANCH = 0.33, 0.53
EQ4 = max(ROLLOUT_BRANCH, TRAINER_BRANCH) + 0.01  # 0.54
SERIAL = ROLLOUT_BRANCH + TRAINER_BRANCH + 0.01  # 0.87


def _record(step, phases, step_s, **extra):
  return {"step": step, "num_hosts": 2, "step_time_s": step_s,
          "phases": dict(phases), "host_overhead": {"gc": 0.004, "export":
                                                    0.006},
          "completion_tokens": 8, "completion_len_mean": 2.0,
          "completion_len_max": 4, "truncated_share": 0.0,
          "prompts_digest": f"p{step % 2}", "straggler_wait": {},
          **extra}


def _reference():
  # The first (unscored) pass is 10x slower: compiling; it must not count.
  slow = {k: 10 * v for k, v in STEADY.items()}
  return [_record(1, slow, 5.0), _record(2, slow, 5.0),
          _record(3, STEADY, 0.45), _record(4, STEADY, 0.47)]


def _da(scored_s, k):
  return [_record(s, STEADY, t, backend="mcjax_da", staleness=k)
          for s, t in zip((1, 2, 3, 4), (9.0, 9.0, *scored_s))]


def test_da_arm_flags_and_checks():
  assert K1.job_flags() == [
      "--backend=mcjax_da", "--trainer_hosts=1", "--rollout_hosts=1",
      "--devices_per_host=1", "--max_staleness=1", "--profile=optimized",
      "--engine=native"]
  assert K0.total_devices == CO.total_devices == 2
  assert "1 trainer + 1 rollout" in K0.describe()
  with pytest.raises(ValueError, match="multiple of trainer_hosts"):
    arms.Arm(name="x", backend="mcjax_da", num_hosts=5, devices_per_host=1,
             profile="optimized", trainer_hosts=2, rollout_hosts=3,
             max_staleness=1)
  with pytest.raises(ValueError, match="trainer_hosts \\+ rollout_hosts"):
    arms.Arm(name="x", backend="mcjax_da", num_hosts=2, devices_per_host=1,
             profile="optimized", trainer_hosts=1, rollout_hosts=2,
             max_staleness=1)
  with pytest.raises(ValueError, match="belong to backend mcjax_da"):
    arms.Arm(name="x", backend="mcjax", num_hosts=2, devices_per_host=1,
             profile="optimized", max_staleness=1)
  with pytest.raises(ValueError, match="must be an mcjax"):
    arms.BenchMode(name="t", workload=WORKLOAD, micro=None, arms=(
        arms.Arm(name="mcjax-optimized", backend="tunix", num_hosts=1,
                 devices_per_host=2), K1))


def test_prediction_k1_is_eq4_and_k0_the_serial_sum():
  ref = _reference()
  p1 = report_lib.da_prediction(K1, WORKLOAD, [ref], [_da((0.5, 0.7), 1)])
  (b,) = p1["by_launch"]
  assert b["rollout_branch_s"] == pytest.approx(ROLLOUT_BRANCH)
  assert b["trainer_branch_s"] == pytest.approx(TRAINER_BRANCH)
  assert p1["predicted_s"] == pytest.approx(EQ4)
  assert p1["measured_s"] == pytest.approx(0.6)  # Scored steps only.
  assert p1["error"] == pytest.approx(0.54 / 0.6 - 1)  # -10%
  p0 = report_lib.da_prediction(K0, WORKLOAD, [ref], [_da((0.8, 1.0), 0)])
  assert p0["by_launch"][0]["eq4_s"] == pytest.approx(EQ4)
  assert p0["predicted_s"] == pytest.approx(SERIAL)
  assert p0["error"] == pytest.approx(0.87 / 0.9 - 1)


def test_prediction_in_the_report_and_its_table(tmp_path):
  runs = {}
  for arm, recs in ((CO, _reference()), (K0, _da((0.8, 1.0), 0)),
                    (K1, _da((0.5, 0.7), 1))):
    path = tmp_path / f"{arm.name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    runs[arm.name] = [{"returncode": 0, "metrics": str(path), "wall_s": 30.0}]
  rep = report_lib.build_report(MODE, runs, None, machine={})
  assert set(rep["da_predictions"]) == {K0.name, K1.name}
  assert rep["da_predictions"][K1.name]["error"] == pytest.approx(-0.1)
  assert rep["arms"][K1.name]["config"]["max_staleness"] == 1
  # DA vs colocated and K=0 vs K=1 are compared.
  pairs = {(r["baseline"], r["other"]) for r in rep["ratios"]}
  assert (K0.name, K1.name) in pairs and (CO.name, K1.name) in pairs
  md = render.markdown(rep)
  assert "| mcjax-da-k1 | DA 1/1 | 1 | mcjax-optimized |" in md
  assert "| 0.540 | 0.600 | -10.0% |" in md


def test_no_reference_records_is_reported_not_raised():
  p = report_lib.da_prediction(K1, WORKLOAD, [[]], [_da((0.5, 0.7), 1)])
  assert "predicted_s" not in p
  assert "mcjax-optimized" in p["error_message"]
