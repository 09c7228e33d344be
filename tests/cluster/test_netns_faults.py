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

"""Faults on 2 namespaced hosts, with no launcher to end the job.

Each host is a network namespace with its own address (10.213.X.0/24),
hostname and no route out (tests/support/netns_cluster.py); each runs
examples/grpo_qwen3.py as a GKE or TPU-pod launcher starts it (explicit
coordinator variables, host 0 the coordinator). Once the first step's
metrics record is written (500 steps are asked for, so the job is still
training), host 1 suffers a fault, and host 0, the survivor, must end by
itself:
  * host 1 SIGKILLed: its sockets close, host 0's next collective fails and
    host 0 exits 1 within 60 s with host_failure's one line naming the
    lost peer's 10.213.* address;
  * host 1 stopped (SIGSTOP, a frozen machine): host 0 waits in a
    collective; its step watchdog ends it with status 3 and one line within
    --step_timeout_s (plus the poll slack);
  * host 1's link cut (its eth0 set down inside its namespace): seen here
    (2026-12-05), no collective errors: gloo's connection neither resets
    nor closes over a link that is down, both hosts' collectives hang, and
    each host's step watchdog ends it (status 3, one line each) within
    --step_timeout_s; host_failure's line is not printed.
After each: no process of the job is left (every pid seen while it ran),
and the fixture's teardown leaves no namespace, file or process.

The disaggregated mode on a Ray cluster spanning the two hosts (a head on
host 0, a worker node on host 1): the job equals the local DA run, and with
host 0 killed whole under a running job the driver on host 1 ends in one
line and nothing is left on host 1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

import example_runs
import launch_utils
import netns_cluster
from tunix_mcjax import step_watchdog

pytestmark = [pytest.mark.multihost, pytest.mark.e2e]

HOSTS = 2
# The smallest job: 1 CPU device per host, 2 rows of 2 completions a step;
# far more steps than the test waits for.
JOB_FLAGS = ("--backend=mcjax", "--batch_size=2", "--num_generations=2",
             "--steps=500")
# Far above a step of this job (well under a second after the first), far
# below JAX's heartbeat timeout (100 s), which would otherwise end host 0.
STEP_TIMEOUT_S = 20
# The watchdog polls; what it may add to its limit, and the test's polling.
SLACK_S = 15
FIRST_STEP_S = 400


def _env(cluster: netns_cluster.Cluster, host: netns_cluster.Host,
         port: int) -> dict[str, str]:
  """The test's environment less any other job's or proxy's variables,
  plus the explicit coordinator variables for `host`."""
  env = netns_cluster.without_other_jobs(launch_utils.launcher_env())
  env.update({
      "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1",
      "TUNIX_MCJAX_DEVICES_PER_HOST": "1",
      "JAX_COORDINATOR_ADDRESS": f"{cluster.hosts[0].address}:{port}",
      "JAX_NUM_PROCESSES": str(len(cluster.hosts)),
      "JAX_PROCESS_ID": str(host.index),
  })
  return env


@dataclasses.dataclass
class _Job:
  """The 2-host job on `cluster`, started; `pids`: every process seen."""

  cluster: netns_cluster.Cluster
  out: pathlib.Path
  procs: list[subprocess.Popen]
  pids: set[int] = dataclasses.field(default_factory=set)
  # Host 1's (status, seconds) once host 0 ended.
  host1: tuple[int | None, float] | None = None

  def console(self, index: int) -> str:
    return (self.out / f"console_node{index}.txt").read_text()

  def consoles(self) -> str:
    return "\n".join(f"--- node{i}\n{self.console(i)[-3000:]}"
                     for i in range(HOSTS))

  def note_pids(self) -> None:
    for proc in self.procs:
      if proc.poll() is None:
        self.pids.update([proc.pid, *launch_utils.descendants(proc.pid)])

  def wait_for_the_first_step(self) -> None:
    """Until process 0 wrote the first step's metrics record."""
    metrics = self.out / "metrics.jsonl"
    deadline = time.monotonic() + FIRST_STEP_S
    while not (metrics.exists() and metrics.read_text().strip()):
      assert all(p.poll() is None for p in self.procs), self.consoles()
      assert time.monotonic() < deadline, (
          f"no step ended in {FIRST_STEP_S} s\n{self.consoles()}")
      self.note_pids()
      time.sleep(0.2)
    self.note_pids()

  def wait(self, index: int, timeout: float) -> tuple[int | None, float]:
    """Host `index`'s exit status (None: still running) and when, in
    seconds from now."""
    start = time.monotonic()
    try:
      code = self.procs[index].wait(timeout=timeout)
    except subprocess.TimeoutExpired:
      code = None
    return code, time.monotonic() - start


