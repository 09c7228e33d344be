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

"""The GRPO example started as a scheduler starts it, on 2 namespaced hosts.

Each host is a network namespace with its own address, hostname and no
route out (tests/support/netns_cluster.py). One process per host runs
examples/grpo_qwen3.py as it would run on a cluster: no local launcher;
`runtime.initialize()` finds the job through JAX's own auto-detection,
from either
  * the variables `srun` sets (SLURM: JAX's SlurmCluster reads
    SLURM_JOB_ID, SLURM_STEP_NODELIST, SLURM_NTASKS, SLURM_PROCID,
    SLURM_LOCALID; the rest are set as srun sets them), or
  * explicit coordinator variables as a GKE / TPU-pod launcher sets them
    (JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID), here on
    hosts whose own hostname resolves to 127.0.1.1 (the Debian default), so
    gloo must be told the cluster address rather than find it by hostname.
Each run must equal the local launcher's run of the same job (2 hosts x 2
CPU devices, same seed; `equivalence_runs["mcjax2"]`'s flags, taken from
the shared-run registry): every completion and reward exactly, losses and
final parameters within the fp32 tolerance of tests/test_equivalence.py
(rtol = atol = 1e-6). While each runs, every listening TCP and bound UDP
socket in each host's namespace is recorded: nothing may be bound beyond
the host's cluster address and loopback.
"""

from __future__ import annotations

import pathlib
import secrets
import sys

import pytest

import example_runs
import launch_utils
import netns_cluster
import sockets

pytestmark = [pytest.mark.multihost, pytest.mark.e2e]

# The job of equivalence_runs["mcjax2"] (tests/conftest.py): its local
# launcher run is the reference, shared with tests/test_equivalence.py.
JOB_FLAGS = (*example_runs.EQUIVALENCE_FLAGS, *example_runs.EVAL_FLAGS,
             "--backend=mcjax", "--transfer_guard=disallow")
LOCAL_FLAGS = (*JOB_FLAGS, "--num_hosts=2", "--devices_per_host=2")
HOSTS = 2
DEVICES_PER_HOST = 2
TIMEOUT_S = 600


def _base_env() -> dict[str, str]:
  """This test's environment, less anything that names another job (or a
  proxy: gRPC would send the coordinator's traffic to it)."""
  env = netns_cluster.without_other_jobs(launch_utils.launcher_env())
  # This host's devices, as the platform plan gives a simulated host (a
  # real host has its accelerators instead).
  env.update({"JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1",
              "TUNIX_MCJAX_DEVICES_PER_HOST": str(DEVICES_PER_HOST)})
  return env


def slurm_env(cluster: netns_cluster.Cluster, host: netns_cluster.Host,
              job_id: int) -> dict[str, str]:
  """What `srun --nodes=2 --ntasks-per-node=1` sets for task `host`."""
  nodes = f"node[0-{len(cluster.hosts) - 1}]"
  n = str(len(cluster.hosts))
  return {
      "SLURM_JOB_ID": str(job_id), "SLURM_JOBID": str(job_id),
      "SLURM_STEP_ID": "0", "SLURM_STEPID": "0",
      "SLURM_NTASKS": n, "SLURM_NPROCS": n, "SLURM_STEP_NUM_TASKS": n,
      "SLURM_PROCID": str(host.index), "SLURM_LOCALID": "0",
      "SLURM_NODEID": str(host.index),
      "SLURM_STEP_NODELIST": nodes, "SLURM_NODELIST": nodes,
      "SLURM_JOB_NODELIST": nodes,
      "SLURM_STEP_NUM_NODES": n, "SLURM_NNODES": n, "SLURM_JOB_NUM_NODES": n,
      "SLURM_TASKS_PER_NODE": f"1(x{n})", "SLURM_NTASKS_PER_NODE": "1",
      "SLURMD_NODENAME": host.hostname,
  }


def coordinator_env(cluster: netns_cluster.Cluster, host: netns_cluster.Host,
                    port: int) -> dict[str, str]:
  """Explicit variables, as a GKE or TPU-pod launcher sets them."""
  return {
      "JAX_COORDINATOR_ADDRESS": f"{cluster.hosts[0].address}:{port}",
      "JAX_NUM_PROCESSES": str(len(cluster.hosts)),
      "JAX_PROCESS_ID": str(host.index),
  }


def _run_on_cluster(out: pathlib.Path, route: str) -> dict:
  """Runs the job on 2 namespaced hosts started by `route`'s variables."""
  launch_utils.require_markers("multihost", "e2e")
  hosts_file = "cluster" if route == "slurm" else "loopback_self"
  try:
    cluster = netns_cluster.Cluster.create(HOSTS, hosts_file=hosts_file)
  except netns_cluster.Unavailable as e:
    pytest.skip(str(e))
  out.mkdir(parents=True)
  seen: set[netns_cluster.Listener] = set()
  job_id = 100000 + secrets.randbelow(900000)
  with cluster:
    procs, logs = [], []
    for host in cluster.hosts:
      env = _base_env()
      env.update(slurm_env(cluster, host, job_id) if route == "slurm"
                 else coordinator_env(cluster, host, 20000 + job_id % 20000))
      log = open(out / f"console_{host.hostname}.txt", "w")  # pylint: disable=consider-using-with
      logs.append(log)
      procs.append(cluster.start(
          host,
          [sys.executable, str(example_runs.EXAMPLE), *JOB_FLAGS,
           f"--dump_dir={out}", f"--metrics_out={out}/metrics.jsonl",
           f"--timeout={TIMEOUT_S - 100}"],
          env=env, stdout=log, cwd=launch_utils.REPO_ROOT))
    codes = netns_cluster.wait_all(
        procs, timeout=TIMEOUT_S,
        poll=lambda: seen.update(cluster.listeners()))
    for log in logs:
      log.close()
  consoles = {p.name: p.read_text() for p in out.glob("console_*.txt")}
  return {"out": out, "codes": codes, "listening": sorted(seen, key=str),
          "hosts": cluster.hosts, "consoles": consoles}


def _assert_ran(run: dict) -> None:
  tails = "\n".join(f"--- {name}\n{text[-3000:]}"
                    for name, text in run["consoles"].items())
  assert run["codes"] == [0] * HOSTS, tails


@pytest.fixture(scope="module", params=["slurm", "coordinator"])
def cluster_run(request, tmp_path_factory):
  return _run_on_cluster(
      tmp_path_factory.mktemp("netns") / request.param, request.param)


def test_same_numbers_as_the_local_launcher(cluster_run, shared_runs):
  _assert_ran(cluster_run)
  local = shared_runs.example(*LOCAL_FLAGS)
  example_runs.assert_same_rollouts_and_rewards(local, cluster_run["out"])
  example_runs.assert_same_losses_and_parameters(local, cluster_run["out"])
  example_runs.assert_parameters_moved(cluster_run["out"])
  # Process 0 (node0) summed up the job it found by itself.
  assert "[grpo] mean reward" in cluster_run["consoles"]["console_node0.txt"]


def test_listens_only_on_its_cluster_address(cluster_run):
  _assert_ran(cluster_run)
  address = {h.hostname: h.address for h in cluster_run["hosts"]}
  listening = cluster_run["listening"]
  beyond = [str(s) for s in listening
            if s.address != address[s.host] and not sockets.is_loopback(
                s.address)]
  assert beyond == [], "\n".join(str(s) for s in listening)
  # Not vacuous: the coordinator (host 0) and gloo (every host) were seen.
  for host in cluster_run["hosts"]:
    assert any(s.host == host.hostname and s.address == host.address
               for s in listening), (host, listening)
