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

"""Temporary directories of owners that are gone are swept; nothing else.

Owners are real processes (`sleep`), SIGKILLed as a crashed host would be.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile

import launch_utils
import pytest

from tunix_mcjax import temp_dirs
from tunix_mcjax.da import ray_processes


def _killed_owner() -> int:
  """The pid of a process that has been SIGKILLed and reaped."""
  proc = subprocess.Popen(["sleep", "300"])
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  return proc.pid


def _dir(parent: pathlib.Path, name: str, owner: int | None) -> pathlib.Path:
  path = parent / name
  path.mkdir()
  (path / "payload").write_text("x")
  if owner is not None:
    temp_dirs.mark(path, pid=owner)
  return path


def test_only_directories_of_owners_that_are_gone_are_swept(tmp_path):
  dead = _dir(tmp_path, "tunix_mcjax_vllm_dead", _killed_owner())
  live = _dir(tmp_path, "tunix_mcjax_vllm_live", os.getpid())
  unowned = _dir(tmp_path, "tunix_mcjax_vllm_unowned", None)
  other_prefix = _dir(tmp_path, "someone_else_dead", _killed_owner())
  seen = []
  removed = temp_dirs.sweep(parents=[str(tmp_path)],
                            before_removal=seen.append)
  assert removed == [str(dead)] and seen == [str(dead)]
  assert not dead.exists()
  assert live.exists() and unowned.exists() and other_prefix.exists()


def test_a_reused_pid_is_not_taken_for_the_owner(tmp_path):
  path = _dir(tmp_path, "tunix_mcjax_tpu_reused", os.getpid())
  owner = json.loads((path / temp_dirs.OWNER_FILE).read_text())
  # This process's pid, but another process's start time: the owner that
  # made the directory is gone and its pid was given to us.
  owner["start"] = "1"
  (path / temp_dirs.OWNER_FILE).write_text(json.dumps(owner))
  assert temp_dirs.abandoned(path)
  assert temp_dirs.sweep(parents=[str(tmp_path)]) == [str(path)]


def test_another_machines_directory_is_left_alone(tmp_path):
  path = _dir(tmp_path, "mcjray_elsewhere", _killed_owner())
  owner = json.loads((path / temp_dirs.OWNER_FILE).read_text())
  owner["host"] = owner["host"] + "-other"
  (path / temp_dirs.OWNER_FILE).write_text(json.dumps(owner))
  assert temp_dirs.sweep(parents=[str(tmp_path)]) == []
  assert path.exists()


def test_make_and_temporary_are_owned_by_this_process(tmp_path):
  made = temp_dirs.make("tunix_mcjax_vllm_", parent=str(tmp_path))
  assert pathlib.Path(made).parent == tmp_path
  assert not temp_dirs.abandoned(made)
  directory = temp_dirs.temporary("tunix_mcjax_vllm_")
  try:
    owner = json.loads(
        (pathlib.Path(directory.name) / temp_dirs.OWNER_FILE).read_text())
    assert owner["pid"] == os.getpid()
  finally:
    directory.cleanup()
  assert not os.path.exists(directory.name)


def test_temporary_hands_what_it_sweeps_to_before_removal():
  # (The vLLM engine removes a dead engine's shared memory this way.)
  prefix = f"tunix_mcjax_test{os.getpid()}_"
  dead = _dir(pathlib.Path(tempfile.gettempdir()), prefix + "dead",
              _killed_owner())
  seen = []
  directory = temp_dirs.temporary(prefix, before_removal=seen.append)
  try:
    assert seen == [str(dead)] and not dead.exists()
    # The live owner's directory (ours) is not handed over.
    temp_dirs.temporary(prefix, before_removal=seen.append).cleanup()
    assert seen == [str(dead)] and os.path.isdir(directory.name)
  finally:
    directory.cleanup()
    shutil.rmtree(dead, ignore_errors=True)


def test_a_killed_drivers_ray_dir_goes_with_its_leftover_processes():
  # A local Ray head whose driver was SIGKILLed: its temp dir stays, and so
  # may its processes (marked with the session variable). The next head's
  # start sweeps both.
  path = tempfile.mkdtemp(prefix=ray_processes.TEMP_PREFIX, dir="/tmp")
  leftover = None
  try:
    temp_dirs.mark(path, pid=_killed_owner())
    leftover = subprocess.Popen(
        ["sleep", "300"],
        env={**os.environ, ray_processes.SESSION_ENV: path})
    assert ray_processes.session_pids(path) == [leftover.pid]
    assert path in ray_processes.sweep_abandoned()
    assert leftover.wait(timeout=10) in (-signal.SIGTERM, -signal.SIGKILL)
    assert not os.path.exists(path)
  finally:
    if leftover is not None and leftover.poll() is None:
      leftover.kill()
      leftover.wait()
    shutil.rmtree(path, ignore_errors=True)
  launch_utils.assert_no_survivors([leftover.pid])


@pytest.mark.parametrize("prefix", temp_dirs.PREFIXES)
def test_the_package_prefixes_are_the_ones_it_makes(prefix):
  # Every prefix swept is one the package makes:
  # a renamed directory would otherwise never be swept.
  root = pathlib.Path(temp_dirs.__file__).parent
  makers = [p for p in root.rglob("*.py")
            if p.name != "temp_dirs.py" and f'"{prefix}' in p.read_text()]
  assert makers, f"no module makes {prefix!r} directories"


def test_as_tempdir_points_tempfile_there_inside_the_block(tmp_path):
  before = tempfile.gettempdir()
  with temp_dirs.as_tempdir(tmp_path):
    assert tempfile.gettempdir() == str(tmp_path)
    made = tempfile.mkstemp()
    os.close(made[0])
  assert pathlib.Path(made[1]).parent == tmp_path
  assert tempfile.gettempdir() == before
  with pytest.raises(RuntimeError):
    with temp_dirs.as_tempdir(tmp_path):
      raise RuntimeError("restored on errors too")
  assert tempfile.gettempdir() == before
