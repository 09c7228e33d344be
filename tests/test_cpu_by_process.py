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

"""scripts/cpu_by_process.py: its parsing and attribution, in process.

Starting accounting here would take the records of a suite run that is
itself measured (one accounting file per machine), so the whole script is
run by hand; its figures are in docs/testing.md.
"""

import struct

import repo_scripts

cpu_by_process = repo_scripts.load("cpu_by_process")


def _record(pid, ppid, start, utime, stime, name, version=3):
  raw = struct.pack("<BBHIIIIIIfHH", 0, version, 0, 0, 0, 0, pid, ppid,
                    start, 0.0, utime, stime)
  raw += b"\0" * 12 + name.encode().ljust(16, b"\0")
  assert len(raw) == 64
  return raw


def test_parses_acct_v3_records_and_their_float_times():
  # 250 ticks plain; 0x2000 | 100 is 100 * 8 ticks (exponent 1).
  data = (_record(10, 1, 1000, 250, 0x2000 | 100, "python") +
          _record(11, 10, 1001, 5, 0, "raylet", version=2) +
          _record(12, 10, 1002, 0, 7, "gcs_server"))
  records = cpu_by_process.parse_acct(data)
  assert [r["pid"] for r in records] == [10, 12]  # Not version 3: skipped.
  assert records[0] == {"pid": 10, "ppid": 1, "start": 1000,
                        "cpu_s": 2.5 + 8.0, "name": "python"}
  assert records[1]["cpu_s"] == 0.07 and records[1]["name"] == "gcs_server"


def test_kinds_of_the_suites_processes():
  kind = cpu_by_process.kind
  pytest_cmd = "/r/.venv/bin/python -m pytest tests -q"
  zygote = "/r/.venv/bin/python /r/tests/support/zygote.py /tmp/s"
  assert kind(pytest_cmd, pytest_cmd, "python", "make test") == "pytest"
  assert kind(pytest_cmd, pytest_cmd, "python",
              pytest_cmd) == "forked from pytest"
  assert kind(zygote, zygote, "python", pytest_cmd) == "fork server"
  assert kind(zygote, zygote, "python", zygote) == (
      "forked from the fork server")
  assert kind("/r/.venv/bin/python default_worker.py", "ray::RolloutHost",
              "ray::RolloutHost", None) == "Ray workers (actors)"
  assert kind("python setup_worker.py default_worker.py --x", "python "
              "default_worker.py --x", "python", None) == (
                  "Ray workers (actors)")
  assert kind("python agent", "ray::DashboardAgent", "x", None) == (
      "Ray agents")
  assert kind("/r/site-packages/ray/core/src/ray/gcs/gcs_server --x", "",
              "gcs_server", None) == "Ray daemons"
  assert kind("/r/.venv-maxtext-vllm/bin/python -B -c from "
              "multiprocessing.spawn import spawn_main", "VLLM::Worker_TP1",
              "python", None) == "vLLM workers"
  assert kind("/usr/bin/make test", "", "make", None) == "other: make"


def test_attributes_by_pid_and_start_and_names_what_it_never_saw():
  boot = 1_000_000.0
  clk = cpu_by_process._CLK
  seen = {
      (40, 5 * clk): {"ppid": 1, "cmdline": "python -m pytest tests",
                      "last": "python -m pytest tests"},
      (41, 6 * clk): {"ppid": 40, "cmdline": "python -m pytest tests",
                      "last": "python -m pytest tests"},
      # pid 41 again later: another process, another start.
      (41, 90 * clk): {"ppid": 1, "cmdline": "x", "last": "ray::TrainerHost"},
  }
  records = [
      {"pid": 40, "start": boot + 5, "cpu_s": 3.0, "name": "python"},
      {"pid": 41, "start": boot + 6, "cpu_s": 2.0, "name": "python"},
      {"pid": 41, "start": boot + 90, "cpu_s": 4.0, "name": "ray::Trainer"},
      {"pid": 77, "start": boot + 9, "cpu_s": 0.1, "name": "sh"},
  ]
  totals = cpu_by_process.attribute(records, seen, boot)
  assert totals == {"pytest": [1, 3.0], "forked from pytest": [1, 2.0],
                    "Ray workers (actors)": [1, 4.0],
                    "unseen (under 0.5 s): sh": [1, 0.1]}
  text = cpu_by_process.table(totals, wall_s=10.0, busy_s=9.5)
  assert "| Ray workers (actors) | 1 | 4.0 | 44% |" in text, text
  assert text.startswith("wall 10 s; machine busy 10 CPU-s (0.95 cores)")
