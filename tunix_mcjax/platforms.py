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

"""Which devices the processes of a job on one machine get.

Without a detected cluster the entry points start the job's processes on
this machine. On a machine with GPUs or TPUs they run on them: one process
with every local device by default, or `--num_hosts N` processes that each
own 1/N of them, so the multi-controller code runs on one real node.
Simulated hosts (fake CPU devices, `JAX_PLATFORMS=cpu`) are what the user
asks for with `--simulate` or `--devices_per_host`, and what a machine with
no accelerator gets.

Detection reads the device files and the visibility variables, never JAX,
so the launcher can decide (and fork hosts) before any backend starts; tests
feed `plan_local_hosts` a `Machine` of their own. What ran on real hardware:
none of the GPU or TPU branches (see docs/design.md).

This module must not import jax.
"""

from __future__ import annotations

from collections.abc import Mapping
import dataclasses
import glob
import os
import re

from tunix_mcjax import runtime

# Per host: the GPU ordinals it owns (jax.distributed's local_device_ids).
ENV_LOCAL_DEVICE_IDS = runtime.ENV_LOCAL_DEVICE_IDS

PLATFORMS = ("cpu", "gpu", "tpu")
# libtpu's process grid for one process per chip, by chips on the machine.
_TPU_PROCESS_BOUNDS = {1: "1,1,1", 4: "2,2,1", 8: "2,4,1"}
# First port of libtpu's per-process servers (JAX's multi-process example).
TPU_BASE_PORT = 8476


@dataclasses.dataclass(frozen=True, kw_only=True)
class Machine:
  """The accelerators this machine offers this process.

  Attributes:
    gpus: GPUs visible here (after CUDA_VISIBLE_DEVICES).
    tpu_chips: TPU chips visible here (after TPU_VISIBLE_CHIPS).
    jax_platforms: the user's JAX_PLATFORMS, if set; it limits what counts.
  """

  gpus: int = 0
  tpu_chips: int = 0
  jax_platforms: str | None = None

  def __post_init__(self):
    for name in ("gpus", "tpu_chips"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"Machine.{name} must be an integer >= 0, got"
                         f" {value!r}.")

  def accelerator(self) -> tuple[str, int] | None:
    """("gpu" | "tpu", count) that a job here would use, or None."""
    allowed = None
    if self.jax_platforms:
      allowed = {p.strip().lower() for p in self.jax_platforms.split(",")}
      allowed |= {"gpu"} if allowed & {"cuda", "rocm"} else set()
    if self.tpu_chips and (allowed is None or "tpu" in allowed):
      return "tpu", self.tpu_chips
    if self.gpus and (allowed is None or "gpu" in allowed):
      return "gpu", self.gpus
    return None


def _visible(count: int, variable: str | None) -> int:
  """How many of `count` devices a visibility variable leaves."""
  if variable is None:
    return count
  items = [item.strip() for item in variable.split(",") if item.strip()]
  # CUDA stops at the first invalid ordinal ("-1" hides every GPU).
  visible = 0
  for item in items:
    if re.fullmatch(r"\d+", item) and int(item) >= count:
      break
    if item.startswith("-"):
      break
    visible += 1
  return min(visible, count)


def detect_machine(environ: Mapping[str, str] | None = None, *,
                   root: str = "/") -> Machine:
  """Reads this machine's GPUs and TPU chips from its device files.

  Args:
    environ: the environment (default: this process's).
    root: the file-system root to read (tests pass a directory of their own).
  """
  environ = os.environ if environ is None else environ

  def count(*patterns: str) -> int:
    for pattern in patterns:
      found = glob.glob(os.path.join(root, pattern))
      if found:
        return len(found)
    return 0

  gpus = count("proc/driver/nvidia/gpus/*", "dev/nvidia[0-9]*")
  # TPU v2-v5e expose /dev/accelN, v5p and later /dev/vfio/N.
  chips = count("dev/accel[0-9]*", "dev/vfio/[0-9]*")
  return Machine(
      gpus=_visible(gpus, environ.get("CUDA_VISIBLE_DEVICES")),
      tpu_chips=_visible(chips, environ.get("TPU_VISIBLE_CHIPS")),
      jax_platforms=environ.get("JAX_PLATFORMS") or None,
  )


