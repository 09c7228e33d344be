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

"""The DA launcher's host devices and actor environment
(tunix_mcjax/da/launcher.py); machines with GPUs or TPUs are described by
`platforms.Machine`, Ray is not started."""

import pytest

from tunix_mcjax import platforms
from tunix_mcjax.da import launcher
from tunix_mcjax.da import options
from tunix_mcjax.da import ray_local
from tunix_mcjax.da import ray_waits

_CPU = platforms.Machine()
_GPUS = platforms.Machine(gpus=4)


def test_actor_env_keeps_the_users_xla_flags(monkeypatch):
  # Ray actors do not inherit the driver's environment, so the launcher
  # passes XLA_FLAGS itself; it used to drop every flag but the device count.
  monkeypatch.setenv(
      "XLA_FLAGS",
      "--xla_backend_optimization_level=0"
      " --xla_force_host_platform_device_count=8")
  env = launcher._host_env(2)  # pylint: disable=protected-access
  assert env["XLA_FLAGS"] == (
      "--xla_backend_optimization_level=0"
      " --xla_force_host_platform_device_count=2")


def test_accelerator_actors_keep_the_platform_jax_finds(monkeypatch):
  monkeypatch.setenv("XLA_FLAGS", "--xla_foo=1")
  env = launcher._host_env(None)  # pylint: disable=protected-access
  assert "JAX_PLATFORMS" not in env
  assert env["XLA_FLAGS"] == "--xla_foo=1"  # No fake device count.


def test_every_launch_runs_in_a_namespace_of_its_own():
  da = options.DaOptions()
  first, second = launcher.job_namespace(da), launcher.job_namespace(da)
  assert first != second
  assert first.startswith(options.NAMESPACE_PREFIX)
  options.check_namespace(first)


def test_a_given_namespace_is_used():
  da = options.DaOptions(namespace="mine")
  assert launcher.job_namespace(da) == "mine"
  session = ray_local.RaySessionConfig(namespace="theirs")
  # An explicit session's namespace, unless the options give one.
  assert launcher.job_namespace(options.DaOptions(), session) == "theirs"
  assert launcher.job_namespace(
      da, ray_local.RaySessionConfig(namespace="mine")) == "mine"
  with pytest.raises(ValueError, match="differs from its Ray session"):
    launcher.job_namespace(da, session)


def _devices(machine, bundle=("CPU=1",), **kwargs):
  args = dict(hosts=3, devices_per_host=None, simulate=False,
              ray_address=None, machine=machine) | kwargs
  placement = launcher.placement_from_flags(
      strategy="SPREAD", bundle=list(bundle), ray_address=None)
  return launcher.host_devices(placement, **args)


def test_a_local_head_on_gpus_gives_each_host_its_share():
  devices = _devices(platforms.Machine(gpus=8), hosts=4)
  assert not devices.simulated
  assert devices.devices_per_host == 2
  assert dict(devices.placement.bundle) == {"CPU": 1, "GPU": 2}
  assert devices.describe() == "2 GPUs each (8 GPUs found here)"
  # The CLI's meshes fix the count.
  fixed = _devices(platforms.Machine(gpus=8), hosts=3, needed_per_host=1)
  assert dict(fixed.placement.bundle) == {"CPU": 1, "GPU": 1}


def test_a_bundle_naming_accelerators_is_what_hosts_get():
  devices = _devices(_CPU, bundle=("CPU=8", "TPU=4"), ray_address="auto")
  assert not devices.simulated and devices.devices_per_host == 4
  assert devices.describe() == "4 TPU chips each (--ray_bundle)"


@pytest.mark.parametrize("machine, kwargs, reason, per_host", [
    (_CPU, {}, "no GPU or TPU found", 4),
    (_GPUS, dict(simulate=True), "--simulate", 4),
    (_GPUS, dict(devices_per_host=2), "--devices_per_host given", 2),
    (_CPU, dict(ray_address="auto", devices_per_host=1),
     "--devices_per_host given", 1),
])
def test_simulated_hosts(machine, kwargs, reason, per_host):
  devices = _devices(machine, **kwargs)
  assert devices.simulated and devices.devices_per_host == per_host
  assert devices.describe() == f"{per_host} CPU devices each ({reason})"
  assert devices.placement.bundle == {"CPU": 1}


@pytest.mark.parametrize("machine, bundle, kwargs, message", [
    (_CPU, ("CPU=1",), dict(ray_address="auto"),
     "on an existing Ray cluster say what each host runs on"),
    (_GPUS, ("CPU=1",), dict(hosts=5),
     "this machine has 4 GPUs, fewer than 5 hosts x 1"),
    (_CPU, ("GPU=1",), dict(devices_per_host=2),
     "but --simulate/--devices_per_host ask for simulated CPU hosts"),
    (_CPU, ("GPU=1", "TPU=1"), {}, "names both GPU and TPU"),
    (_CPU, ("GPU=0.5",), {}, "a host needs whole devices"),
    (_CPU, ("GPU=2",), dict(needed_per_host=4),
     "the meshes need 4 devices per host"),
])
def test_host_devices_that_cannot_work_are_refused(machine, bundle, kwargs,
                                                   message):
  with pytest.raises(ValueError, match=message):
    _devices(machine, bundle=bundle, **kwargs)


def test_a_namespace_in_use_is_refused_before_any_host_starts(monkeypatch):
  import ray  # pylint: disable=g-import-not-at-top

  # The job's placement group name is taken in its namespace: another job
  # runs there (Ray itself is not started).
  monkeypatch.setattr(ray.util, "get_placement_group", lambda name: object())
  monkeypatch.setattr(ray.util, "placement_group", None)  # Never reached.
  with pytest.raises(RuntimeError, match="another job runs in it"):
    launcher._place(  # pylint: disable=protected-access
        3, launcher.Placement(), deadline=ray_waits.Deadline(1.0),
        name="ns_hosts", watch=None)
