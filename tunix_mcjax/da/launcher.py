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

"""Starts and supervises a disaggregated job on Ray.

The job's driver (the example, on the machine where it is started) starts a
Ray session (`ray_local`: locally a head bound to 127.0.0.1), then:

1. R rollout hosts: Ray actors running `rollout_host.RolloutHost`, each a
   process with its own devices (the GPUs or TPU chips of its bundle, which
   Ray makes visible to it, on the platform JAX finds; or, for simulated
   hosts, `devices_per_host` fake CPU devices), named so that trainer hosts
   find them;
2. T trainer hosts: Ray actors that each run the entry point's task
   (`model_source.TrainerTask`, backend "mcjax_da") as one process of the
   trainers' multi-controller JAX program (`jax.distributed` over the
   trainer processes only). Trainer host 0 runs its coordinator: on
   loopback under a local head; on an existing cluster at its node's IP
   (as Ray knows it) and a port free there, which trainer host 0 picks;
3. waits for the trainers; the first failure of any actor ends the job. The
   rollout hosts then free their engines (bounded), every actor is killed,
   Ray is shut down, and a failure's error names the host.

Every host has one bundle of a Ray placement group (`Placement`: SPREAD by
default, so that hosts go to different nodes where the cluster has them and
all fit on one node locally). Each launch runs in a Ray namespace of its
own (`job_namespace`), where its rollout actors and placement group are
named, so that jobs sharing a cluster do not meet. On an existing cluster
(`ray_address`) the job kills its own actors and removes its placement
group (by their handles: nothing of another job's) when it ends, and leaves
the cluster running. Ray is the only cluster manager here: no process of
ours listens or schedules.
"""

from __future__ import annotations

from collections.abc import Mapping
import dataclasses
import math
import os
import sys
import time
from typing import Any

from tunix_mcjax import compilation_cache
from tunix_mcjax import device_memory
from tunix_mcjax import launch
from tunix_mcjax import platforms
from tunix_mcjax import runtime
from tunix_mcjax.da import model_source
from tunix_mcjax.da import options as options_lib
from tunix_mcjax.da import ray_local
from tunix_mcjax.da import ray_waits
from tunix_mcjax.da import rollout_host
from tunix_mcjax.da import trainer_host
from tunix_mcjax.rules import vllm_keys

# Restarts Ray grants one rollout host over the job.
ROLLOUT_RESTARTS = 3


def _log(message: str) -> None:
  print(f"[da] {message}", file=sys.stderr, flush=True)


def _host_env(devices: int | None) -> dict[str, str]:
  """A host actor's variables: `devices` fake CPU devices, or (None) the
  accelerators of its bundle on the platform JAX finds."""
  env = {
      "PYTHONUNBUFFERED": "1",
      # Not Ray's default nice 15, behind every busy process: all the work.
      "RAY_worker_niceness": "0",
      # Actors on an existing cluster do not inherit this process's.
      **compilation_cache.inherited(),
  }
  if devices is not None:
    # Ray actors do not inherit the driver's environment: the user's other
    # XLA flags travel explicitly.
    env["XLA_FLAGS"] = runtime.xla_flags_with_device_count(
        os.environ.get("XLA_FLAGS", ""), devices)
    env["JAX_PLATFORMS"] = "cpu"
  elif os.environ.get("XLA_FLAGS"):
    env["XLA_FLAGS"] = os.environ["XLA_FLAGS"]
  return env


def engine_memory_env(source: model_source.ModelSource) -> dict[str, str]:
  """A rollout host's JAX share of its GPU beside a vLLM engine's
  (`device_memory`; the rollout config's rollout_vllm_hbm_utilization)."""
  if source.engine != "vllm":
    return {}
  hbm = getattr(source.rollout_config(), "rollout_vllm_hbm_utilization",
                None) or vllm_keys.DEFAULT_HBM_UTILIZATION
  return device_memory.split(
      float(hbm), flag="rollout_vllm_hbm_utilization").environment()


