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

"""Tests of tunix_mcjax.runtime: config, start-up, meshes, FSDP parity."""

import dataclasses
import subprocess
import pathlib
import sys

import launch_utils
import numpy as np
import pytest

from tunix_mcjax import runtime

_SUPPORT = pathlib.Path(__file__).resolve().parent / "support"
# Single-process start-ups, each in a fresh interpreter.
_START = _SUPPORT / "runtime_start.py"
# Host programs: `meshes OUT` and `train OUT`.
_HOST = _SUPPORT / "runtime_host.py"

_LAUNCHER_VARS = (
    runtime.ENV_COORDINATOR,
    runtime.ENV_NUM_HOSTS,
    runtime.ENV_HOST_ID,
    runtime.ENV_DEVICES_PER_HOST,
)


# --- RuntimeConfig ------------------------------------------------------------


def test_config_defaults_are_valid():
  config = runtime.RuntimeConfig()
  assert config.coordinator_address is None
  assert config.cpu_collectives == "gloo"
  assert config.initialization_timeout_s == 300
  assert config.heartbeat_timeout_s is None


def test_config_is_frozen_and_keyword_only():
  config = runtime.RuntimeConfig()
  with pytest.raises(dataclasses.FrozenInstanceError):
    config.num_processes = 2  # pytype: disable=attribute-error
  with pytest.raises(TypeError):
    runtime.RuntimeConfig("127.0.0.1:1234")  # pylint: disable=too-many-function-args


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"coordinator_address": "127.0.0.1:1234"}, "set all three"),
        ({"num_processes": 2, "process_id": 0}, "but not coordinator_address"),
        (
            {
                "coordinator_address": "localhost",
                "num_processes": 2,
                "process_id": 0,
            },
            "must look like 'host:port'",
        ),
        (
            {
                "coordinator_address": "127.0.0.1:70000",
                "num_processes": 2,
                "process_id": 0,
            },
            "must look like 'host:port'",
        ),
        (
            {
                "coordinator_address": "127.0.0.1:1234",
                "num_processes": 0,
                "process_id": 0,
            },
            "num_processes=0 must be an integer >= 1",
        ),
        (
            {
                "coordinator_address": "127.0.0.1:1234",
                "num_processes": 2,
                "process_id": 2,
            },
            r"process_id=2 must be an integer in \[0, ",
        ),
        ({"local_device_count": 0}, "local_device_count=0 must be"),
        ({"coordinator_address": "127.0.0.1:1234", "num_processes": 2,
          "process_id": 0, "local_device_ids": (1, 1)},
         "local_device_ids=.* distinct device ordinals"),
        ({"coordinator_address": "127.0.0.1:1234", "num_processes": 2,
          "process_id": 0, "local_device_ids": (0,), "local_device_count": 2},
         "exclude each other"),
        ({"local_device_ids": (0,)}, "needs an explicit job"),
        ({"cpu_collectives": "nccl"}, "cpu_collectives='nccl' must be one of"),
        ({"initialization_timeout_s": 0}, "initialization_timeout_s=0"),
        ({"heartbeat_timeout_s": -1}, "heartbeat_timeout_s=-1"),
    ],
)
def test_config_validation(kwargs, message):
  with pytest.raises(ValueError, match=message):
    runtime.RuntimeConfig(**kwargs)


def test_config_from_env_reads_launcher_variables():
  config = runtime.RuntimeConfig.from_env({
      runtime.ENV_COORDINATOR: "127.0.0.1:4321",
      runtime.ENV_NUM_HOSTS: "3",
      runtime.ENV_HOST_ID: "2",
      runtime.ENV_DEVICES_PER_HOST: "4",
  })
  assert config == runtime.RuntimeConfig(
      coordinator_address="127.0.0.1:4321",
      num_processes=3,
      process_id=2,
      local_device_count=4,
  )


def test_config_from_env_reads_the_gpus_of_a_process():
  config = runtime.RuntimeConfig.from_env({
      runtime.ENV_COORDINATOR: "127.0.0.1:4321",
      runtime.ENV_NUM_HOSTS: "2",
      runtime.ENV_HOST_ID: "1",
      runtime.ENV_LOCAL_DEVICE_IDS: "2,3",
  })
  assert config.local_device_ids == (2, 3)
  assert config.local_device_count is None  # The platform is left alone.
  # What jax.distributed.initialize is given (read by initialize()).
  kwargs = runtime._optional_distributed_kwargs(config)  # pylint: disable=protected-access
  assert kwargs == {"local_device_ids": [2, 3]}


