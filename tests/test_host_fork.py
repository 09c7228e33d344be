# Copyright 2026 The tunix_mcjax Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""Tests of forking hosts from the launching process (real processes)."""

import pathlib
import subprocess
import sys

import launch_utils

from tunix_mcjax import host_fork

# Prints fork_blocker's answer in five states, one line each.
_PROGRAM = pathlib.Path(__file__).resolve().parent / "support" / (
    "fork_blockers.py")


def test_what_keeps_hosts_from_being_forked(tmp_path):
  """Threads, a started backend, JAX options that differ, or the opt-out:
  each makes the launcher start new interpreters, and says why."""
  # CPU only: probing for a TPU backend starts jax's warning Timer thread,
  # which can still be alive when the last line checks for threads.
  env = launch_utils.launcher_env({"JAX_PLATFORMS": "cpu"})
  env.pop(host_fork.ENV_HOST_START, None)
  env.pop("JAX_ENABLE_X64", None)
  result = subprocess.run([sys.executable, str(_PROGRAM)], env=env,
                          capture_output=True, text=True, timeout=60)
  assert result.returncode == 0, result.stderr
  assert result.stdout.splitlines() == [
      "None",
      "the hosts' JAX_ENABLE_X64 differs from this process's",
      f"{host_fork.ENV_HOST_START}=spawn",
      "this process runs 1 other thread(s): waiter",
      "JAX's backend has started in this process",
  ]