@dataclasses.dataclass(frozen=True, kw_only=True)
class LocalPlan:
  """The processes of a job on this machine and the devices of each.

  Attributes:
    platform: "cpu" (simulated hosts of fake CPU devices), "gpu" or "tpu".
    num_hosts: processes.
    devices_per_host: devices each process owns.
    reason: why this platform, for the start line (e.g. "--simulate").
  """

  platform: str
  num_hosts: int
  devices_per_host: int
  reason: str = ""

  def __post_init__(self):
    if self.platform not in PLATFORMS:
      raise ValueError(f"platform must be one of {PLATFORMS}, got"
                       f" {self.platform!r}.")
    for name in ("num_hosts", "devices_per_host"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"--{name} must be an integer >= 1, got {value!r}.")

  @property
  def simulated(self) -> bool:
    return self.platform == "cpu"

  def describe(self) -> str:
    """E.g. "2 simulated hosts x 4 CPU devices", "3 processes x 1 GPU"."""
    n, k = self.num_hosts, self.devices_per_host
    if self.simulated:
      what = (f"{n} simulated host{'s' * (n != 1)} x {k} CPU"
              f" device{'s' * (k != 1)}")
    else:
      unit = "GPU" if self.platform == "gpu" else "TPU chip"
      what = (f"{n} process{'es' * (n != 1)} x {k} {unit}{'s' * (k != 1)}")
    return f"{what} ({self.reason})" if self.reason else what

  def host_env(self, host_id: int) -> dict[str, str]:
    """The variables that give host `host_id` its devices (on top of the
    job's coordinator, count and id)."""
    if not 0 <= host_id < self.num_hosts:
      raise ValueError(f"host_id {host_id} is not in [0, {self.num_hosts}).")
    k = self.devices_per_host
    if self.simulated:
      return {
          runtime.ENV_DEVICES_PER_HOST: str(k),
          "JAX_PLATFORMS": "cpu",
      }
    if self.num_hosts == 1:
      return {}  # Every local device, on the platform JAX finds.
    if self.platform == "gpu":
      ids = range(host_id * k, (host_id + 1) * k)
      return {ENV_LOCAL_DEVICE_IDS: ",".join(map(str, ids))}
    # One process per chip (plan_local_hosts refuses other splits).
    ports = [TPU_BASE_PORT + i for i in range(self.num_hosts)]
    return {
        "TPU_VISIBLE_CHIPS": str(host_id),
        "TPU_CHIPS_PER_PROCESS_BOUNDS": "1,1,1",
        "TPU_PROCESS_BOUNDS": _TPU_PROCESS_BOUNDS[self.num_hosts],
        "TPU_PROCESS_ADDRESSES": ",".join(f"localhost:{p}" for p in ports),
        "TPU_PROCESS_PORT": str(ports[host_id]),
        "CLOUD_TPU_TASK_ID": str(host_id),
    }


def simulated(num_hosts: int, devices_per_host: int, *,
              reason: str = "") -> LocalPlan:
  """Simulated hosts of fake CPU devices."""
  return LocalPlan(platform="cpu", num_hosts=num_hosts,
                   devices_per_host=devices_per_host, reason=reason)


def simulation_reason(machine: Machine, *, simulate: bool,
                      devices_per_host: int | None) -> str | None:
  """Why the job's hosts are simulated CPU hosts; None: they use `machine`'s
  accelerators."""
  if simulate:
    return "--simulate"
  if devices_per_host is not None:
    return "--devices_per_host given"
  if machine.accelerator() is not None:
    return None
  if machine.jax_platforms and (machine.gpus or machine.tpu_chips):
    return f"JAX_PLATFORMS={machine.jax_platforms}"
  return "no GPU or TPU found"


def plan_local_hosts(
    machine: Machine,
    *,
    num_hosts: int | None,
    devices_per_host: int | None,
    simulate: bool = False,
    default_num_hosts: int = 2,
    default_devices_per_host: int = 4,
) -> LocalPlan:
  """Decides the processes of a job on `machine`; ValueError names the fix.

  Args:
    machine: what this machine offers (`detect_machine()`).
    num_hosts: --num_hosts, None when not given (accelerators: 1).
    devices_per_host: --devices_per_host, None when not given; given, it
      asks for simulated hosts.
    simulate: --simulate.
    default_num_hosts: simulated hosts when --num_hosts is not given.
    default_devices_per_host: CPU devices of a simulated host when
      --devices_per_host is not given.
  """
  reason = simulation_reason(machine, simulate=simulate,
                             devices_per_host=devices_per_host)
  if reason is not None:
    return simulated(
        num_hosts if num_hosts is not None else default_num_hosts,
        devices_per_host if devices_per_host is not None
        else default_devices_per_host, reason=reason)
  platform, count = machine.accelerator()
  hosts = 1 if num_hosts is None else num_hosts
  if isinstance(hosts, bool) or not isinstance(hosts, int) or hosts < 1:
    raise ValueError(f"--num_hosts must be an integer >= 1, got {hosts!r}.")
  unit = "GPUs" if platform == "gpu" else "TPU chips"
  if count % hosts:
    divisors = [d for d in range(1, count + 1) if count % d == 0]
    raise ValueError(
        f"--num_hosts={hosts} does not divide this machine's {count} {unit}:"
        f" give one of {divisors}, or --simulate for simulated CPU hosts."
    )
  if platform == "tpu" and hosts > 1 and (
      hosts != count or count not in _TPU_PROCESS_BOUNDS):
    raise ValueError(
        f"--num_hosts={hosts} on {count} TPU chips: one process for all chips"
        " (--num_hosts=1) works; one per chip only on machines of"
        f" {sorted(_TPU_PROCESS_BOUNDS)[1:]} chips; or --simulate for"
        " simulated CPU hosts."
    )
  return LocalPlan(platform=platform, num_hosts=hosts,
                   devices_per_host=count // hosts,
                   reason=f"{count} {unit} found")