def _start(cluster: netns_cluster.Cluster, out: pathlib.Path,
           *flags: str) -> _Job:
  out.mkdir(parents=True)
  port = 20000 + secrets.randbelow(20000)
  procs = []
  for host in cluster.hosts:
    with open(out / f"console_{host.hostname}.txt", "w") as log:
      procs.append(cluster.start(
          host,
          [sys.executable, str(example_runs.EXAMPLE), *JOB_FLAGS,
           f"--metrics_out={out}/metrics.jsonl", *flags],
          env=_env(cluster, host, port), stdout=log,
          cwd=launch_utils.REPO_ROOT))
  return _Job(cluster, out, procs)


def _run_fault(out: pathlib.Path, fault, timeout: float, *flags: str):
  """Starts the job, applies `fault(job)` after its first step, waits up
  to `timeout` s for host 0; returns (job, host 0's status, seconds)."""
  launch_utils.require_markers("multihost", "e2e")
  try:
    cluster = netns_cluster.Cluster.create(HOSTS, hosts_file="loopback_self")
  except netns_cluster.Unavailable as e:
    pytest.skip(str(e))
  with cluster:
    job = _start(cluster, out, *flags)
    job.wait_for_the_first_step()
    fault(job)
    code, elapsed = job.wait(0, timeout)
    # Host 1's own end, if it has one (reported, not required: a stopped
    # host never ends by itself).
    job.host1 = job.wait(1, 10)
    print(f"\n[netns fault] {out.name}: host 0 exit {code} after"
          f" {elapsed:.1f} s; host 1: {job.host1}")
    for proc in job.procs:  # What a scheduler would do to a stopped host.
      if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)
    launch_utils.assert_no_survivors(sorted(job.pids), wait_s=10)
  assert cluster.leftovers() == []
  assert not list(netns_cluster.NETNS_ETC.glob(f"{cluster.tag}*"))
  return job, code, elapsed


def _watchdog_lines(console: str) -> list[str]:
  return [l for l in console.splitlines()
          if l.startswith("[mcjax] error: host 0 (node0): step ")
          and "has not ended" in l]


def _assert_ended_by_the_watchdog(job: _Job, code: int | None,
                                  elapsed: float) -> _Job:
  """Host 0 ended by its step watchdog: status, one line, within the limit."""
  assert code == step_watchdog.EXIT_STATUS, job.consoles()
  lines = _watchdog_lines(job.console(0))
  assert len(lines) == 1, job.consoles()
  assert f"(--step_timeout_s {STEP_TIMEOUT_S})" in lines[0], lines[0]
  assert elapsed < STEP_TIMEOUT_S + SLACK_S, (
      f"host 0 took {elapsed:.1f} s to stop")
  return job


def test_a_killed_host_ends_the_other_naming_its_address(tmp_path):
  def kill(job: _Job) -> None:
    job.procs[1].send_signal(signal.SIGKILL)

  job, code, elapsed = _run_fault(tmp_path / "killed", kill, 60)
  assert code == 1, job.consoles()
  lines = [l for l in job.console(0).splitlines()
           if l.startswith("grpo_qwen3.py: error: host 0 (node0): ")]
  assert len(lines) == 1, job.consoles()
  peer = job.cluster.hosts[1].address
  assert f"a collective lost the host at {peer}:" in lines[0], lines[0]
  assert "it died or was cut off from this host" in lines[0]
  assert elapsed < 60, f"host 0 took {elapsed:.1f} s to stop"


