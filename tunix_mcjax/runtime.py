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

"""Multi-controller JAX start-up and host-aware meshes.

Every process of a job calls `initialize()` once, before any JAX computation.
It picks one of three start-ups:

* "launcher": an explicit coordinator, normally the environment set by
  `python -m tunix_mcjax.launch` (N simulated hosts on this machine, fake CPU
  devices, gloo collectives, coordinator bound to loopback only).
* "cluster": a real cluster that JAX itself can detect (Cloud TPU pod, SLURM,
  Open MPI, Kubernetes, or an explicit `JAX_COORDINATOR_ADDRESS`); JAX's own
  auto-detection fills in the coordinator, process count and id.
* "single": none of the above; one process, no distributed service.

The host-aware meshes (`global_mesh`, `local_mesh`) live in
`device_meshes` and are re-exported here.

Importing this module does not import jax (the launcher reads the
environment contract below without starting JAX).
"""

from __future__ import annotations

from collections.abc import Mapping
import dataclasses
import errno
import inspect
import os
import socket
import sys
import threading
from typing import Any, Literal

from absl import logging

# The meshes live in device_meshes; callers read them here too.
# pylint: disable=unused-import,g-importing-member
from tunix_mcjax import cluster_addresses
from tunix_mcjax.cluster_addresses import CoordinatorAddressError  # Re-export.
from tunix_mcjax.device_meshes import HOST_AXIS
from tunix_mcjax.device_meshes import global_mesh
from tunix_mcjax.device_meshes import host_contiguous_devices
from tunix_mcjax.device_meshes import local_mesh
# pylint: enable=unused-import,g-importing-member
from tunix_mcjax.rules.values import is_int


Source = Literal["launcher", "cluster", "single"]

# How a local launcher (tunix_mcjax.launch) tells each host process its place.
ENV_COORDINATOR = "TUNIX_MCJAX_COORDINATOR"
ENV_NUM_HOSTS = "TUNIX_MCJAX_NUM_HOSTS"
ENV_HOST_ID = "TUNIX_MCJAX_HOST_ID"
ENV_DEVICES_PER_HOST = "TUNIX_MCJAX_DEVICES_PER_HOST"
# The GPU ordinals a process of a job on one GPU machine owns ("0,1").
ENV_LOCAL_DEVICE_IDS = "TUNIX_MCJAX_LOCAL_DEVICE_IDS"

CPU_COLLECTIVES = ("gloo", "mpi")