_STRATEGIES = options_lib.PLACEMENT_STRATEGIES
# Bundle keys that Ray's actor options take as arguments of their own.
_NAMED_RESOURCES = {"CPU": "num_cpus", "GPU": "num_gpus", "memory": "memory"}
# Bundle resources that are a host's accelerators (its JAX devices).
_ACCELERATORS = ("GPU", "TPU")
# How long an existing cluster gets to confirm the job's actors are dead.
_KILL_WAIT_S = 30.0
# How long rollout hosts get to free their engines when the job ends.
_CLOSE_WAIT_S = 20.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Placement:
  """Where Ray puts the job's hosts: one placement-group bundle per host.

  Attributes:
    strategy: the placement group's strategy. "SPREAD" (default) puts hosts
      on different nodes as far as the cluster has them and all on one node
      locally; "STRICT_SPREAD" insists on a node per host; "PACK" and
      "STRICT_PACK" fill nodes first.
    bundle: the resources of one host's bundle, which its actor takes whole,
      e.g. {"CPU": 1} (default), {"CPU": 8, "GPU": 1} or {"CPU": 8, "TPU":
      4}. A local head offers CPU x hosts; other resources only as Ray
      detects them on this machine.
    timeout_s: how long to wait for the cluster to grant every bundle.
  """

  strategy: str = "SPREAD"
  bundle: Mapping[str, float] = dataclasses.field(
      default_factory=lambda: {"CPU": 1})
  timeout_s: float = 300.0

  def __post_init__(self):
    if self.strategy not in _STRATEGIES:
      raise ValueError(f"Placement strategy must be one of {_STRATEGIES}, got"
                       f" {self.strategy!r}.")
    if not isinstance(self.bundle, Mapping) or not all(
        isinstance(k, str) and k and isinstance(v, (int, float))
        and not isinstance(v, bool) and v >= 0
        for k, v in self.bundle.items()) or not any(
            v > 0 for v in self.bundle.values()):
      raise ValueError(
          "A host's bundle maps resource names to amounts >= 0, at least one"
          f" of them > 0 (e.g. CPU=1 or CPU=8,TPU=4), got {self.bundle!r}."
      )
    if isinstance(self.timeout_s, bool) or not isinstance(
        self.timeout_s, (int, float)) or not self.timeout_s > 0:
      raise ValueError(f"timeout_s must be a number > 0, got"
                       f" {self.timeout_s!r}.")

  def local_cpus(self, hosts: int) -> int:
    """CPUs a local head offers: every host's bundle."""
    return max(1, math.ceil(self.bundle.get("CPU", 0) * hosts))

  def accelerators(self) -> dict[str, float]:
    """The bundle's accelerators ({"GPU": 1}); empty for CPU-only hosts."""
    return {n: self.bundle[n] for n in _ACCELERATORS if self.bundle.get(n)}

  def actor_resources(self) -> dict[str, Any]:
    """Ray actor options that take exactly one bundle."""
    out: dict[str, Any] = {"num_cpus": 0}
    custom = {}
    for name, amount in self.bundle.items():
      if name in _NAMED_RESOURCES:
        out[_NAMED_RESOURCES[name]] = amount
      else:
        custom[name] = amount
    if custom:
      out["resources"] = custom
    return out


def placement_from_flags(*, strategy: str, bundle: list[str] | tuple[str, ...],
                         ray_address: str | None) -> Placement:
  """The hosts' `Placement` from --ray_placement_strategy and --ray_bundle,
  with --ray_address checked too: ValueError before anything starts."""
  placement = Placement(strategy=strategy, bundle=parse_bundle(bundle))
  if ray_address is not None:
    ray_local.RaySessionConfig(address=ray_address)  # Validates it.
  return placement


def parse_bundle(items: list[str] | tuple[str, ...]) -> dict[str, float]:
  """["CPU=1", "TPU=4"] (the example's --ray_bundle) -> {"CPU": 1, ...}."""
  bundle = {}
  for item in items:
    name, sep, amount = item.partition("=")
    try:
      value = float(amount)
    except ValueError:
      value = None
    if not sep or not name.strip() or value is None:
      raise ValueError(
          f"--ray_bundle takes NAME=AMOUNT items (e.g. CPU=1,TPU=4), got"
          f" {item!r}."
      )
    bundle[name.strip()] = int(value) if value.is_integer() else value
  return bundle