def test_a_stopped_host_is_caught_by_the_others_step_watchdog(tmp_path):
  def stop(job: _Job) -> None:
    job.procs[1].send_signal(signal.SIGSTOP)

  _assert_ended_by_the_watchdog(*_run_fault(
      tmp_path / "stopped", stop, STEP_TIMEOUT_S + SLACK_S + 30,
      f"--step_timeout_s={STEP_TIMEOUT_S}"))


def test_a_host_cut_off_is_caught_by_the_others_step_watchdog(tmp_path):
  def cut(job: _Job) -> None:
    job.cluster.set_link(job.cluster.hosts[1], up=False)

  job = _assert_ended_by_the_watchdog(*_run_fault(
      tmp_path / "cut", cut, STEP_TIMEOUT_S + SLACK_S + 30,
      f"--step_timeout_s={STEP_TIMEOUT_S}"))
  # Host 1 is cut off, not stopped: its own watchdog ends it too.
  assert job.host1[0] == step_watchdog.EXIT_STATUS, job.consoles()


# The disaggregated route on a Ray cluster spanning the 2 namespaced hosts.
DA_FLAGS = (*example_runs.EQUIVALENCE_FLAGS, "--backend=mcjax_da",
            "--trainer_hosts=1", "--rollout_hosts=1", "--devices_per_host=1",
            "--max_staleness=0")
RAY_PORT = 6379
RAY_START_S = 180


def _ray_env(token: str) -> dict[str, str]:
  env = launch_utils.launcher_env()
  for name in list(env):
    if name.startswith(("RAY_", "TUNIX_MCJAX_")) or "_proxy" in name.lower():
      del env[name]
  env.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token,
              "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1"})
  return env


def _ray_cluster(cluster: netns_cluster.Cluster, out: pathlib.Path,
                 env: dict[str, str], temp_dir: str) -> list[subprocess.Popen]:
  """`ray start --head` on host 0's address, a worker from host 1; returns
  their processes once `ray status` on host 0 shows both nodes."""
  ray = str(pathlib.Path(sys.executable).parent / "ray")
  head, worker = cluster.hosts
  common = ("--block", "--num-cpus=2", "--disable-usage-stats")
  procs = []
  with open(out / "ray_head.txt", "w") as log:
    procs.append(cluster.start(
        head, [ray, "start", "--head", *common,
               f"--node-ip-address={head.address}", f"--port={RAY_PORT}",
               "--include-dashboard=false", f"--temp-dir={temp_dir}/h0"],
        env=env, stdout=log))
  time.sleep(5)
  with open(out / "ray_worker.txt", "w") as log:
    procs.append(cluster.start(
        worker, [ray, "start", *common, f"--address={head.address}:{RAY_PORT}",
                 f"--node-ip-address={worker.address}",
                 f"--temp-dir={temp_dir}/h1"], env=env, stdout=log))
  deadline = time.monotonic() + RAY_START_S
  while True:
    assert all(p.poll() is None for p in procs), (
        (out / "ray_head.txt").read_text()[-3000:]
        + (out / "ray_worker.txt").read_text()[-3000:])
    status = subprocess.run(
        ["ip", "netns", "exec", head.netns, ray, "status",
         f"--address={head.address}:{RAY_PORT}"], env=env,
        capture_output=True, text=True, timeout=120, check=False)
    if status.stdout.count(" 1 node_") == 2:
      return procs
    assert time.monotonic() < deadline, (
        f"the Ray cluster did not form in {RAY_START_S} s:\n"
        f"{status.stdout[-2000:]}{status.stderr[-2000:]}")
    time.sleep(3)


def _titles(pids: list[int]) -> list[str]:
  """The "PID command line" of each process still there."""
  titles = []
  for pid in pids:
    try:
      raw = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
      continue
    title = raw.replace(b"\0", b" ").decode(errors="replace")
    titles.append(f"{pid} {title[:120]}")
  return titles


