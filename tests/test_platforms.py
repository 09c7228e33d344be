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

"""Which devices a job's processes on one machine get (tunix_mcjax/platforms.py).

Machines with GPUs and TPUs are described by device files under a directory
of the test's own (`detect_machine(root=...)`) or by a `Machine` directly;
nothing of JAX is mocked (the module does not import it). The environment
each process gets is `LocalPlan.host_env`, checked here and, through a real
launch, in tests/test_launch.py.
"""

import pathlib
import subprocess
import sys

import pytest

from tunix_mcjax import platforms
from tunix_mcjax import runtime

import launch_utils

# Fails if importing the modules named imports any of the packages named.
_LIGHT_IMPORTS = (pathlib.Path(__file__).resolve().parent / "support" /
                  "light_imports.py")

def _machine_root(tmp_path: pathlib.Path, *files: str) -> str:
  for name in files:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
  return str(tmp_path)


@pytest.mark.parametrize("files, environ, expected", [
    ((), {}, platforms.Machine()),
    (("dev/nvidia0", "dev/nvidia1", "dev/nvidiactl", "dev/nvidia-uvm"), {},
     platforms.Machine(gpus=2)),
    # The driver's list wins over /dev (containers may lack the nodes).
    ([f"proc/driver/nvidia/gpus/0000:{i:02x}:00.0/information"
      for i in range(8)], {}, platforms.Machine(gpus=8)),
    (("dev/nvidia0", "dev/nvidia1", "dev/nvidia2"),
     {"CUDA_VISIBLE_DEVICES": "2,0"}, platforms.Machine(gpus=2)),
    (("dev/nvidia0", "dev/nvidia1"), {"CUDA_VISIBLE_DEVICES": ""},
     platforms.Machine()),
    (("dev/nvidia0", "dev/nvidia1"), {"CUDA_VISIBLE_DEVICES": "-1"},
     platforms.Machine()),
    (("dev/nvidia0",), {"CUDA_VISIBLE_DEVICES": "GPU-3f1c"},
     platforms.Machine(gpus=1)),
    ([f"dev/accel{i}" for i in range(4)], {}, platforms.Machine(tpu_chips=4)),
    ([f"dev/vfio/{i}" for i in range(8)] + ["dev/vfio/vfio"], {},
     platforms.Machine(tpu_chips=8)),
    ([f"dev/accel{i}" for i in range(4)], {"TPU_VISIBLE_CHIPS": "1"},
     platforms.Machine(tpu_chips=1)),
    (("dev/nvidia0",), {"JAX_PLATFORMS": "cpu"},
     platforms.Machine(gpus=1, jax_platforms="cpu")),
])
def test_detect_machine_reads_device_files_and_visibility(
    tmp_path, files, environ, expected):
  root = _machine_root(tmp_path, *files)
  assert platforms.detect_machine(environ, root=root) == expected


def test_this_machine_has_no_accelerator():
  # What every test and `make demo` here rely on: simulated hosts.
  assert platforms.detect_machine().accelerator() is None


@pytest.mark.parametrize("machine, expected", [
    (platforms.Machine(), None),
    (platforms.Machine(gpus=8), ("gpu", 8)),
    (platforms.Machine(tpu_chips=4), ("tpu", 4)),
    (platforms.Machine(gpus=8, jax_platforms="cpu"), None),
    (platforms.Machine(gpus=8, jax_platforms="cuda"), ("gpu", 8)),
    (platforms.Machine(gpus=8, jax_platforms="tpu"), None),
])
def test_jax_platforms_limits_the_accelerator(machine, expected):
  assert machine.accelerator() == expected


def test_no_accelerator_simulates_with_the_defaults():
  plan = platforms.plan_local_hosts(platforms.Machine(), num_hosts=None,
                                    devices_per_host=None)
  assert (plan.platform, plan.num_hosts, plan.devices_per_host) == ("cpu", 2, 4)
  assert plan.describe() == (
      "2 simulated hosts x 4 CPU devices (no GPU or TPU found)")
  for host in range(2):
    assert plan.host_env(host) == {runtime.ENV_DEVICES_PER_HOST: "4",
                                   "JAX_PLATFORMS": "cpu"}


