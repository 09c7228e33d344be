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

"""The report from constructed step records: launches, verdicts, times."""

import json

import numpy as np
import pytest

from tunix_mcjax import telemetry
from tunix_mcjax.bench import arms
from tunix_mcjax.bench import render
from tunix_mcjax.bench import report as report_lib

STEPS = 6
WORKLOAD = arms.Workload(steps=STEPS, passes=2, batch_size=4,
                         num_generations=2)
MODE = arms.BenchMode(
    name="t", micro=None, workload=WORKLOAD, launches=3, trace=False,
    arms=(arms.Arm(name=arms.BASELINE, backend="tunix", num_hosts=1,
                   devices_per_host=2, stock_rollout=True),
          arms.Arm(name="mcjax-optimized", backend="mcjax", num_hosts=2,
                   devices_per_host=1, profile="optimized")))


def _records(step_s, compile_s, seed, digest="p", tokens=40):
  rng = np.random.default_rng(seed)
  recs = []
  for step in range(1, 2 * STEPS + 1):
    t = step_s * (1 + 0.01 * rng.standard_normal())
    if step == 1:
      t += compile_s
    recs.append({
        "step": step, "step_time_s": t, "completion_tokens": tokens,
        "completion_len_mean": 5.0, "completion_len_max": 8,
        "truncated_share": 0.1, "prompts_digest": f"{digest}{step % STEPS}",
        "phases": {p: t / len(telemetry.PHASES) for p in telemetry.PHASES},
        "host_overhead": {}, "straggler_wait": {}, "decode_iter_s": 0.001})
  return recs


def _runs(tmp_path, other_digests=("p", "p", "p")):
  runs = {}
  for name, step_s, digests in ((arms.BASELINE, 2.0, ("p",) * 3),
                                ("mcjax-optimized", 1.0, other_digests)):
    runs[name] = []
    for k in range(3):
      path = tmp_path / f"{name}{k}.jsonl"
      recs = _records(step_s, 3.0, seed=k, digest=digests[k])
      path.write_text("".join(json.dumps(r) + "\n" for r in recs))
      wall = sum(r["step_time_s"] for r in recs) + 7.5
      runs[name].append({"returncode": 0, "metrics": str(path),
                         "wall_s": wall, "load_before": 0.5,
                         "load_after": 0.7})
  return runs


def test_three_launches_twice_as_fast_is_faster(tmp_path):
  rep = report_lib.build_report(MODE, _runs(tmp_path), None,
                                machine={"cpu_model": "x"})
  (r,) = rep["ratios"]
  assert r["verdict"] == "faster" and r["reasons"] == []
  assert r["launches"] == [3, 3] and len(r["per_launch"]) == 3
  assert 1.9 < r["welch_per_step"]["low"] < 2.0 < r["welch_per_step"][
      "high"] < 2.1
  base = rep["arms"][arms.BASELINE]
  assert len(base["launch_medians_s"]) == 3
  assert base["startup_s"] == pytest.approx(7.5)
  # Step 1 carried 3 s of compilation (noise of 1% around 2 s per step).
  assert base["compile_s"] == pytest.approx(3.0, abs=0.25)
  md = render.markdown(rep)
  assert "| tunix-stock | mcjax-optimized |" in md and "faster" in md


def test_unequal_work_in_one_launch_is_the_reason(tmp_path):
  rep = report_lib.build_report(
      MODE, _runs(tmp_path, other_digests=("p", "q", "p")), None)
  (r,) = rep["ratios"]
  assert r["verdict"] == "not shown faster"
  assert r["reasons"] == ["equal work failed (launch 2)"]
  assert rep["equal_work"]["mcjax-optimized"]["by_launch"] == [
      True, False, True]
  assert "equal work failed (launch 2)" in render.markdown(rep)


@pytest.mark.parametrize("tokens", [None, 0, True])
def test_a_missing_token_count_is_an_error_not_a_stand_in(tmp_path, tokens):
  # Per-token times divide by the count: a stand-in (once 1) would report the
  # step time as the time per token.
  runs = _runs(tmp_path)
  path = tmp_path / "mcjax-optimized1.jsonl"
  recs = [json.loads(line) for line in path.read_text().splitlines()]
  # Step 10: in the second pass, the one the report scores.
  if tokens is None:
    del recs[9]["completion_tokens"]
  else:
    recs[9]["completion_tokens"] = tokens
  path.write_text("".join(json.dumps(r) + "\n" for r in recs))
  with pytest.raises(ValueError, match=r"step 10 of the bench records has"
                     rf" completion_tokens={tokens!r}; per-token times"):
    report_lib.build_report(MODE, runs, None)


@pytest.mark.parametrize("accelerator, says", [
    ({"platform": "cpu", "count": 2, "device_kind": "cpu"},
     "simulated hosts (JAX CPU devices"),
    ({"platform": "gpu", "count": 1, "device_kind": "NVIDIA H200"},
     "on this machine's gpu devices"),
])
def test_the_report_says_where_the_arms_ran(tmp_path, accelerator, says):
  rep = report_lib.build_report(
      MODE, _runs(tmp_path), None,
      machine={"cpu_model": "x", "accelerator": accelerator})
  md = render.markdown(rep)
  assert says in md
  assert ("simulated hosts" in md) == (accelerator["platform"] == "cpu")
