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

"""Faults and user errors at the example's entry point.

* A host SIGKILLed in the middle of a real training run: the job exits
  non-zero within 30 s, naming the host, and leaves no process behind.
* A host stopped (SIGSTOP) mid-run: the other host's step watchdog ends it
  within --step_timeout_s, naming the step, and the job ends.
* Hosts started without the launcher (explicit coordinator variables): a
  killed host ends the other within 60 s, which names the peer it lost.
* A disaggregated job (`--backend=mcjax_da`) that cannot finish within
  --timeout: it ends within it (plus the hosts' stopping), one error line
  naming what it was waiting for, and every process it started is gone.
* A wrong flag or bad data: one line naming the fix, exit 2, no traceback,
  before any host starts.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import example_runs
import launch_utils
import pytest
import zygote

from tunix_mcjax import runtime
from tunix_mcjax import step_watchdog

EXAMPLE = example_runs.EXAMPLE
_TINY = ("--backend=mcjax", "--num_hosts=2", "--devices_per_host=1",
         "--batch_size=2", "--num_generations=2")


def _host_pids(launcher_stderr: str) -> dict[str, int]:
  """The launcher's 'host pids: 0=PID 1=PID' line, as a map."""
  for line in launcher_stderr.splitlines():
    if line.startswith("[launch] host pids: "):
      pairs = line.removeprefix("[launch] host pids: ").split()
      return {h: int(p) for h, p in (pair.split("=") for pair in pairs)}
  return {}


class _RunningJob:
  """The example's 2-host job, started and past its first step."""

  def __init__(self, tmp_path, *flags: str):
    self.metrics = tmp_path / "metrics.jsonl"
    self.err_file = tmp_path / "err.txt"
    with open(tmp_path / "out.txt", "w") as out, \
        open(self.err_file, "w") as err:
      self.proc = zygote.popen(
          [sys.executable, str(EXAMPLE), *_TINY, "--steps=500",
           f"--metrics_out={self.metrics}", "--timeout=500", *flags],
          env=launch_utils.launcher_env(), stdout=out, stderr=err)
    self.hosts: dict[str, int] = {}

  def wait_for_the_first_step(self) -> None:
    deadline = time.monotonic() + 400
    # Training is under way once the first step's record is written; the
    # next step is then running on both hosts.
    while not (self.metrics.exists() and self.metrics.read_text().strip()):
      assert self.proc.poll() is None, self.stderr()[-3000:]
      assert time.monotonic() < deadline, "no step finished in 400 s"
      time.sleep(0.2)
    self.hosts = _host_pids(self.stderr())
    assert set(self.hosts) == {"0", "1"}, self.hosts
    children = set(launch_utils.children(self.proc.pid))
    assert set(self.hosts.values()) <= children, (self.hosts, children)

  def stderr(self) -> str:
    return self.err_file.read_text()

  def records(self) -> list[dict[str, object]]:
    return [json.loads(l) for l in self.metrics.read_text().splitlines()]

  def end(self) -> None:
    if self.proc.poll() is None:
      self.proc.kill()
      self.proc.wait()
    for pid in self.hosts.values():  # A stopped host the test left behind.
      if launch_utils.is_alive(pid):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.multihost
@pytest.mark.e2e
def test_a_host_killed_mid_run_stops_the_job_naming_it(tmp_path):
  launch_utils.require_markers("multihost", "e2e")
  job = _RunningJob(tmp_path)
  try:
    job.wait_for_the_first_step()
    os.kill(job.hosts["1"], signal.SIGKILL)
    killed = time.monotonic()
    status = job.proc.wait(timeout=60)
    elapsed = time.monotonic() - killed
  finally:
    job.end()
  stderr = job.stderr()
  assert status == 128 + signal.SIGKILL, stderr[-3000:]
  assert "error: job failed: host 1 was killed by SIGKILL" in stderr, (
      stderr[-3000:])
  assert elapsed < 30, f"the job took {elapsed:.1f} s to stop"
  assert 1 <= len(job.records()) < 500
  launch_utils.assert_no_survivors(list(job.hosts.values()))


# The watchdog's limit in the stopped-host test: far above a step of this
# tiny job (well under a second after the first), far below JAX's heartbeat
# timeout (100 s), which would otherwise end the job.
_STEP_TIMEOUT_S = 20