@dataclasses.dataclass(frozen=True, kw_only=True)
class HostDevices:
  """What each host of a disaggregated job runs on.

  Attributes:
    placement: the hosts' placement; its bundle names their accelerators.
    devices_per_host: devices of each host.
    simulated: fake CPU devices (`JAX_PLATFORMS=cpu`) rather than the
      accelerators of the bundle.
    reason: why, for the start line.
  """

  placement: Placement
  devices_per_host: int
  simulated: bool
  reason: str

  @property
  def platform(self) -> str:
    """The hosts' JAX platform: "cpu", "gpu" or "tpu"."""
    if self.simulated:
      return "cpu"
    return next(iter(self.placement.accelerators())).lower()

  def describe(self) -> str:
    if self.simulated:
      return f"{self.devices_per_host} CPU devices each ({self.reason})"
    name = next(iter(self.placement.accelerators()))
    unit = "GPU" if name == "GPU" else "TPU chip"
    n = self.devices_per_host
    return f"{n} {unit}{'s' * (n != 1)} each ({self.reason})"


def host_devices(
    placement: Placement,
    *,
    hosts: int,
    devices_per_host: int | None,
    simulate: bool,
    ray_address: str | None,
    machine: platforms.Machine,
    default_devices_per_host: int = 4,
    needed_per_host: int | None = None,
) -> HostDevices:
  """Decides the hosts' devices before anything starts; ValueError names
  the fix.

  Accelerators when the bundle names them (--ray_bundle CPU=8,GPU=1), or,
  under a local head, when this machine has them (split evenly over the
  hosts); simulated CPU hosts when asked for (--simulate, --devices_per_host)
  or when a local head finds no accelerator. On an existing cluster without
  either the choice is the user's: it is refused.

  Args:
    placement: from the flags (`placement_from_flags`).
    hosts: trainer and rollout hosts together.
    devices_per_host: --devices_per_host (None: not given).
    simulate: --simulate.
    ray_address: --ray_address (None: a local head).
    machine: this machine (`platforms.detect_machine()`).
    default_devices_per_host: a simulated host's CPU devices when
      --devices_per_host is not given.
    needed_per_host: the devices each host must have (the CLI's, from the
      meshes); None: whatever the bundle or an even split gives.
  """
  named = list(placement.accelerators())
  if len(named) > 1:
    raise ValueError(f"--ray_bundle names both GPU and TPU"
                     f" ({dict(placement.bundle)}): give a host one kind.")
  if named and (simulate or devices_per_host is not None):
    raise ValueError(
        f"--ray_bundle gives each host {named[0]}={placement.bundle[named[0]]}"
        " but --simulate/--devices_per_host ask for simulated CPU hosts:"
        " drop one of them."
    )
  if named:
    amount = placement.bundle[named[0]]
    if amount != int(amount):
      raise ValueError(f"--ray_bundle {named[0]}={amount}: a host needs whole"
                       " devices.")
    if needed_per_host is not None and int(amount) != needed_per_host:
      raise ValueError(
          f"--ray_bundle gives each host {named[0]}={int(amount)} but the"
          f" meshes need {needed_per_host} devices per host: make them agree."
      )
    return HostDevices(placement=placement, devices_per_host=int(amount),
                       simulated=False, reason="--ray_bundle")
  accelerator = machine.accelerator()
  if simulate or devices_per_host is not None or (
      accelerator is None and ray_address is None):
    reason = ("--simulate" if simulate else "--devices_per_host given"
              if devices_per_host is not None else "no GPU or TPU found")
    devices = (devices_per_host if devices_per_host is not None
               else needed_per_host or default_devices_per_host)
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
      raise ValueError(f"--devices_per_host must be an integer >= 1, got"
                       f" {devices!r}.")
    return HostDevices(placement=placement, devices_per_host=devices,
                       simulated=True, reason=reason)
  if ray_address is not None:
    raise ValueError(
        "on an existing Ray cluster say what each host runs on:"
        " --ray_bundle CPU=1,GPU=1 (or TPU=4) for accelerators, or"
        " --devices_per_host K (or --simulate) for simulated CPU hosts."
    )
  kind, count = accelerator
  name = kind.upper()
  per = needed_per_host or count // hosts
  if per * hosts > count or per < 1:
    raise ValueError(
        f"this machine has {count} {name}s, fewer than {hosts} hosts x"
        f" {max(per, 1)}: run fewer hosts, or --simulate for simulated CPU"
        " hosts."
    )
  bundle = {**placement.bundle, name: per}
  return HostDevices(placement=dataclasses.replace(placement, bundle=bundle),
                     devices_per_host=per, simulated=False,
                     reason=f"{count} {name}s found here")


