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

"""scripts/bench_device.py --smoke: the prepared GPU run, small, on CPU."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from tunix_mcjax import compilation_cache

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.e2e
def test_bench_device_smoke_writes_the_report(tmp_path):
  out = tmp_path / "dev"
  # A device machine's environment: none of this suite's JAX settings but
  # its compilation cache (tests/conftest.py), which changes no result.
  env = {k: v for k, v in os.environ.items()
         if not k.startswith(("JAX_", "XLA_"))}
  env.update(compilation_cache.inherited())
  proc = subprocess.run(
      [sys.executable, str(REPO / "scripts" / "bench_device.py"), "--smoke",
       f"--out={out}"], env=env, capture_output=True, text=True,
      timeout=600, check=False, cwd=REPO)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  report = json.loads((out / "report.json").read_text())
  assert report["mode"] == "device-smoke"
  assert list(report["arms"]) == ["tunix-stock", "mcjax-optimized-1host"]
  for name, arm in report["arms"].items():
    assert arm["ok"], (name, arm.get("error"))
    assert arm["config"]["num_hosts"] == 1 and arm["steps_scored"] == 1
    assert arm["trace"]["hosts"] == 1
    assert arm["startup_s"] > 0 and arm["compile_s"] >= 0
  assert report["arms"]["tunix-stock"]["config"]["stock_rollout"]
  acc = report["machine"]["accelerator"]
  assert acc["platform"] == "cpu" and "smoke" in acc["note"]
  (ratio,) = report["ratios"]
  assert ratio["other"] == "mcjax-optimized-1host"
  assert ratio["verdict"] != "faster"  # One launch: provisional.
  pub = report["micro"]["publication"]
  # The floor and both publications moved the same bytes.
  assert pub["num_params"] == 2 and pub["bytes"] == (256 * 64 + 64) * 2
  assert pub["one_call_over_floor"] == pytest.approx(
      pub["one_call_s"] / pub["floor_s"])
  assert report["micro"]["decode"]["host_local_iter_s"] > 0
  assert report["bench_wall_s"] < report["budget_s"]
  assert "tunix-stock" in (out / "report.md").read_text()