@pytest.mark.multihost
@pytest.mark.e2e
def test_a_stopped_host_is_caught_by_the_other_hosts_step_watchdog(tmp_path):
  # SIGSTOP: the host neither dies nor answers, as a frozen machine; its
  # peer waits in the next step's collective. The launcher would wait for
  # --timeout (500 s); the peer's step watchdog stops it within its limit,
  # naming itself, the step and the phase, and the job ends.
  launch_utils.require_markers("multihost", "e2e")
  job = _RunningJob(tmp_path, f"--step_timeout_s={_STEP_TIMEOUT_S}")
  try:
    job.wait_for_the_first_step()
    os.kill(job.hosts["1"], signal.SIGSTOP)
    stopped = time.monotonic()
    status = job.proc.wait(timeout=_STEP_TIMEOUT_S + 90)
    elapsed = time.monotonic() - stopped
  finally:
    job.end()
  stderr = job.stderr()
  assert status == step_watchdog.EXIT_STATUS, stderr[-3000:]
  lines = [l for l in stderr.splitlines()
           if "[mcjax] error: host 0 (" in l and "has not ended" in l]
  assert len(lines) == 1, stderr[-3000:]
  assert f"(--step_timeout_s {_STEP_TIMEOUT_S})" in lines[0]
  assert "error: job failed: host 0 exited with status 3" in stderr, (
      stderr[-3000:])
  assert elapsed < _STEP_TIMEOUT_S + 30, (
      f"the job took {elapsed:.1f} s to stop")
  launch_utils.assert_no_survivors(list(job.hosts.values()))


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.mark.multihost
@pytest.mark.e2e
def test_without_a_launcher_a_killed_host_ends_the_others_naming_it(tmp_path):
  # Hosts started as a cluster scheduler starts them (the explicit
  # coordinator variables a GKE or TPU-pod launcher sets), no launcher to
  # stop them: the survivor's next collective fails, and it says which peer
  # it lost in one line and exits at once, not after JAX's heartbeat
  # timeout and shutdown barrier (about 70 s here before).
  launch_utils.require_markers("multihost", "e2e")
  metrics = tmp_path / "metrics.jsonl"
  env = launch_utils.launcher_env({
      "JAX_PLATFORMS": "cpu",
      "XLA_FLAGS": "--xla_force_host_platform_device_count=1",
      runtime.ENV_COORDINATOR: f"127.0.0.1:{_free_port()}",
      runtime.ENV_NUM_HOSTS: "2",
      runtime.ENV_DEVICES_PER_HOST: "1"})
  hosts = []
  try:
    for i in range(2):
      with open(tmp_path / f"host{i}.txt", "w") as out:
        hosts.append(zygote.popen(
            [sys.executable, str(EXAMPLE), *_TINY[:1], *_TINY[3:],
             "--steps=500", f"--metrics_out={metrics}"],
            env={**env, runtime.ENV_HOST_ID: str(i)}, stdout=out,
            stderr=subprocess.STDOUT))
    deadline = time.monotonic() + 400
    while not (metrics.exists() and metrics.read_text().strip()):
      assert all(h.poll() is None for h in hosts), (
          (tmp_path / "host0.txt").read_text()[-3000:])
      assert time.monotonic() < deadline, "no step finished in 400 s"
      time.sleep(0.2)
    hosts[1].kill()
    killed = time.monotonic()
    status = hosts[0].wait(timeout=120)
    elapsed = time.monotonic() - killed
  finally:
    for h in hosts:
      if h.poll() is None:
        h.kill()
      h.wait()
  out = (tmp_path / "host0.txt").read_text()
  assert status == 1, out[-3000:]
  lines = [l for l in out.splitlines()
           if l.startswith("grpo_qwen3.py: error: host 0 (")]
  assert len(lines) == 1, out[-3000:]
  assert "a collective lost the host at 127.0.0.1:" in lines[0]
  assert "it died or was cut off from this host" in lines[0]
  assert elapsed < 60, f"host 0 took {elapsed:.1f} s to stop"
  launch_utils.assert_no_survivors([h.pid for h in hosts])