def run_local(task: model_source.TrainerTask, *,
              rollout_source: model_source.ModelSource,
              devices_per_host: int | None, timeout_s: float,
              session: ray_local.RaySessionConfig | None = None,
              ray_address: str | None = None,
              placement: Placement | None = None) -> dict[str, Any]:
  """Runs a job (backend "mcjax_da") on Ray; returns host 0's summary.

  Args:
    task: what every trainer host runs (the entry point's
      `model_source.TrainerTask`; its `da_options()` give the host counts).
    rollout_source: what every rollout host builds its model and engine from
      (the entry point's `model_source.ModelSource`).
    devices_per_host: fake CPU devices of each host's process; None: the
      accelerators of each host's bundle (`host_devices`).
    timeout_s: the job's time limit from this call: the placement, the
      rollout hosts' start and the job all end within it.
    session: the Ray session (overrides ray_address); None: from ray_address.
    ray_address: None starts a Ray head on this machine, on loopback only,
      and stops it at the end; otherwise the address of an existing cluster
      ("auto", "HOST:PORT" of its GCS, "ray://HOST:PORT"), which the job only
      connects to and leaves running.
    placement: the hosts' placement group (default `Placement()`).

  Raises:
    RuntimeError: naming the host that failed (its traceback is printed by
      Ray above), the placement the cluster could not grant, or the timeout.
  """
  deadline = ray_waits.Deadline(timeout_s)
  da = task.da_options()
  placement = placement or Placement()
  total = da.trainer_hosts + da.rollout_hosts
  namespace = job_namespace(da, session)
  if session is None:
    session = (
        ray_local.RaySessionConfig(address=ray_address, namespace=namespace)
        if ray_address else ray_local.RaySessionConfig(
            num_cpus=placement.local_cpus(total), namespace=namespace))
  t0 = time.perf_counter()
  with ray_local.RaySession(session) as ray_session:
    watch = _head_watch()
    where = ("Ray up" if session.local
             else f"connected to the Ray cluster at {session.address}")
    devices = (f"{devices_per_host} CPU devices" if devices_per_host
               else f"their bundle's accelerators {dict(placement.bundle)}")
    _log(f"{where} in {time.perf_counter() - t0:.1f} s; starting"
         f" {da.rollout_hosts} rollout hosts and {da.trainer_hosts} trainer"
         f" hosts x {devices} (max_staleness {da.max_staleness})")
    _log(f"Ray namespace {namespace}: rollout actors"
         f" {options_lib.ROLLOUT_ACTOR_PREFIX}0..{da.rollout_hosts - 1},"
         f" placement group {options_lib.placement_group_name(namespace)}")
    actors = []
    group = None
    try:
      group = _place(total, placement, deadline=deadline,
                     name=options_lib.placement_group_name(namespace),
                     watch=watch)
      summaries = _run_hosts(task, da, namespace, group, placement, actors,
                             rollout_source=rollout_source,
                             devices_per_host=devices_per_host,
                             deadline=deadline, local=session.local,
                             watch=watch)
    except Exception as e:
      if (watch is not None and not isinstance(e, ray_waits.RayHeadLost)
          and watch.confirm_lost()):
        # An actor's death is often the first sign of a lost head.
        raise ray_waits.RayHeadLost(
            f"{watch.message()} (first seen as: {e})") from e
      raise
    finally:
      if watch is not None and watch.lost:
        # Every Ray call from here on would wait for the lost GCS.
        ray_session.abandon()
      elif group is not None:
        # Engines closed first (a killed vLLM leaves its shared memory). On
        # an existing cluster nothing else would stop the actors before the
        # driver disconnects; locally it shortens Ray's shutdown.
        _close_rollout_hosts(actors[:da.rollout_hosts])
        _release(actors, group, wait=not session.local)
  return summaries[0]