def _note_actors(cluster: netns_cluster.Cluster,
                 seen: dict[str, set[str]]) -> None:
  """Adds the DA actor classes (TrainerHost, RolloutHost) whose processes
  run in each host's namespace now to `seen[hostname]`."""
  for host in cluster.hosts:
    for title in _titles(cluster.pids(host)):
      for actor in ("TrainerHost", "RolloutHost"):
        if f"ray::{actor}" in title:
          seen.setdefault(host.hostname, set()).add(actor)


@dataclasses.dataclass
class _RayNodes:
  """The module's Ray cluster over the 2 namespaced hosts."""

  cluster: netns_cluster.Cluster
  env: dict[str, str]


@pytest.fixture(scope="module")
def ray_nodes(tmp_path_factory):
  """One Ray cluster over the 2 namespaced hosts (`_ray_cluster`: head on
  host 0, token auth) for both DA tests: the equivalence job runs on it,
  then the head-kill test ends it (it comes last in this module).
  Namespaces, processes and Ray's temporary directory go at the end."""
  launch_utils.require_markers("multihost", "e2e")
  try:
    cluster = netns_cluster.Cluster.create(HOSTS)
  except netns_cluster.Unavailable as e:
    pytest.skip(str(e))
  env = _ray_env(secrets.token_hex(32))
  # Short: Ray's AF_UNIX socket paths under it must stay within 107 bytes.
  temp_dir = tempfile.mkdtemp(prefix="rn", dir="/tmp")
  with cluster, contextlib.ExitStack() as stack:
    stack.callback(shutil.rmtree, temp_dir, ignore_errors=True)
    _ray_cluster(cluster, tmp_path_factory.mktemp("ray_nodes"), env,
                 temp_dir)
    yield _RayNodes(cluster, env)
  assert cluster.leftovers() == []


def _start_da_job(nodes: _RayNodes, out: pathlib.Path, driver: int,
                  *flags: str) -> subprocess.Popen:
  """The DA job's driver on host `driver` with `--ray_address`,
  STRICT_SPREAD, `--metrics_out=out/metrics.jsonl` and `flags`."""
  out.mkdir()
  with open(out / "console.txt", "w") as log:
    return nodes.cluster.start(
        nodes.cluster.hosts[driver],
        [sys.executable, str(example_runs.EXAMPLE), *DA_FLAGS,
         f"--ray_address={nodes.cluster.hosts[0].address}:{RAY_PORT}",
         "--ray_placement_strategy=STRICT_SPREAD",
         f"--metrics_out={out / 'metrics.jsonl'}", *flags],
        env=nodes.env, stdout=log, cwd=launch_utils.REPO_ROOT)


def test_da_job_across_namespaced_ray_nodes_equals_the_local_run(
    tmp_path, ray_nodes, shared_runs):
  """A Ray head (`ray start --head`, token auth) on host 0's address, a
  worker node joining from host 1, the DA job submitted from host 0 with
  `--ray_address` and STRICT_SPREAD: its trainer and rollout host run on
  different namespaced hosts, and it equals the local DA run (own head)."""
  out = tmp_path / "da"
  placed: dict[str, set[str]] = {}
  job = _start_da_job(ray_nodes, out, 0, f"--dump_dir={out}", "--timeout=500")
  deadline = time.monotonic() + 600
  while job.poll() is None and time.monotonic() < deadline:
    _note_actors(ray_nodes.cluster, placed)
    time.sleep(0.5)
  code = job.poll()
  console = (out / "console.txt").read_text()
  assert code == 0, console[-5000:]
  print(f"\n[netns DA] actors by host: {placed}")
  assert sorted(map(sorted, placed.values())) == [["RolloutHost"],
                                                  ["TrainerHost"]], placed
  local = shared_runs.example(*DA_FLAGS)
  example_runs.assert_same_rollouts_and_rewards(local, out)
  example_runs.assert_same_losses_and_parameters(local, out)


