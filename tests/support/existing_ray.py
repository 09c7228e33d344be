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

"""An existing Ray cluster that DA jobs join (`ray_cluster_owner.py`)."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys
from typing import Any

import launch_utils
from tunix_mcjax.da import ray_local

_OWNER = pathlib.Path(__file__).resolve().parent / "ray_cluster_owner.py"
_NAMESPACE_LINE = re.compile(r"^\[da\] Ray namespace (\S+): ", re.MULTILINE)


def job_namespace(console: str) -> str:
  """The Ray namespace a DA job printed at its start (one line)."""
  found = _NAMESPACE_LINE.findall(console)
  assert len(found) == 1, console[-3000:]
  return found[0]


class ExistingRayCluster:
  """A loopback-only Ray head in a process of its own, until `close`."""

  def __init__(self, num_cpus: int = 4):
    self.num_cpus = num_cpus
    self.process = subprocess.Popen(
        [sys.executable, str(_OWNER), str(num_cpus)],
        env=launch_utils.launcher_env(), stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True)
    started = json.loads(self.process.stdout.readline() or "null")
    if not started:
      self.process.kill()
      self.process.wait()
      raise AssertionError("the external Ray cluster did not start")
    self.address: str = started["address"]
    self.temp_dir: str = started["temp_dir"]
    self.auth_env: dict[str, str] = started["auth_env"]
    self.started = started
    self.returncode: int | None = None

  def job_env(self) -> dict[str, str]:
    """A job's environment: ours, with the cluster's auth variables."""
    return launch_utils.launcher_env(self.auth_env)

  def job_flags(self) -> tuple[str, ...]:
    return (f"--ray_address={self.address}",)

  def worker_pids(self, actor_class: str) -> list[int]:
    """This cluster's live processes of Ray actors of `actor_class`."""
    import psutil  # pylint: disable=g-import-not-at-top

    pids = []
    for pid in launch_utils.descendants(self.process.pid):
      try:
        cmdline = " ".join(psutil.Process(pid).cmdline())
      except psutil.Error:
        continue
      if cmdline.startswith(f"ray::{actor_class}"):
        pids.append(pid)
    return sorted(pids)

  def after_job(self, actor_names: list[str], namespace: str) -> dict[str, Any]:
    """What an ended job left on the cluster (see ray_cluster_owner.py)."""
    self.process.stdin.write(json.dumps([actor_names, namespace]) + "\n")
    self.process.stdin.flush()
    return json.loads(self.process.stdout.readline() or "null")

  def close(self) -> list[int]:
    """Stops the cluster; the pids of its processes still alive after."""
    if self.process.poll() is None:
      self.process.stdin.close()
      try:
        self.process.wait(timeout=120)
      except subprocess.TimeoutExpired:
        self.process.kill()
        self.process.wait()
    self.returncode = self.process.returncode
    return ray_local.session_pids(self.temp_dir)