def _head_watch() -> ray_waits.HeadWatch | None:
  """A watch on the connected cluster's GCS (None for a Ray Client
  connection, where this process does not talk to the GCS)."""
  import ray  # pylint: disable=g-import-not-at-top
  from ray.util import client as ray_client  # pylint: disable=g-import-not-at-top

  if ray_client.ray.is_connected():
    return None
  return ray_waits.HeadWatch(ray.get_runtime_context().gcs_address)


def job_namespace(da: options_lib.DaOptions,
                  session: ray_local.RaySessionConfig | None = None) -> str:
  """The Ray namespace a launch of the job runs in (and names its actors in).

  `da.namespace` when given, else that of an explicit `session`, else a
  fresh one (`options.job_namespace()`): two jobs on one Ray cluster never
  share actor or placement-group names unless asked to.

  Raises:
    ValueError: `da.namespace` and the session's disagree.
  """
  if session is None:
    return da.namespace or options_lib.job_namespace()
  if da.namespace is not None and da.namespace != session.namespace:
    raise ValueError(
        f"the job's namespace {da.namespace!r} differs from its Ray"
        f" session's {session.namespace!r}: give one of them.")
  return options_lib.check_namespace(session.namespace)


def _place(hosts: int, placement: Placement, *, deadline: ray_waits.Deadline,
           name: str, watch: ray_waits.HeadWatch | None) -> Any:
  """The job's placement group (one bundle per host), once Ray granted it."""
  import ray  # pylint: disable=g-import-not-at-top

  try:
    ray.util.get_placement_group(name)  # In the job's namespace.
  except ValueError:
    pass  # Not taken.
  else:
    raise RuntimeError(
        f"Ray already has a placement group {name!r} in this namespace:"
        " another job runs in it. Leave the namespace unset (each job gets"
        " its own) or give this job another one.")
  group = ray.util.placement_group([dict(placement.bundle)] * hosts,
                                 strategy=placement.strategy, name=name)
  end = time.monotonic() + min(placement.timeout_s, deadline.left())
  ready = []
  while not ready and time.monotonic() < end:
    if watch is not None:
      watch.check()
    ready, _ = ray.wait([group.ready()], timeout=min(
        ray_waits.POLL_S, max(0.0, end - time.monotonic())))
  if not ready:
    free = ray.available_resources()
    ray.util.remove_placement_group(group)
    if not deadline.left():  # The job's --timeout ran out first.
      raise RuntimeError(deadline.message(
          f"Ray to place the job's {hosts} hosts") + f"; {free} free.")
    raise RuntimeError(
        f"Ray could not place the job's {hosts} hosts ({placement.strategy},"
        f" {dict(placement.bundle)} each) within {placement.timeout_s:.0f} s;"
        f" the cluster has {free} free. Add nodes or free resources, or ask"
        " for less per host (--ray_bundle) or another strategy"
        " (--ray_placement_strategy).")
  return group


