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
import sys
import textwrap

import launch_utils
import numpy as np
import pytest

from tunix_mcjax import runtime

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


def _run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
  environ = launch_utils.launcher_env()
  for name in _LAUNCHER_VARS + _CLUSTER_VARS + ("XLA_FLAGS",):
    environ.pop(name, None)
  environ["JAX_PLATFORMS"] = "cpu"
  environ.update(env)
  return subprocess.run(
      [sys.executable, "-c", textwrap.dedent(code)],
      env=environ,
      capture_output=True,
      text=True,
      timeout=120,
      check=False,
  )


def test_initialize_single_process_is_idempotent():
  result = _run_python("""
      from tunix_mcjax import runtime
      info = runtime.initialize(runtime.RuntimeConfig(local_device_count=3))
      assert info == runtime.RuntimeInfo(
          process_index=0, process_count=1, local_device_count=3,
          global_device_count=3, source="single"), info
      assert runtime.initialize() is info
      try:
        runtime.initialize(runtime.RuntimeConfig(local_device_count=2))
      except RuntimeError as e:
        assert "cannot be re-run" in str(e), e
      else:
        raise AssertionError("a different config was accepted")
      print("SINGLE OK")
      """)
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
    result = _run_python(f"""
        from tunix_mcjax import runtime
        runtime.initialize(runtime.RuntimeConfig(
            coordinator_address="127.0.0.1:{port}", num_processes=2,
            process_id=0, initialization_timeout_s=100))
        """)
    elapsed = time.monotonic() - start
  assert result.returncode != 0, result.stdout
  assert (f"CoordinatorAddressError: coordinator port {port} on 127.0.0.1 is"
          " already in use") in result.stderr, result.stderr[-3000:]
  assert elapsed < 30, f"took {elapsed:.1f} s"


def test_initialize_after_jax_use_is_a_clear_error():
  result = _run_python("""
      import jax
      from tunix_mcjax import runtime
      jax.devices()
      runtime.initialize(runtime.RuntimeConfig(local_device_count=2))
      """)
  assert result.returncode != 0
  assert "JAX was already used in this process" in result.stderr, result.stderr


# --- Multi-host start-up and meshes -------------------------------------------

_HOST_PREAMBLE = """\
import json, os, pathlib, sys
import numpy as np
import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from tunix_mcjax import runtime
INFO = runtime.initialize()
OUT = pathlib.Path(sys.argv[1])
"""

_MESH_CHECKS = """\
me = INFO.process_index
assert INFO.source == "launcher" and INFO.process_count == 2, INFO
assert runtime.initialize() is INFO

def hosts(devices):
  return [d.process_index for d in np.asarray(devices).flat]

expected = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
gm = runtime.global_mesh()
assert gm.axis_names == ("fsdp", "tp") and gm.devices.shape == (4, 1)
assert list(gm.devices.flat) == expected
assert hosts(gm.devices) == [0, 0, 1, 1]

gm2 = runtime.global_mesh(tp=2)
assert gm2.devices.shape == (2, 2)
assert [hosts(row) for row in gm2.devices] == [[0, 0], [1, 1]]
for bad_tp in (3, 4):
  try:
    runtime.global_mesh(tp=bad_tp)
  except ValueError as e:
    assert "must divide the number of devices per host (2)" in str(e), e
  else:
    raise AssertionError(f"tp={bad_tp} was accepted")

# Hybrid sharding: one data row per host, fsdp within it.
hm = runtime.global_mesh(kind="hsdp")
assert hm.axis_names == ("data", "fsdp", "tp") and hm.devices.shape == (2, 2, 1)
assert list(hm.devices.flat) == expected
assert [set(hosts(block)) for block in hm.devices] == [{0}, {1}]
assert runtime.global_mesh(kind="hsdp", tp=2).devices.shape == (2, 1, 2)
assert runtime.local_mesh(axis_names=hm.axis_names).devices.shape == (1, 2, 1)

lm = runtime.local_mesh()
assert lm.devices.shape == (2, 1)
assert list(lm.devices.flat) == sorted(jax.local_devices(), key=lambda d: d.id)
assert hosts(lm.devices) == [me, me]
assert runtime.local_mesh(tp=2).devices.shape == (1, 2)

# The publication's host view: every host's block laid out like its local
# mesh, hosts on a leading axis.
from tunix_mcjax import publication
view1 = publication.host_view_mesh(lm)
assert view1.axis_names == ("host", "fsdp", "tp")
assert view1.devices.shape == (2, 2, 1)
assert [set(hosts(block)) for block in view1.devices] == [{0}, {1}]
assert list(view1.devices[me].flat) == list(lm.devices.flat)

# What the view is for: replicated over hosts, sharded within a host, so each
# host holds a full copy laid out over its own devices.
full = np.arange(8 * 3, dtype=np.float32).reshape(8, 3)
x = jax.make_array_from_callback(
    full.shape, NamedSharding(gm, P("fsdp")), lambda idx: full[idx])
per_host = jax.jit(
    lambda a: a, out_shardings=NamedSharding(view1, P("fsdp")))(x)
shards = sorted(per_host.addressable_shards, key=lambda s: s.index[0].start)
assert len(shards) == 2
np.testing.assert_array_equal(
    np.concatenate([np.asarray(s.data) for s in shards]), full)
print("MESH OK")
"""


