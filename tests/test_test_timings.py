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

"""The timings report (scripts/test_timings.py) and the stats sitehook."""

import json
import os
import pathlib
import subprocess
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = REPO_ROOT / "scripts" / "test_timings.py"
SITEHOOK = REPO_ROOT / "tests" / "support" / "sitehook"
# One tiny jitted program; fails if a module named was imported.
JIT_ONCE = REPO_ROOT / "tests" / "support" / "jit_once.py"
# Fails if importing the modules named imports any of the packages named.
LIGHT_IMPORTS = REPO_ROOT / "tests" / "support" / "light_imports.py"

_JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites name="pytest tests"><testsuite name="pytest" errors="0"
 failures="1" skipped="1" tests="4" time="20.0">
<testcase classname="tests.da.test_x" name="test_a[2-2]" time="12.5"/>
<testcase classname="tests.da.test_x.TestB" name="test_b" time="2.5">
 <failure message="boom">boom</failure></testcase>
<testcase classname="tests.test_y" name="test_c" time="4.0"/>
<testcase classname="tests.test_y" name="test_d" time="1.0">
 <skipped message="no"/></testcase>
</testsuite></testsuites>
"""


def _record(**fields):
  rec = {"version": 1, "role": "process", "pid": 1, "ppid": 0, "argv": "",
         "start": 0.0, "end": 1.0, "complete": True, "jax_imported": True,
         "compiles": 0, "requests": 0, "hits": 0, "misses": 0,
         "backend_compile_s": 0.0, "trace_s": 0.0, "lower_s": 0.0}
  rec.update(fields)
  return rec


def _fixture(tmp_path):
  for module in ("tests/da/test_x.py", "tests/test_y.py"):
    (tmp_path / module).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / module).touch()
  junit = tmp_path / "junit.xml"
  junit.write_text(_JUNIT)
  stats = tmp_path / "stats"
  stats.mkdir()
  host = "tests/da/test_x.py::test_a[2-2]"
  for i, (kind, rec) in enumerate([
      ("host", _record(test_id=host, compiles=3, backend_compile_s=2.0,
                       requests=3, hits=1, misses=2)),
      ("host", _record(test_id=host, compiles=2, backend_compile_s=1.5,
                       requests=2, hits=2, complete=False)),
      ("pytest", _record(role="pytest", test_id="tests/test_y.py::test_c",
                         compiles=1, backend_compile_s=0.5, requests=1,
                         misses=1)),
  ]):
    (stats / f"{i}-{kind}.json").write_text(json.dumps(rec))
  (stats / ".half-written.json.1.tmp").write_text("{")
  return junit, stats


def _run(*args):
  proc = subprocess.run([sys.executable, str(SCRIPT), *map(str, args)],
                        capture_output=True, text=True, timeout=60,
                        check=False)
  assert proc.returncode == 0, proc.stderr
  return proc.stdout


def _row(report, first_cell):
  for line in report.splitlines():
    cells = [c.strip() for c in line.strip("|").split("|")]
    if cells[0] == first_cell:
      return cells
  raise AssertionError(f"no row {first_cell!r} in:\n{report}")


def test_report_numbers(tmp_path):
  junit, stats = _fixture(tmp_path)
  report = _run("--junit", junit, "--stats", stats, "--wall", "main=30",
                "--root", tmp_path)

  # module, tests, seconds, processes, compile s (pytest), (processes),
  # hits, misses
  assert _row(report, "`tests/da/test_x.py`") == [
      "`tests/da/test_x.py`", "2", "15.0", "2", "0.0", "3.5", "3", "2"]
  assert _row(report, "`tests/test_y.py`") == [
      "`tests/test_y.py`", "2", "5.0", "0", "0.5", "0.0", "0", "1"]
  launch = _row(report, "main")
  assert launch[1:11] == ["4", "1 failed, 2 passed, 1 skipped", "30.0",
                          "20.0", "2", "1", "6", "0.5", "3.5", "0.0"]
  assert launch[-3:] == ["3", "3", "50%"]
  slowest = _row(report, "`tests/da/test_x.py::test_a[2-2]`")
  assert slowest == ["`tests/da/test_x.py::test_a[2-2]`", "12.5", "passed",
                     "2", "3.5"]
  assert "`tests/da/test_x.py::TestB::test_b`" in report


def test_out_replaces_only_the_marked_part(tmp_path):
  junit, stats = _fixture(tmp_path)
  doc = tmp_path / "docs" / "testing.md"
  _run("--junit", junit, "--stats", stats, "--root", tmp_path, "--out", doc)
  first = doc.read_text()
  assert first.startswith("# Testing\n")
  assert "<!-- timings:begin -->" in first and "`tests/test_y.py`" in first

  doc.write_text("# Testing\n\nBefore.\n\n<!-- timings:begin -->\nstale\n"
                 "<!-- timings:end -->\n\nAfter.\n")
  _run("--junit", junit, "--root", tmp_path, "--out", doc)
  text = doc.read_text()
  assert text.startswith("# Testing\n\nBefore.\n\n<!-- timings:begin -->\n")
  assert text.endswith("<!-- timings:end -->\n\nAfter.\n")
  assert "stale" not in text and "`tests/test_y.py`" in text


def _python(tmp_path, program, **env):
  base = {k: v for k, v in os.environ.items()
          if k not in ("TUNIX_MCJAX_TEST_STATS_DIR", "TUNIX_MCJAX_TEST_ID")}
  path = os.pathsep.join(filter(None, [str(SITEHOOK),
                                       base.get("PYTHONPATH")]))
  subprocess.run([sys.executable, *map(str, program)], check=True,
                 timeout=120, cwd=tmp_path,
                 env={**base, "PYTHONPATH": path, "JAX_PLATFORMS": "cpu",
                      **env})


def test_sitehook_records_a_jax_process(tmp_path):
  stats = tmp_path / "stats"
  _python(tmp_path, [JIT_ONCE], TUNIX_MCJAX_TEST_STATS_DIR=str(stats),
          TUNIX_MCJAX_TEST_ID="x")
  files = list(stats.iterdir())
  assert len(files) == 1, files
  rec = json.loads(files[0].read_text())
  assert rec["jax_imported"] is True and rec["complete"] is True
  assert rec["test_id"] == "x" and rec["role"] == "process"
  assert rec["backend_compile_s"] > 0 and rec["compiles"] >= 1


def test_sitehook_is_silent_without_the_variable_or_jax(tmp_path):
  stats = tmp_path / "stats"
  _python(tmp_path, [JIT_ONCE, "_tunix_mcjax_stats_hook"])
  # With the variable, a process that never imports jax writes nothing.
  _python(tmp_path, [LIGHT_IMPORTS, "jax"],
          TUNIX_MCJAX_TEST_STATS_DIR=str(stats))
  assert not stats.exists() or not list(stats.iterdir())