def test_config_from_env_without_variables_auto_detects():
  assert runtime.RuntimeConfig.from_env({}) == runtime.RuntimeConfig()


@pytest.mark.parametrize(
    "environ,message",
    [
        (
            {
                "TUNIX_MCJAX_COORDINATOR": "127.0.0.1:1",
                "TUNIX_MCJAX_NUM_HOSTS": "2",
            },
            "TUNIX_MCJAX_HOST_ID is not",
        ),
        ({"TUNIX_MCJAX_HOST_ID": "0"}, "without TUNIX_MCJAX_COORDINATOR"),
        (
            {
                "TUNIX_MCJAX_COORDINATOR": "127.0.0.1:1",
                "TUNIX_MCJAX_NUM_HOSTS": "two",
                "TUNIX_MCJAX_HOST_ID": "0",
            },
            "TUNIX_MCJAX_NUM_HOSTS='two' must be an integer",
        ),
        (
            {
                "TUNIX_MCJAX_COORDINATOR": "127.0.0.1:1",
                "TUNIX_MCJAX_NUM_HOSTS": "2",
                "TUNIX_MCJAX_HOST_ID": "0",
                "TUNIX_MCJAX_LOCAL_DEVICE_IDS": "0;1",
            },
            "TUNIX_MCJAX_LOCAL_DEVICE_IDS='0;1' must be comma-separated",
        ),
    ],
)
def test_config_from_env_errors(environ, message):
  with pytest.raises(ValueError, match=message):
    runtime.RuntimeConfig.from_env(environ)


# --- Cluster detection (the one helper that reads private jax names) ---------


_CLUSTER_VARS = (
    "JAX_COORDINATOR_ADDRESS",
    "SLURM_JOB_ID",
    "SLURM_STEP_NODELIST",
    "SLURM_NTASKS",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "OMPI_MCA_orte_hnp_uri",
    "PMIX_SERVER_URI2",
    "KUBERNETES_SERVICE_HOST",
)


def test_cluster_detection(monkeypatch):
  for name in _CLUSTER_VARS:
    monkeypatch.delenv(name, raising=False)
  assert runtime._detected_cluster() is None  # pylint: disable=protected-access
  slurm = {
      "SLURM_JOB_ID": "7",
      "SLURM_STEP_NODELIST": "node1",
      "SLURM_NTASKS": "2",
      "SLURM_PROCID": "0",
      "SLURM_LOCALID": "0",
  }
  for name, value in slurm.items():
    monkeypatch.setenv(name, value)
  assert runtime._detected_cluster() == "SlurmCluster"  # pylint: disable=protected-access
  for name in slurm:
    monkeypatch.delenv(name)
  monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "10.0.0.1:1234")
  monkeypatch.setenv("JAX_NUM_PROCESSES", "2")
  monkeypatch.setenv("JAX_PROCESS_ID", "1")
  assert runtime._detected_cluster() == "JAX_COORDINATOR_ADDRESS"  # pylint: disable=protected-access
  # The address alone: JAX would fail inside the job; refused up front.
  monkeypatch.delenv("JAX_NUM_PROCESSES")
  with pytest.raises(runtime.ClusterDetectionError,
                     match=r"1234 is set, but JAX_NUM_PROCESSES is not.*"
                     r"or unset JAX_COORDINATOR_ADDRESS"):
    runtime._detected_cluster()  # pylint: disable=protected-access
  # With a scheduler that gives the count and id (SLURM), it is a cluster.
  for name, value in slurm.items():
    monkeypatch.setenv(name, value)
  assert runtime._detected_cluster() == "JAX_COORDINATOR_ADDRESS"  # pylint: disable=protected-access