@pytest.mark.parametrize("kwargs, reason", [
    (dict(simulate=True), "--simulate"),
    (dict(devices_per_host=2), "--devices_per_host given"),
])
def test_simulated_hosts_on_a_gpu_machine_only_when_asked(kwargs, reason):
  args = dict(num_hosts=3, devices_per_host=None) | kwargs
  plan = platforms.plan_local_hosts(platforms.Machine(gpus=8), **args)
  assert plan.simulated and plan.num_hosts == 3
  assert plan.describe().endswith(f"({reason})")
  assert plan.host_env(0)["JAX_PLATFORMS"] == "cpu"


def test_jax_platforms_cpu_on_a_gpu_machine_is_named():
  plan = platforms.plan_local_hosts(
      platforms.Machine(gpus=2, jax_platforms="cpu"), num_hosts=None,
      devices_per_host=None)
  assert plan.describe() == (
      "2 simulated hosts x 4 CPU devices (JAX_PLATFORMS=cpu)")


def test_a_gpu_machine_runs_one_process_with_every_gpu_by_default():
  plan = platforms.plan_local_hosts(platforms.Machine(gpus=8), num_hosts=None,
                                    devices_per_host=None)
  assert (plan.platform, plan.num_hosts, plan.devices_per_host) == ("gpu", 1, 8)
  assert plan.describe() == "1 process x 8 GPUs (8 GPUs found)"
  assert plan.host_env(0) == {}  # No JAX_PLATFORMS, no device count.


def test_gpu_processes_each_own_their_share():
  plan = platforms.plan_local_hosts(platforms.Machine(gpus=8), num_hosts=4,
                                    devices_per_host=None)
  assert plan.describe() == "4 processes x 2 GPUs (8 GPUs found)"
  envs = [plan.host_env(h) for h in range(4)]
  assert envs == [{platforms.ENV_LOCAL_DEVICE_IDS: ids}
                  for ids in ("0,1", "2,3", "4,5", "6,7")]
  one = platforms.plan_local_hosts(platforms.Machine(gpus=3), num_hosts=3,
                                   devices_per_host=None)
  assert one.describe() == "3 processes x 1 GPU (3 GPUs found)"


def test_tpu_processes_one_per_chip():
  plan = platforms.plan_local_hosts(platforms.Machine(tpu_chips=4),
                                    num_hosts=4, devices_per_host=None)
  assert plan.describe() == "4 processes x 1 TPU chip (4 TPU chips found)"
  env = plan.host_env(2)
  assert env == {
      "TPU_VISIBLE_CHIPS": "2",
      "TPU_CHIPS_PER_PROCESS_BOUNDS": "1,1,1",
      "TPU_PROCESS_BOUNDS": "2,2,1",
      "TPU_PROCESS_ADDRESSES": ",".join(
          f"localhost:{platforms.TPU_BASE_PORT + i}" for i in range(4)),
      "TPU_PROCESS_PORT": str(platforms.TPU_BASE_PORT + 2),
      "CLOUD_TPU_TASK_ID": "2",
  }
  whole = platforms.plan_local_hosts(platforms.Machine(tpu_chips=8),
                                     num_hosts=None, devices_per_host=None)
  assert whole.describe() == "1 process x 8 TPU chips (8 TPU chips found)"
  assert whole.host_env(0) == {}


@pytest.mark.parametrize("machine, num_hosts, message", [
    (platforms.Machine(gpus=8), 3,
     r"--num_hosts=3 does not divide this machine's 8 GPUs: give one of"
     r" \[1, 2, 4, 8\], or --simulate"),
    (platforms.Machine(gpus=8), 0, "--num_hosts must be an integer >= 1"),
    (platforms.Machine(tpu_chips=8), 2,
     "--num_hosts=2 on 8 TPU chips: one process for all chips"),
    (platforms.Machine(), 0, "--num_hosts must be an integer >= 1"),
])
def test_plans_that_cannot_run_are_one_line_with_the_fix(
    machine, num_hosts, message):
  with pytest.raises(ValueError, match=message):
    platforms.plan_local_hosts(machine, num_hosts=num_hosts,
                               devices_per_host=None)


def test_importing_platforms_imports_no_jax():
  # The launcher decides before any backend starts (and may fork after).
  subprocess.run([sys.executable, str(_LIGHT_IMPORTS), "jax",
                  "tunix_mcjax.platforms"], check=True,
                 env=launch_utils.launcher_env())