# Ray's own limit for a node that lost its head
# (gcs_rpc_server_reconnect_timeout_s, Ray 2.60), after which its raylet and
# the job's actor on it end; the test leaves it at Ray's default.
RAY_RECONNECT_S = 60
HEAD_KILL_LIMIT_S = 90
NODE_LIMIT_S = 300


def _job_processes(cluster: netns_cluster.Cluster,
                   host: netns_cluster.Host) -> list[str]:
  """The job's processes on `host`: its driver and Ray workers (actors)."""
  return [t for t in _titles(cluster.pids(host))
          if "grpo_qwen3.py" in t or "ray::" in t and "Agent" not in t]


def test_a_killed_ray_head_ends_the_da_job_in_one_line(tmp_path, ray_nodes):
  """Host 0, the Ray head's machine, killed whole (every process in its
  namespace: the head's GCS and raylet, the job's actor there) while the DA
  job trains, its driver on host 1 (a worker node): the driver exits 1 with
  one line naming the head's GCS before Ray's own 60 s limit (seen: 1.2 s
  when the actor on host 0 was the first sign, 16.7 s by the GCS probe);
  within 90 s of the kill no process of the job is left on host 1 (its
  actor ends with the raylet, which Ray stops 60 s after it lost the head),
  and then no process at all: `ray start --block` kills the node's rest,
  and its agents exit once their last report to the lost GCS gave up (seen
  at about 122 s; allowed up to NODE_LIMIT_S). On the equivalence test's
  cluster, which it ends: it must stay the module's last test."""
  out = tmp_path / "da_head"
  metrics = out / "metrics.jsonl"
  cluster = ray_nodes.cluster
  head, driver_host = cluster.hosts
  gcs = f"{head.address}:{RAY_PORT}"
  job = _start_da_job(ray_nodes, out, 1, "--steps=500", "--timeout=900")
  deadline = time.monotonic() + FIRST_STEP_S
  while not (metrics.exists() and metrics.read_text().strip()):
    assert job.poll() is None, (out / "console.txt").read_text()[-5000:]
    assert time.monotonic() < deadline, (
        f"no step ended in {FIRST_STEP_S} s")
    time.sleep(0.5)
  for pid in cluster.pids(head):
    with contextlib.suppress(ProcessLookupError):
      os.kill(pid, signal.SIGKILL)
  killed = time.monotonic()
  try:
    code = job.wait(timeout=HEAD_KILL_LIMIT_S)
  except subprocess.TimeoutExpired:
    code = None
  ended = time.monotonic() - killed
  job_left = _job_processes(cluster, driver_host)
  while job_left and time.monotonic() < killed + HEAD_KILL_LIMIT_S:
    time.sleep(1)
    job_left = _job_processes(cluster, driver_host)
  job_gone = time.monotonic() - killed
  # The node's own daemons (`ray start`'s raylet and agents) end by Ray's
  # rules; how long they take is reported.
  while (cluster.pids(driver_host)
         and time.monotonic() < killed + NODE_LIMIT_S):
    time.sleep(1)
  left = _titles(cluster.pids(driver_host))
  gone = time.monotonic() - killed
  console = (out / "console.txt").read_text()
  print(f"\n[netns DA head kill] driver exit {code} after {ended:.1f} s;"
        f" job's processes gone after {job_gone:.1f} s; host 1 empty after"
        f" {gone:.1f} s; left: {left}")
  assert code == 1, console[-5000:]
  errors = [l for l in console.splitlines()
            if l.startswith("grpo_qwen3.py: error:")]
  assert len(errors) == 1 and gcs in errors[0], console[-5000:]
  assert "does not answer" in errors[0], errors
  assert "Traceback" not in console, console[-5000:]
  assert ended < RAY_RECONNECT_S, (
      f"the driver took {ended:.1f} s: not its own watch but Ray's limit")
  assert job_left == [], job_left
  assert left == [], left
