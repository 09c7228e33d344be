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

import pytest

from tunix_mcjax.bench import arms
from tunix_mcjax.bench import harness

SMOKE = arms.BenchMode(
    name="smoke",
    arms=(
        arms.Arm(name="tunix", backend="tunix", num_hosts=1,
                 devices_per_host=2),
        arms.Arm(name="mcjax-optimized", backend="mcjax", num_hosts=2,
                 devices_per_host=1, profile="optimized"),
    ),
    workload=arms.Workload(steps=1, passes=2, batch_size=4, num_generations=2,
                           max_new_tokens=4),
    micro=None,
    arm_timeout_s=200,
)


@pytest.mark.multihost
@pytest.mark.e2e
def test_bench_writes_report_table_and_plots(tmp_path):
  report = harness.run_bench(SMOKE, tmp_path)
  on_disk = json.loads((tmp_path / "report.json").read_text())
  assert on_disk["arms"].keys() == {"tunix", "mcjax-optimized"}
  for name, arm in on_disk["arms"].items():
    assert arm["ok"], (name, arm.get("error"))
    assert arm["steps_recorded"] == 2 and arm["steps_scored"] == 1
    iv = arm["median_step_s"]
    assert 0 < iv["low"] <= iv["value"] <= iv["high"]
    # The breakdown accounts for the (slowest host's) step.
    assert sum(arm["mean_parts_s"].values()) == pytest.approx(
        arm["mean_step_s"], rel=0.02, abs=1e-3)
  (ratio,) = on_disk["ratios"]
  assert (ratio["baseline"], ratio["other"]) == ("tunix", "mcjax-optimized")
  assert ratio["verdict"] in ("faster", "slower", "no difference shown")
  work = on_disk["equal_work"]["mcjax-optimized"]
  assert work["checks"]["same_prompts"]["ok"], work
  assert work["equal"], work
  table = (tmp_path / "report.md").read_text()
  assert "| tunix | mcjax-optimized |" in table
  assert "Where the step time goes" in table
  for plot in ("step_time.png", "phases.png"):
    assert (tmp_path / plot).read_bytes()[:4] == b"\x89PNG"
  assert report["outputs"]["plots"]


def test_workload_flags_are_job_config_fields():
  import dataclasses  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.recipes import grpo_job  # pylint: disable=g-import-not-at-top

  job_fields = {f.name for f in dataclasses.fields(grpo_job.GrpoJobConfig)}
  flags = arms.Workload(steps=3, dataset="toy").job_flags()
  names = {flag[2:].split("=", 1)[0] for flag in flags}
  assert names == {f.name for f in dataclasses.fields(arms.Workload)}
  assert names <= job_fields, names - job_fields
  assert "--steps=3" in flags and "--dataset=toy" in flags