def _run_hosts(task: model_source.TrainerTask, da: options_lib.DaOptions,
               namespace: str, group: Any, placement: Placement,
               actors: list[Any], *,
               rollout_source: model_source.ModelSource,
               devices_per_host: int | None, deadline: ray_waits.Deadline,
               local: bool, watch: ray_waits.HeadWatch | None) -> list[Any]:
  """Starts the hosts (appended to `actors` as they are made); waits."""
  import ray  # pylint: disable=g-import-not-at-top
  from ray.util import scheduling_strategies  # pylint: disable=g-import-not-at-top

  def actor_opts(bundle: int) -> dict[str, Any]:
    return dict(
        namespace=namespace,
        scheduling_strategy=(
            scheduling_strategies.PlacementGroupSchedulingStrategy(
                placement_group=group, placement_group_bundle_index=bundle)),
        **placement.actor_resources())

  rollout_cls = ray.remote(rollout_host.RolloutHost)
  rollouts = []
  for i in range(da.rollout_hosts):
    name = f"{options_lib.ROLLOUT_ACTOR_PREFIX}{i}"
    try:
      rollouts.append(rollout_cls.options(
          name=name,
          runtime_env={"env_vars": {
              **_host_env(devices_per_host),
              **(engine_memory_env(rollout_source)
                 if devices_per_host is None else {})}},
          # A crashed rollout host is restarted; the trainer host re-issues
          # its rows (`remote_engine.RolloutLink`).
          max_restarts=ROLLOUT_RESTARTS,
          **actor_opts(i),
      ).remote(rollout_source, i))
    except ray.exceptions.ActorAlreadyExistsError as e:
      raise RuntimeError(
          f"Ray namespace {namespace!r} already has an actor {name!r}:"
          " another job runs in it. Leave the namespace unset (each job gets"
          " its own) or give this job another one.") from e
    actors.append(rollouts[-1])
  infos = ray_waits.wait_all(
      [r.info.remote() for r in rollouts], deadline=deadline,
      what="rollout hosts to build their engines",
      names=[f"rollout host {i}" for i in range(da.rollout_hosts)],
      watch=watch)
  meshes = sorted({" x ".join(f"{k} {v}" for k, v in i["engine_mesh"].items())
                   for i in infos})
  _log(f"rollout hosts' engine mesh: {'; '.join(meshes)}")
  trainer_cls = ray.remote(trainer_host.TrainerHost)
  trainers = []
  for i in range(da.trainer_hosts):
    trainers.append(trainer_cls.options(
        # The devices before JAX starts; the job's variables follow below.
        runtime_env={"env_vars": _host_env(devices_per_host)},
        # A trainer host that dies ends the job (resume: checkpoints).
        max_restarts=0,
        **actor_opts(da.rollout_hosts + i),
    ).remote())
    actors.append(trainers[-1])
  names = [f"trainer host {i}" for i in range(da.trainer_hosts)]
  # Trainer host 0 runs the coordinator, so it names the address: only it
  # knows its node and which ports are free there.
  (coordinator,) = ray_waits.wait_all(
      [trainers[0].coordinator_address.remote(loopback=local)],
      deadline=deadline, what="the trainers' coordinator address",
      names=names[:1], watch=watch)
  _log(f"trainer coordinator at {coordinator} (trainer host 0)")
  for i, trainer in enumerate(trainers):
    # Runs before `run` (an actor's calls run in order).
    trainer.set_env.remote(launch.host_env(
        {"PYTHONUNBUFFERED": "1"}, coordinator=coordinator,
        num_hosts=da.trainer_hosts, host_id=i,
        devices_per_host=devices_per_host))
  return ray_waits.wait_all(
      [t.run.remote(task) for t in trainers], deadline=deadline,
      what="the trainer hosts to finish the job", names=names, watch=watch)


def _close_rollout_hosts(rollouts: list[Any]) -> None:
  closed = rollout_host.close_all(rollouts, timeout_s=_CLOSE_WAIT_S)
  _log(f"rollout hosts closed their engines: {closed} of {len(rollouts)}")


def _release(actors: list[Any], group: Any, *, wait: bool) -> None:
  """Kills the job's actors and removes its placement group.

  Args:
    actors: the job's actor handles.
    group: its placement group.
    wait: wait until Ray reports each actor dead (an existing cluster, which
      outlives the job).
  """
  import ray  # pylint: disable=g-import-not-at-top

  for actor in actors:
    try:
      ray.kill(actor, no_restart=True)
    except Exception:  # pylint: disable=broad-exception-caught
      pass  # Dead already.
  deadline = time.monotonic() + _KILL_WAIT_S
  for actor in actors if wait else ():
    # A call on a killed actor fails once Ray has it dead (ray.kill returns
    # before that; a call made meanwhile may still be answered).
    while True:
      try:
        ray.get(actor.__ray_ready__.remote(),
                timeout=max(0.1, deadline - time.monotonic()))
      except ray.exceptions.GetTimeoutError:
        pass
      except Exception:  # pylint: disable=broad-exception-caught
        break  # Dead.
      if time.monotonic() > deadline:
        _log(f"an actor of the job was not confirmed dead within"
             f" {_KILL_WAIT_S:.0f} s of ray.kill")
        break
      time.sleep(0.1)
  try:
    ray.util.remove_placement_group(group)
  except Exception:  # pylint: disable=broad-exception-caught
    pass  # Ray is going down with the local head anyway.
