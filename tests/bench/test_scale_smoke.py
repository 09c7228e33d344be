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

"""bench --mode=scale's machinery on a tiny model (2 hosts, ~50 s)."""

import json

import pytest

from tunix_mcjax.bench import scale

pytestmark = [pytest.mark.multihost, pytest.mark.e2e]


def test_scale_mode_reports_memory_per_host(tmp_path):
  report = scale.run_scale(scale.SCALE_TINY, tmp_path)
  assert all(a["ok"] for a in report["arms"].values()), report["arms"]
  assert set(report["arms"]) == {"unchunked", "chunked-4"}
  for arm in report["arms"].values():
    assert [h["host"] for h in arm["hosts"]] == [0, 1]
    for h in arm["hosts"]:
      assert h["peak_rss_gib"] >= h["rss_models_built_gib"] > 0
      assert any(": train" in k for k in h["phase_peak_rss_gib"])
      # Every tree the host holds is found among its live buffers.
      assert {"actor", "optimizer", "reference", "engine", "anchor"} <= set(
          h["live_by_tree_gib"])
      # The job's publication writes into the engine's previous weights and
      # holds less than one more copy beside them.
      plan = h["publication_plan"]
      assert plan["temp_bytes"] < plan["alias_bytes"] <= plan["output_bytes"]
      assert len(h["step_s"]) == scale.SCALE_TINY.steps
      assert h["publish_bytes"] == h["publication"]["bytes"] > 0
      assert h["publication"]["floor_s"] > 0
  assert "fit_check" in report and "fit_table" in report
  # XLA's planned temporaries: chunking shrinks them.
  temps = {x["chunk"]: x["temp_bytes"] for x in report["xla_logps_grad"]}
  assert temps[4] < temps[None]
  saved = json.loads((tmp_path / "report.json").read_text())
  assert saved["mode"] == "scale"
  assert "Fit check" in (tmp_path / "report.md").read_text()