def _parse_host_port(address: str) -> tuple[str, int]:
  host, sep, port = address.rpartition(":")
  if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
    raise ValueError(
        f"coordinator_address={address!r} must look like 'host:port' with a"
        " port in 1..65535, e.g. '127.0.0.1:12345'."
    )
  return host, int(port)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RuntimeConfig:
  """How this process joins a multi-controller job.

  Attributes:
    coordinator_address: "host:port" of the coordinator (process 0). Set it
      together with `num_processes` and `process_id` for an explicit job;
      leave all three None to auto-detect a cluster or run single-process.
      The coordinator binds to exactly this address, so a loopback address
      keeps the service off the network.
    num_processes: Number of processes (hosts) in the job.
    process_id: This process's index in [0, num_processes).
    local_device_count: Number of fake CPU devices for this process (the
      launcher's --devices_per_host); None leaves the platform alone.
    local_device_ids: The GPUs this process owns when several processes share
      one machine's GPUs (jax.distributed's `local_device_ids`); None: all.
    cpu_collectives: Cross-process collectives on CPU: "gloo" or "mpi".
    initialization_timeout_s: Seconds to wait for every process to join.
    heartbeat_timeout_s: Seconds without a heartbeat after which JAX declares
      a peer dead and aborts the survivors; None keeps JAX's default (100 s in
      jax 0.10-0.12). Only accepted when the installed jax supports it.
  """

  coordinator_address: str | None = None
  num_processes: int | None = None
  process_id: int | None = None
  local_device_count: int | None = None
  local_device_ids: tuple[int, ...] | None = None
  cpu_collectives: str = "gloo"
  initialization_timeout_s: int = 300
  heartbeat_timeout_s: int | None = None

  def __post_init__(self):
    explicit = {
        "coordinator_address": self.coordinator_address,
        "num_processes": self.num_processes,
        "process_id": self.process_id,
    }
    given = [name for name, value in explicit.items() if value is not None]
    if given and len(given) != len(explicit):
      missing = sorted(set(explicit) - set(given))
      raise ValueError(
          f"RuntimeConfig got {', '.join(given)} but not {', '.join(missing)}:"
          " set all three for an explicit multi-process job, or none of them"
          " to auto-detect a cluster (or run as a single process)."
      )
    if self.coordinator_address is not None:
      if not isinstance(self.coordinator_address, str):
        raise ValueError(
            "coordinator_address must be a 'host:port' string, got"
            f" {self.coordinator_address!r}."
        )
      _parse_host_port(self.coordinator_address)
    if self.num_processes is not None and (
        not is_int(self.num_processes) or self.num_processes < 1
    ):
      raise ValueError(
          f"num_processes={self.num_processes!r} must be an integer >= 1."
      )
    if self.process_id is not None and (
        not is_int(self.process_id)
        or not 0 <= self.process_id < self.num_processes
    ):
      raise ValueError(
          f"process_id={self.process_id!r} must be an integer in"
          f" [0, num_processes={self.num_processes})."
      )
    if self.local_device_count is not None and (
        not is_int(self.local_device_count) or self.local_device_count < 1
    ):
      raise ValueError(
          f"local_device_count={self.local_device_count!r} must be an integer"
          " >= 1, or None to keep the platform's devices."
      )
    if self.local_device_ids is not None:
      ids = self.local_device_ids
      if (not isinstance(ids, tuple) or not ids
          or not all(is_int(i) and i >= 0 for i in ids)
          or len(set(ids)) != len(ids)):
        raise ValueError(
            f"local_device_ids={ids!r} must be a non-empty tuple of distinct"
            " device ordinals >= 0, or None for every local device."
        )
      if self.local_device_count is not None:
        raise ValueError(
            "local_device_ids (GPUs) and local_device_count (simulated CPU"
            " devices) exclude each other; set one."
        )
      if self.coordinator_address is None:
        raise ValueError(
            "local_device_ids needs an explicit job (coordinator_address,"
            " num_processes, process_id): jax.distributed takes it at start."
        )
    if self.cpu_collectives not in CPU_COLLECTIVES:
      raise ValueError(
          f"cpu_collectives={self.cpu_collectives!r} must be one of"
          f" {CPU_COLLECTIVES}."
      )
    if (
        not is_int(self.initialization_timeout_s)
        or self.initialization_timeout_s < 1
    ):
      raise ValueError(
          f"initialization_timeout_s={self.initialization_timeout_s!r} must be"
          " an integer >= 1 (seconds)."
      )
    if self.heartbeat_timeout_s is not None and (
        not is_int(self.heartbeat_timeout_s) or self.heartbeat_timeout_s < 1
    ):
      raise ValueError(
          f"heartbeat_timeout_s={self.heartbeat_timeout_s!r} must be an"
          " integer >= 1 (seconds), or None for JAX's default."
      )

  @classmethod
  def from_env(cls, environ: Mapping[str, str] | None = None, *,
               heartbeat_timeout_s: int | None = None) -> RuntimeConfig:
    """Reads the variables that `python -m tunix_mcjax.launch` sets.

    Args:
      environ: Variables to read; defaults to `os.environ`.
      heartbeat_timeout_s: the entry point's --heartbeat_timeout_s.

    Returns:
      An explicit job config when TUNIX_MCJAX_COORDINATOR is set, else a config
      that auto-detects (only TUNIX_MCJAX_DEVICES_PER_HOST is then honoured).

    Raises:
      ValueError: a variable is malformed, or the coordinator is set without
        the host count and id.
    """
    environ = os.environ if environ is None else environ

    def read_int(name: str) -> int | None:
      raw = environ.get(name)
      if raw is None or raw == "":
        return None
      try:
        return int(raw)
      except ValueError:
        raise ValueError(f"{name}={raw!r} must be an integer.") from None

    coordinator = environ.get(ENV_COORDINATOR) or None
    num_hosts = read_int(ENV_NUM_HOSTS)
    host_id = read_int(ENV_HOST_ID)
    if coordinator is not None and (num_hosts is None or host_id is None):
      missing = [
          name
          for name, value in (
              (ENV_NUM_HOSTS, num_hosts),
              (ENV_HOST_ID, host_id),
          )
          if value is None
      ]
      raise ValueError(
          f"{ENV_COORDINATOR} is set but {', '.join(missing)} is not; these"
          " are set together by `python -m tunix_mcjax.launch`. Run through"
          f" the launcher, or unset {ENV_COORDINATOR}."
      )
    if coordinator is None and (num_hosts is not None or host_id is not None):
      raise ValueError(
          f"{ENV_NUM_HOSTS}/{ENV_HOST_ID} are set without {ENV_COORDINATOR};"
          " run through `python -m tunix_mcjax.launch` or unset them."
      )
    raw_ids = environ.get(ENV_LOCAL_DEVICE_IDS) or None
    ids = None
    if raw_ids is not None:
      try:
        ids = tuple(int(i) for i in raw_ids.split(","))
      except ValueError:
        raise ValueError(f"{ENV_LOCAL_DEVICE_IDS}={raw_ids!r} must be"
                         " comma-separated integers, e.g. '0,1'.") from None
    return cls(
        coordinator_address=coordinator,
        num_processes=num_hosts,
        process_id=host_id,
        local_device_count=read_int(ENV_DEVICES_PER_HOST),
        local_device_ids=ids,
        heartbeat_timeout_s=heartbeat_timeout_s,
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class RuntimeInfo:
  """What `initialize()` set up, as seen by this process."""

  process_index: int
  process_count: int
  local_device_count: int
  global_device_count: int
  source: Source


_LOCK = threading.Lock()
_INFO: RuntimeInfo | None = None
_CONFIG: RuntimeConfig | None = None


def in_multi_controller_environment() -> bool:
  """Whether this process was started as one host of a job.

  True under the local launcher or on a cluster JAX detects (TPU pod, SLURM,
  an explicit JAX_COORDINATOR_ADDRESS, ...); False for a plain process, which
  entry points then re-run under the local launcher to simulate hosts.
  """
  return (
      RuntimeConfig.from_env().coordinator_address is not None
      or _detected_cluster() is not None
  )


def initialize(config: RuntimeConfig | None = None) -> RuntimeInfo:
  """Starts this process's part of the job; safe to call more than once.

  Must run before any JAX computation (or device query) in the process,
  because the distributed service and the CPU device count are fixed when the
  backend starts.

  Args:
    config: How to join; defaults to `RuntimeConfig.from_env()`.

  Returns:
    The runtime info; later calls return the same object.

  Raises:
    RuntimeError: JAX was used before the first call, a later call passes a
      different config, or the backend's device count differs from the one
      requested.
    ValueError: the installed jax lacks an option the config asks for.
  """
  import jax  # pylint: disable=g-import-not-at-top
  global _INFO, _CONFIG
  with _LOCK:
    if _INFO is not None:
      if config is not None and config != _CONFIG:
        raise RuntimeError(
            "tunix_mcjax.runtime.initialize() already ran with"
            f" {_CONFIG}; it cannot be re-run with {config}. Call it once per"
            " process (later calls without arguments return the same info)."
        )
      return _INFO
    if config is None:
      config = RuntimeConfig.from_env()

    if config.coordinator_address is not None:
      source: Source = "launcher"
    elif _detected_cluster() is not None:
      source = "cluster"
    else:
      source = "single"

    needs_fresh_backend = (
        source != "single" or config.local_device_count is not None
    )
    if needs_fresh_backend and backend_started():
      raise RuntimeError(
          "JAX was already used in this process (a computation ran or devices"
          " were listed) before tunix_mcjax.runtime.initialize(); call"
          " initialize() first, right after the imports."
      )

    optional = _optional_distributed_kwargs(config)
    if source != "single":
      jax.config.update(
          "jax_cpu_collectives_implementation", config.cpu_collectives
      )
    if config.local_device_count is not None:
      # Fake devices exist only on the CPU platform; without this a machine
      # with an accelerator would silently use it instead.
      jax.config.update("jax_platforms", "cpu")
      _set_cpu_device_count(config.local_device_count)

    if source == "launcher":
      if config.process_id == 0:
        # Process 0 runs the coordinator service. On a taken port it would
        # crash (SIGSEGV) and the peers would wait out the init timeout.
        check_coordinator_port(config.coordinator_address)
      jax.distributed.initialize(
          coordinator_address=config.coordinator_address,
          num_processes=config.num_processes,
          process_id=config.process_id,
          # Bind exactly the advertised address: JAX's default is every
          # interface, which exposes the job's service to the network.
          coordinator_bind_address=config.coordinator_address,
          initialization_timeout=config.initialization_timeout_s,
          **optional,
      )
    elif source == "cluster":
      # As JAX detects it, but the coordinator and gloo bind the cluster
      # address only (JAX's default: every interface).
      cluster_addresses.initialize(
          initialization_timeout_s=config.initialization_timeout_s,
          cpu_collectives=config.cpu_collectives, optional=optional)

    info = RuntimeInfo(
        process_index=jax.process_index(),
        process_count=jax.process_count(),
        local_device_count=jax.local_device_count(),
        global_device_count=jax.device_count(),
        source=source,
    )
    if (
        config.local_device_count is not None
        and info.local_device_count != config.local_device_count
    ):
      raise RuntimeError(
          f"asked for {config.local_device_count} CPU devices per process but"
          f" JAX started {info.local_device_count}; check that XLA_FLAGS and"
          " jax_num_cpu_devices are not overridden elsewhere."
      )
    logging.info(
        "tunix_mcjax runtime (%s): process %d of %d, %d local / %d global"
        " devices",
        source,
        info.process_index,
        info.process_count,
        info.local_device_count,
        info.global_device_count,
    )
    _INFO, _CONFIG = info, config
    return info


def check_coordinator_port(address: str) -> None:
  """Raises CoordinatorAddressError unless this process can bind `address`.

  Binds and closes a socket (as the coordinator's server would, with
  SO_REUSEADDR), so a port in use by another job is a clear error before
  JAX starts the service.

  Args:
    address: "host:port" the coordinator will bind.
  """
  host, port = _parse_host_port(address)
  host = host.strip("[]")
  try:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
  except socket.gaierror as e:
    raise CoordinatorAddressError(
        f"coordinator address {address!r}: cannot resolve {host!r} ({e}); use"
        " this machine's IP address or hostname."
    ) from e
  family, _, _, _, sockaddr = infos[0]
  with socket.socket(family, socket.SOCK_STREAM) as sock:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
      sock.bind(sockaddr)
    except OSError as e:
      if e.errno == errno.EADDRINUSE:
        raise CoordinatorAddressError(
            f"coordinator port {port} on {host} is already in use (another"
            " job, or a previous run still shutting down); process 0 runs the"
            " coordinator there. Pick a free port for the coordinator address"
            " (the local launcher picks one itself), or stop what holds it."
        ) from e
      if e.errno == errno.EADDRNOTAVAIL:
        raise CoordinatorAddressError(
            f"coordinator address {address!r} is not an address of this"
            " machine, but process 0 (this one) runs the coordinator: give"
            " process 0's own address, or start process 0 on that host."
        ) from e
      raise CoordinatorAddressError(
          f"cannot bind the coordinator address {address!r}: {e}"
      ) from e


def _optional_distributed_kwargs(config: RuntimeConfig) -> dict[str, Any]:
  """Keyword arguments that only some jax versions accept."""
  import jax  # pylint: disable=g-import-not-at-top
  kwargs = {}
  if config.local_device_ids is not None:
    kwargs["local_device_ids"] = list(config.local_device_ids)
  if config.heartbeat_timeout_s is not None:
    params = inspect.signature(jax.distributed.initialize).parameters
    if "heartbeat_timeout_seconds" not in params:
      raise ValueError(
          f"heartbeat_timeout_s is set but jax {jax.__version__}'s"
          " jax.distributed.initialize has no heartbeat_timeout_seconds;"
          " leave heartbeat_timeout_s=None."
      )
    kwargs["heartbeat_timeout_seconds"] = config.heartbeat_timeout_s
  return kwargs


def _set_cpu_device_count(count: int) -> None:
  import jax  # pylint: disable=g-import-not-at-top
  try:
    jax.config.update("jax_num_cpu_devices", count)
  except AttributeError:
    # Older jax has no such option; the XLA flag is read when the CPU backend
    # starts, which has not happened yet (checked by the caller).
    os.environ["XLA_FLAGS"] = xla_flags_with_device_count(
        os.environ.get("XLA_FLAGS", ""), count)


def xla_flags_with_device_count(xla_flags: str, devices: int) -> str:
  """`xla_flags` with its CPU device count set to `devices`; the user's other
  XLA flags are kept."""
  flags = [
      flag
      for flag in xla_flags.split()
      if not flag.startswith("--xla_force_host_platform_device_count=")
  ]
  flags.append(f"--xla_force_host_platform_device_count={devices}")
  return " ".join(flags)


# --- Cluster detection -------------------------------------------------------
# JAX's detectors and backend state are private (jax._src): they are reached
# only through compat.jax_runtime, imported where used (it imports no JAX).


def _detected_cluster() -> str | None:
  """Names the cluster environment JAX would auto-detect, or None."""
  if os.environ.get("JAX_COORDINATOR_ADDRESS"):
    missing = [name for name in ("JAX_NUM_PROCESSES", "JAX_PROCESS_ID")
               if not os.environ.get(name)]
    if missing and _scheduler_cluster() is None:
      # jax.distributed.initialize would fail inside the job with "Number
      # of processes must be defined".
      raise ClusterDetectionError(
          "JAX_COORDINATOR_ADDRESS="
          f"{os.environ['JAX_COORDINATOR_ADDRESS']} is set, but"
          f" {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'}"
          " not and no scheduler JAX detects is present: set"
          " JAX_NUM_PROCESSES and JAX_PROCESS_ID too (each process its own"
          " id), or unset JAX_COORDINATOR_ADDRESS to run on this machine.")
    return "JAX_COORDINATOR_ADDRESS"
  return _scheduler_cluster()


def _scheduler_cluster() -> str | None:
  """The scheduler or TPU environment JAX's detectors find, or None."""
  from tunix_mcjax.compat import jax_runtime  # pylint: disable=g-import-not-at-top

  detectors = jax_runtime.cluster_detectors()  # Without opt-in ones (mpi4py).
  if detectors is None:
    return None
  for name, is_env_present in detectors:
    try:
      present = is_env_present()
    except Exception as e:  # pylint: disable=broad-exception-caught
      hints = cluster_hints()
      if hints:
        # Falling back to a local simulation here would train the wrong job
        # (one CPU "cluster" per host) without a word.
        raise ClusterDetectionError(
            f"JAX's {name} detector failed ({type(e).__name__}:"
            f" {e}) on a machine that looks like a cluster"
            f" ({', '.join(hints)}); fix the cluster environment (e.g. the"
            " metadata server or the scheduler's variables), or set"
            " JAX_COORDINATOR_ADDRESS with the process count and id"
            " explicitly, or unset those variables to run locally."
        ) from e
      # A detector that cannot even probe on a plain machine (e.g. no
      # metadata server off cloud) means we are not on that cluster.
      logging.debug("cluster detector %s raised %r; not a cluster here",
                    name, e)
      present = False
    if present:
      return name
  return None


# Environment variables set by the schedulers and TPU VMs JAX detects.
_CLUSTER_HINT_VARS = (
    "SLURM_JOB_ID", "OMPI_COMM_WORLD_SIZE", "OMPI_MCA_orte_hnp_uri",
    "PMIX_RANK", "KUBERNETES_SERVICE_HOST", "TPU_WORKER_HOSTNAMES",
    "TPU_WORKER_ID", "CLOUD_TPU_TASK_ID", "MEGASCALE_COORDINATOR_ADDRESS",
)


class ClusterDetectionError(RuntimeError):
  """A cluster detector failed where a cluster seems to be present."""


def cluster_hints(environ: Mapping[str, str] | None = None) -> list[str]:
  """What makes this machine look like part of a cluster (may be empty)."""
  environ = os.environ if environ is None else environ
  hints = [name for name in _CLUSTER_HINT_VARS if environ.get(name)]
  from tunix_mcjax.compat import jax_runtime  # pylint: disable=g-import-not-at-top

  if jax_runtime.running_in_cloud_tpu_vm():
    hints.append("a Cloud TPU VM")
  return hints


def order_collectives(tree: Any) -> Any:
  """Waits for `tree` in a multi-process job on CPU; returns it.

  XLA:CPU runs independent programs concurrently once dispatched, so two
  cross-process programs in flight at once can pair their collectives
  differently on different processes (gloo then aborts on a size
  mismatch). Accelerators run a device's programs in dispatch order, so
  there the step does not wait.
  """
  import jax  # pylint: disable=g-import-not-at-top

  if jax.process_count() > 1 and jax.default_backend() == "cpu":
    jax.block_until_ready(tree)
  return tree


def backend_started() -> bool | None:
  """Whether this process has started a JAX backend; None if JAX cannot say.

  False also when jax is not imported (nothing can have started).
  """
  if "jax" not in sys.modules:
    return False
  from tunix_mcjax.compat import jax_runtime  # pylint: disable=g-import-not-at-top

  return jax_runtime.backends_are_initialized()
