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

"""The benchmark harness end to end, with two very short arms."""

import json
import os

import pytest

from tunix_mcjax.bench import arms
from tunix_mcjax.bench import harness

SMOKE = arms.BenchMode(
    name="smoke",
    arms=(
        arms.Arm(name=arms.BASELINE, backend="tunix", num_hosts=1,
                 devices_per_host=2, stock_rollout=True),
        arms.Arm(name="mcjax-optimized", backend="mcjax", num_hosts=2,
                 devices_per_host=1, profile="optimized"),
    ),
    workload=arms.Workload(steps=1, passes=2, batch_size=4, num_generations=2,
                           max_new_tokens=4),
    micro=None,
    arm_timeout_s=200,
)


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
  out = tmp_path_factory.mktemp("bench")
  report = harness.run_bench(SMOKE, out)
  return out, report, json.loads((out / "report.json").read_text())


@pytest.mark.multihost
@pytest.mark.e2e
def test_bench_arms_ran_and_breakdown_adds_up(bench):
  _, _, on_disk = bench
  assert list(on_disk["arms"]) == [arms.BASELINE, "mcjax-optimized"]
  for name, arm in on_disk["arms"].items():
    assert arm["ok"], (name, arm.get("error"))
    (launch,) = arm["launches"]
    assert launch["steps_recorded"] == 2 and launch["steps_scored"] == 1
    iv = arm["median_step_s"]
    assert 0 < iv["low"] <= iv["value"] <= iv["high"]
    assert arm["launch_medians_s"] == [launch["median_step_s"]["value"]]
    # The breakdown accounts for the (slowest host's) step.
    assert sum(arm["mean_parts_s"].values()) == pytest.approx(
        arm["mean_step_s"], rel=0.02, abs=1e-3)
    # Unpacked padding, counted on either backend: toy prompts of 3 tokens
    # padded to 4 at least (and completions to 4).
    extras = arm["work_extras"]
    assert not extras["packed"]
    assert 1 / 8 <= extras["padded_token_share"] < 1.0, (name, extras)
  stock = on_disk["arms"][arms.BASELINE]
  assert stock["config"]["stock_rollout"] and "vanilla" in stock[
      "description"]
  assert "--engine=vanilla" in stock["launches"][0]["run"]["cmd"]


@pytest.mark.multihost
@pytest.mark.e2e
def test_bench_startup_compile_and_traces(bench):
  out, _, on_disk = bench
  for name, arm in on_disk["arms"].items():
    (launch,) = arm["launches"]
    records = [json.loads(x) for x in
               (out / name / "launch0" / "metrics.jsonl").read_text()
               .splitlines()]
    steps = [r["step_time_s"] for r in records]
    # Start-up is the launch's wall time outside its steps.
    assert launch["startup_s"] == pytest.approx(
        launch["run"]["wall_s"] - sum(steps))
    assert launch["startup_s"] > 1.0
    # Compile: the first pass's step beyond the steady (second-pass) one.
    assert launch["compile_s"] == pytest.approx(max(0.0, steps[0] - steps[1]))
    assert launch["compile_s"] > 0
    # The traced step (step 1 here) of every host; its window is the step.
    trace = launch["trace"]
    assert trace["hosts"].keys() == {str(h) for h in
                                     range(arm["config"]["num_hosts"])}
    assert trace["step"]["wall_s"] == pytest.approx(steps[0], rel=0.1,
                                                    abs=0.05)
    assert trace["devices"] == arm["config"]["devices_per_host"]
    assert {"generate", "train", "other"} <= trace["phases"].keys()
    assert 0 < arm["trace"]["overhead"] <= 1
    assert trace["step"]["compute_s"] > 0


@pytest.mark.multihost
@pytest.mark.e2e
def test_bench_verdict_machine_and_outputs(bench):
  out, report, on_disk = bench
  (ratio,) = on_disk["ratios"]
  assert (ratio["baseline"], ratio["other"]) == (arms.BASELINE,
                                                 "mcjax-optimized")
  # One launch per arm: never "faster", and the report says why.
  assert ratio["verdict"] in ("slower", "not shown faster")
  assert "launches 1 and 1 < 3 per arm (provisional)" in ratio["reasons"]
  work = on_disk["equal_work"]["mcjax-optimized"]
  assert work["checks"]["same_prompts"]["ok"], work
  m = on_disk["machine"]
  assert m["cpu_count"] == os.cpu_count()
  assert m["cpu_model"] == harness.cpu_model() and m["cpu_model"]
  import jax  # pylint: disable=g-import-not-at-top
  assert m["accelerator"]["jax"] == jax.__version__
  assert m["accelerator"]["count"] >= 1
  assert m["load_before"] is not None and m["load_after"] is not None
  table = (out / "report.md").read_text()
  assert m["cpu_model"] in table
  assert f"| {arms.BASELINE} | mcjax-optimized |" in table
  assert "Step breakdown from the profiler traces" in table
  for plot in ("step_time.png", "phases.png", "breakdown.png"):
    assert (out / plot).read_bytes()[:4] == b"\x89PNG"
  assert report["outputs"]["plots"]


def test_arm_flags_name_the_rollout():
  stock = arms.Arm(name="s", backend="tunix", num_hosts=1, devices_per_host=2,
                   stock_rollout=True)
  inv = arms.Arm(name="i", backend="tunix", num_hosts=1, devices_per_host=2)
  assert "--engine=vanilla" in stock.job_flags()
  assert "--engine=native" in inv.job_flags()
  with pytest.raises(ValueError, match="backend tunix"):
    arms.Arm(name="x", backend="mcjax", num_hosts=1, devices_per_host=1,
             profile="base", stock_rollout=True)


def test_workload_flags_are_job_config_fields():
  import dataclasses  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.recipes import grpo_job  # pylint: disable=g-import-not-at-top

  job_fields = {f.name for f in dataclasses.fields(grpo_job.GrpoJobConfig)}
  flags = arms.Workload(steps=3, dataset="toy").job_flags()
  names = {flag[2:].split("=", 1)[0] for flag in flags}
  assert names == {f.name for f in dataclasses.fields(arms.Workload)}
  assert names <= job_fields, names - job_fields
  assert "--steps=3" in flags and "--dataset=toy" in flags