@pytest.mark.multihost
def test_meshes_in_two_host_job(tmp_path):
  script = tmp_path / "mesh.py"
  script.write_text(_HOST_PREAMBLE + _MESH_CHECKS)
  result = launch_utils.run_launched(
      [sys.executable, str(script), str(tmp_path)], 2, 2, timeout=120
  )
  launch_utils.assert_ok(result)
  for host in range(2):
    assert "MESH OK" in launch_utils.host_lines(result.stdout, host)


# --- FSDP train step: 2 hosts x 2 devices == 1 host x 4 devices --------------

_TRAIN = """\
import functools
import jax.numpy as jnp
from jax.experimental import multihost_utils
import optax

STEPS, BATCH, D_IN, D_H, D_OUT = 3, 16, 8, 16, 4
rng = np.random.default_rng(0)
init = {
    "w1": rng.normal(size=(D_IN, D_H)).astype(np.float32) * 0.5,
    "b1": rng.normal(size=(D_H,)).astype(np.float32) * 0.1,
    "w2": rng.normal(size=(D_H, D_OUT)).astype(np.float32) * 0.5,
    "b2": np.zeros((D_OUT,), np.float32),
}
xs = rng.normal(size=(STEPS, BATCH, D_IN)).astype(np.float32)
ys = rng.normal(size=(STEPS, BATCH, D_OUT)).astype(np.float32)

mesh = runtime.global_mesh()
specs = {"w1": P("fsdp", None), "b1": P("fsdp"), "w2": P("fsdp", None),
         "b2": P()}
param_sh = {k: NamedSharding(mesh, s) for k, s in specs.items()}
batch_sh = NamedSharding(mesh, P("fsdp", None))
params = {k: jax.make_array_from_callback(v.shape, param_sh[k],
                                          lambda idx, v=v: v[idx])
          for k, v in init.items()}
opt = optax.adam(1e-2)
# opt.init alone would leave the step count on one device; give every state
# leaf an explicit global sharding (moments like their parameter, which the
# distinct shapes identify) and pin it in the step's in/out shardings.
spec_by_shape = {v.shape: specs[k] for k, v in init.items()}
assert len(spec_by_shape) == len(init)
state_sh = jax.tree.map(
    lambda leaf: NamedSharding(mesh, spec_by_shape.get(leaf.shape, P())),
    jax.eval_shape(opt.init, params))
opt_state = jax.jit(opt.init, out_shardings=state_sh)(params)

def loss_fn(p, x, y):
  h = jnp.tanh(x @ p["w1"] + p["b1"])
  return jnp.mean((h @ p["w2"] + p["b2"] - y) ** 2)

@functools.partial(
    jax.jit,
    in_shardings=(param_sh, state_sh, batch_sh, batch_sh),
    out_shardings=(param_sh, state_sh, NamedSharding(mesh, P())))
def train_step(p, s, x, y):
  loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
  updates, s = opt.update(grads, s, p)
  return optax.apply_updates(p, updates), s, loss

# Each host feeds only its own rows: host h owns rows [h*per, (h+1)*per).
per = BATCH // INFO.process_count
rows = slice(INFO.process_index * per, (INFO.process_index + 1) * per)
losses = []
for step in range(STEPS):
  x = jax.make_array_from_process_local_data(batch_sh, xs[step][rows],
                                             xs[step].shape)
  y = jax.make_array_from_process_local_data(batch_sh, ys[step][rows],
                                             ys[step].shape)
  params, opt_state, loss = train_step(params, opt_state, x, y)
  losses.append(float(loss))
final = {k: np.asarray(multihost_utils.process_allgather(v, tiled=True))
         for k, v in params.items()}
np.savez(OUT / f"params_{INFO.process_count}x{INFO.local_device_count}"
         f"_host{INFO.process_index}.npz", losses=np.array(losses), **final)
print("TRAIN OK")
"""


@pytest.mark.multihost
def test_fsdp_train_step_matches_single_process(tmp_path):
  script = tmp_path / "train.py"
  script.write_text(_HOST_PREAMBLE + _TRAIN)
  command = [sys.executable, str(script), str(tmp_path)]
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