def test_a_failing_detector_is_an_error_only_where_a_cluster_is_likely(
    monkeypatch):
  from jax._src import clusters  # pylint: disable=g-import-not-at-top

  # Defining a ClusterEnv registers it: only in this test's list.
  monkeypatch.setattr(clusters.ClusterEnv, "_cluster_types", [])

  class BrokenTpuDetector(clusters.ClusterEnv):
    """Stands in for a detector whose probe fails (no metadata server)."""

    @classmethod
    def is_env_present(cls) -> bool:
      raise ConnectionError("metadata server unreachable")

  for name in _CLUSTER_VARS + ("TPU_WORKER_ID",):
    monkeypatch.delenv(name, raising=False)
  assert clusters.ClusterEnv._cluster_types == [BrokenTpuDetector]  # pylint: disable=protected-access
  # A plain machine: the probe failing means "not that cluster".
  assert runtime._detected_cluster() is None  # pylint: disable=protected-access
  monkeypatch.setenv("TPU_WORKER_ID", "3")
  with pytest.raises(runtime.ClusterDetectionError,
                     match=r"BrokenTpuDetector detector failed \(Connection"
                     r"Error: metadata server unreachable\).*TPU_WORKER_ID"):
    runtime.in_multi_controller_environment()


# --- Single-process start-up (fresh interpreters) -----------------------------


def _run_start(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
  """Runs `runtime_start.py ARGS` outside any job (no launcher or cluster
  variables)."""
  environ = launch_utils.launcher_env()
  for name in _LAUNCHER_VARS + _CLUSTER_VARS + ("XLA_FLAGS",):
    environ.pop(name, None)
  environ["JAX_PLATFORMS"] = "cpu"
  environ.update(env)
  return subprocess.run(
      [sys.executable, str(_START), *args],
      env=environ,
      capture_output=True,
      text=True,
      timeout=120,
      check=False,
  )


def test_initialize_single_process_is_idempotent():
  result = _run_start("idempotent")
  assert "SINGLE OK" in result.stdout, result.stderr


def test_taken_coordinator_port_is_a_clear_error_not_a_hang():
  import socket  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top

  # Another job's coordinator, on loopback.
  with socket.socket() as other:
    other.bind(("127.0.0.1", 0))
    other.listen()
    port = other.getsockname()[1]
    start = time.monotonic()
    result = _run_start("taken_port", str(port))
    elapsed = time.monotonic() - start
  assert result.returncode != 0, result.stdout
  assert (f"CoordinatorAddressError: coordinator port {port} on 127.0.0.1 is"
          " already in use") in result.stderr, result.stderr[-3000:]
  assert elapsed < 30, f"took {elapsed:.1f} s"


def test_initialize_after_jax_use_is_a_clear_error():
  result = _run_start("after_jax_use")
  assert result.returncode != 0
  assert "JAX was already used in this process" in result.stderr, result.stderr


# --- Multi-host start-up and meshes -------------------------------------------

@pytest.mark.multihost
def test_meshes_in_two_host_job(tmp_path):
  result = launch_utils.run_launched(
      [sys.executable, str(_HOST), "meshes", str(tmp_path)], 2, 2,
      timeout=120
  )
  launch_utils.assert_ok(result)
  for host in range(2):
    assert "MESH OK" in launch_utils.host_lines(result.stdout, host)


# --- FSDP train step: 2 hosts x 2 devices == 1 host x 4 devices --------------

@pytest.mark.multihost
def test_fsdp_train_step_matches_single_process(tmp_path):
  command = [sys.executable, str(_HOST), "train", str(tmp_path)]
  for num_hosts, devices_per_host in ((2, 2), (1, 4)):
    result = launch_utils.run_launched(
        command, num_hosts, devices_per_host, timeout=120
    )
    launch_utils.assert_ok(result)

  def load(name):
    with np.load(tmp_path / f"params_{name}.npz") as data:
      return dict(data)

  reference = load("1x4_host0")
  init_w1 = np.random.default_rng(0).normal(size=(8, 16)).astype(np.float32)
  # Not vacuous: training moved the parameters.
  assert not np.allclose(reference["w1"], init_w1 * 0.5)
  for host in range(2):
    got = load(f"2x2_host{host}")
    assert set(got) == set(reference)
    for name in reference:
      # Same math, same data; only the order of float32 sums in the
      # cross-device reductions (gloo vs in-process) may differ: rtol 1e-6.
      np.testing.assert_allclose(
          got[name],
          reference[name],
          rtol=1e-6,
          atol=0,
          err_msg=f"host {host}: {name}",
      )
