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

"""scripts/run_beside.py: how `make test` runs tests/cluster beside the rest."""

import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "scripts" / (
    "run_beside.py")


def _run(tmp_path, beside: str, main: str, *more: str
         ) -> subprocess.CompletedProcess:
  """`more`: further commands to run beside, after `beside`."""
  then = [a for cmd in more for a in ("::", "sh", "-c", cmd)]
  return subprocess.run(
      [sys.executable, str(SCRIPT), str(tmp_path / "beside.log"),
       "sh", "-c", beside, *then, ":::", "sh", "-c", main],
      capture_output=True, text=True, timeout=60, check=False)


def test_the_second_runs_while_the_first_does_and_its_output_follows(
    tmp_path):
  # The main command waits for a file the one beside it writes: they only
  # both end if they run at the same time.
  flag = tmp_path / "beside_started"
  proc = _run(tmp_path, f"touch {flag}; echo from-beside",
              f"while [ ! -e {flag} ]; do sleep 0.05; done; echo from-main")
  assert proc.returncode == 0, proc.stderr
  lines = proc.stdout.splitlines()
  assert "from-main" in lines and "from-beside" in lines, proc.stdout
  assert lines.index("from-main") < lines.index("from-beside"), proc.stdout


def test_commands_beside_run_in_order_each_whatever_the_last_returned(
    tmp_path):
  proc = _run(tmp_path, "echo one; exit 4", "echo main", "echo two",
              "echo three")
  assert proc.returncode == 4, (proc.stdout, proc.stderr)
  lines = proc.stdout.splitlines()
  assert [l for l in lines if l in ("one", "two", "three")] == [
      "one", "two", "three"], proc.stdout


def test_a_second_chain_runs_at_the_same_time_with_its_own_log(tmp_path):
  # main ends only once both chains have started; the second chain's
  # second command runs after its first, and its failure is the result.
  one, two = tmp_path / "one", tmp_path / "two"
  proc = subprocess.run(
      [sys.executable, str(SCRIPT), str(tmp_path / "a.log"),
       "sh", "-c", f"touch {one}; echo chain-one",
       f"--also={tmp_path / 'b.log'}",
       "sh", "-c", f"touch {two}; echo chain-two-a", "::",
       "sh", "-c", "echo chain-two-b; exit 6", ":::",
       "sh", "-c",
       f"while [ ! -e {one} ] || [ ! -e {two} ]; do sleep 0.05; done;"
       " echo from-main"],
      capture_output=True, text=True, timeout=60, check=False)
  assert proc.returncode == 6, (proc.stdout, proc.stderr)
  lines = proc.stdout.splitlines()
  order = [l for l in lines
           if l in ("from-main", "chain-one", "chain-two-a", "chain-two-b")]
  assert order == ["from-main", "chain-one", "chain-two-a", "chain-two-b"], (
      proc.stdout)
  assert "chain-two-b" in (tmp_path / "b.log").read_text()
  assert "chain-two" not in (tmp_path / "a.log").read_text()


@pytest.mark.parametrize(
    ("beside", "main", "code"),
    [("exit 0", "exit 0", 0), ("exit 0", "exit 2", 2), ("exit 3", "exit 0", 3),
     ("exit 3", "exit 2", 2),
     # pytest's "collected no tests" is a failure of either group.
     ("exit 0", "exit 5", 1), ("exit 5", "exit 0", 1)])
def test_exit_status_fails_when_either_fails(tmp_path, beside, main, code):
  proc = _run(tmp_path, beside, main)
  assert proc.returncode == code, (proc.stdout, proc.stderr)
  if code == 1:
    assert "collected no tests" in proc.stderr


def test_ctrl_c_reaches_both_and_waits_for_their_teardown(tmp_path):
  # Each command traps SIGINT, writes that it tore down, and exits: a shell's
  # `&` would have started the second with SIGINT ignored.
  script = ("trap 'echo down > {}; exit 7' INT; touch {}; "
            "while true; do sleep 0.05; done")
  down = [tmp_path / "down_beside", tmp_path / "down_main"]
  up = [tmp_path / "up_beside", tmp_path / "up_main"]
  proc = subprocess.Popen(
      [sys.executable, str(SCRIPT), str(tmp_path / "beside.log"),
       "sh", "-c", script.format(down[0], up[0]), ":::",
       "sh", "-c", script.format(down[1], up[1])],
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      start_new_session=True,
      # As from a terminal: a suite started in the background (`make test
      # &`, nohup) runs with SIGINT ignored, which children inherit and a
      # non-interactive sh cannot trap.
      preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
  try:
    deadline = time.monotonic() + 30
    while not all(p.exists() for p in up):
      assert time.monotonic() < deadline and proc.poll() is None
      time.sleep(0.05)
    # The terminal's Ctrl-C goes to the whole foreground process group.
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 7, (out, err)
    assert all(p.read_text().strip() == "down" for p in down), (out, err)
  finally:
    if proc.poll() is None:  # Failed: leave no loop running.
      os.killpg(proc.pid, signal.SIGKILL)
      proc.wait()
