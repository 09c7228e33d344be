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


"""scripts/own_netns.py: how `make test` runs the main group's second shard
and the fault modules (a network namespace and a temp dir of their own)."""

import os
import subprocess
import sys

import pytest

import repo_scripts

SCRIPT = repo_scripts.SCRIPTS / "own_netns.py"


def _module():
  return repo_scripts.load("own_netns")


def _why_not() -> str | None:
  return _module().unavailable_reason()


def test_check_agrees_with_the_reason():
  proc = subprocess.run([sys.executable, str(SCRIPT), "--check"],
                        capture_output=True, text=True, timeout=60,
                        check=False)
  why = _why_not()
  assert (proc.returncode == 0) == (why is None), (proc.stderr, why)
  if why:
    assert why in proc.stderr


def test_the_command_sees_only_loopback_and_its_own_temp_dir(tmp_path):
  why = _why_not()
  if why:
    pytest.skip(why)
  seen = tmp_path / "seen"
  # The namespace's links, the command's temp dir (left with a file in
  # it), this namespace's id: then the status goes back.
  proc = subprocess.run(
      [sys.executable, str(SCRIPT), "sh", "-c",
       f"ip -o link > {seen}; echo \"$TMPDIR\" >> {seen};"
       f" touch \"$TMPDIR/left\"; readlink /proc/self/ns/net >> {seen};"
       " exit 3"],
      capture_output=True, text=True, timeout=60, check=False)
  assert proc.returncode == 3, proc.stderr
  links, tmpdir, netns = seen.read_text().splitlines()[-3:]
  assert links.split(":")[1].strip() == "lo" and "UP" in links, links
  assert len(seen.read_text().splitlines()) == 3  # lo only
  assert netns != os.readlink("/proc/self/ns/net")
  assert os.path.basename(tmpdir).startswith("mcjax-ns.")
  assert not os.path.exists(tmpdir)


def test_no_command_is_a_usage_error():
  proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True,
                        text=True, timeout=60, check=False)
  assert proc.returncode == 2 and "own_netns.py" in proc.stderr