# Seconds a DA job gets: well below its Ray start and its hosts' start
# together (about 8 s on a quiet 2-core machine), so it always runs out.
_DA_LIMIT_S = 4
# What the job may take past its limit: the rollout hosts close their
# engines (at most 20 s) and the local Ray head stops (at most 15 s).
_DA_STOP_S = 60


@pytest.mark.multihost
@pytest.mark.e2e
def test_a_da_job_ends_within_its_timeout_naming_what_it_waited_for(tmp_path):
  # Each wait of the job (placement, the rollout hosts' start, the job) got
  # the whole --timeout before, so the job could run several times as long.
  proc = zygote.popen(
      [sys.executable, str(EXAMPLE), "--backend=mcjax_da",
       "--trainer_hosts=1", "--rollout_hosts=2", "--devices_per_host=1",
       "--batch_size=2", "--num_generations=2", "--steps=2",
       f"--metrics_out={tmp_path / 'metrics.jsonl'}",
       f"--timeout={_DA_LIMIT_S}"],
      env=launch_utils.launcher_env(), stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, text=True)
  start = time.monotonic()
  started = set()  # Every process of the job: its Ray head and hosts.

  def watch():
    while proc.poll() is None:
      started.update(launch_utils.descendants(proc.pid))
      time.sleep(0.1)

  watcher = threading.Thread(target=watch, daemon=True)
  watcher.start()
  stdout, stderr = zygote.communicate_or_kill(
      proc, timeout=_DA_LIMIT_S + _DA_STOP_S + 60)
  took = time.monotonic() - start
  watcher.join(timeout=5)
  output = stdout + stderr
  assert proc.returncode == 1, output[-3000:]
  errors = [l for l in stderr.splitlines() if "error: " in l]
  assert len(errors) == 1, stderr[-3000:]
  assert re.search(
      rf"error: Timed out waiting for .+: the job's time limit of"
      rf" {_DA_LIMIT_S} s \(--timeout\) passed", errors[0]), errors[0]
  assert took < _DA_LIMIT_S + _DA_STOP_S, (took, output[-3000:])
  metrics = tmp_path / "metrics.jsonl"
  assert not metrics.exists() or not metrics.read_text().strip()  # No step.
  assert started, "the job started no process (no Ray head)"
  launch_utils.assert_no_survivors(sorted(started), wait_s=15)


def _run_example(*args: str) -> subprocess.CompletedProcess[str]:
  return zygote.run(
      [sys.executable, str(EXAMPLE), *args], env=launch_utils.launcher_env(),
      capture_output=True, text=True, timeout=300, check=False)


def _assert_one_line_exit_2(result: subprocess.CompletedProcess[str],
                            message: str) -> None:
  assert result.returncode == 2, result.stderr[-3000:]
  assert "Traceback" not in result.stderr, result.stderr[-3000:]
  errors = [l for l in result.stderr.splitlines() if "error: " in l]
  assert len(errors) == 1, result.stderr[-3000:]
  assert message in errors[0], errors[0]


def test_a_wrong_flag_is_one_line_and_exit_2_before_any_host_starts(
    tmp_path):
  result = _run_example(*_TINY[:-2], "--batch_size=3", "--num_generations=2",
                        "--engine=nope", f"--dataset=gsm8k:{tmp_path}/x.jsonl")
  _assert_one_line_exit_2(result, "--engine='nope' is not a registered engine")
  # Every problem in that one line, each with its fix.
  assert "--batch_size=3 is global and must divide over 2 hosts" in (
      result.stderr)
  assert "is not a file" in result.stderr
  assert "on this machine:" not in result.stdout  # No host started.


def test_bad_data_is_one_line_and_exit_2_before_any_host_starts(tmp_path):
  data = tmp_path / "train.jsonl"
  data.write_text(json.dumps({"question": "q " * 40, "answer": "#### 1"})
                  + "\n")
  # --model=tiny reads GSM8K text with the toy alphabet: 180+ tokens.
  result = _run_example(*_TINY, f"--dataset=gsm8k:{data}", "--steps=1",
                        "--max_prompt_length=16")
  _assert_one_line_exit_2(result, "row 1 (of 1; 1 too long)")
  assert "--skip_long_prompts" in result.stderr
  assert "on this machine:" not in result.stdout  # No host started.
