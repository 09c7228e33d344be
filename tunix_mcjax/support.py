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

"""What the mcjax backend can run: its support rules, each stated once.

The rules are checked in two places, from two views of the same job:

* `check_cluster` / `per_host_training_config`: `McJaxRLCluster` at
  construction, on the objects (actor, meshes, Tunix's `ClusterConfig`).
* `check_job`: the CLI, on Tunix's parsed GRPO config, before any host
  starts; it uses no JAX device.

Each rule is one function below that returns a `Problem` (message and the
exception type the cluster raises) or None; both views call the same
function, so a rule and its message live in one place. The cluster raises
the first problem; the CLI lists them all.

This module imports no JAX at module level: `check_job` runs in the process
that launches the hosts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
import copy
import dataclasses
import math
from typing import Any

# Batch knobs of Tunix's RLTrainingConfig that count the whole job's rows
# (as in a single-controller recipe); each host's learner gets 1/H of each.
GLOBAL_BATCH_KNOBS = (
    "mini_batch_size",
    "train_micro_batch_size",
    "rollout_micro_batch_size",
    "compute_logps_micro_batch_size",
)
# Tunix's name of its own engine; under mcjax it means the native engine.
VANILLA_ENGINE = "vanilla"
# Roles whose models mcjax does not run (GRPO needs none of them).
UNSUPPORTED_ROLES = ("critic", "reward")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Problem:
  """One thing mcjax cannot run.

  Attributes:
    message: What is wrong and how to fix it.
    error: The exception type the cluster raises for it.
  """

  message: str
  error: type[Exception] = ValueError

  def __post_init__(self):
    if not self.message:
      raise ValueError("A Problem needs a message.")
    if not (isinstance(self.error, type) and issubclass(self.error, Exception)):
      raise TypeError(f"error must be an exception type, got {self.error!r}")

  def raise_(self) -> None:
    raise self.error(self.message)


# --- the rules ----------------------------------------------------------------


def training_mode(mode: str) -> Problem | None:
  if mode == "grpo":
    return None
  return Problem(
      message=f"training_mode={mode!r}: mcjax runs standard GRPO"
      " (training_mode=grpo) only; agentic GRPO is not supported yet.",
      error=NotImplementedError,
  )


def rollout_engine(engine: str, engine_names: Sequence[str]) -> Problem | None:
  """Engines are chosen by registered name; Tunix's own engines do not run."""
  if engine == VANILLA_ENGINE or engine in engine_names:
    return None
  choices = ", ".join([VANILLA_ENGINE, *engine_names])
  return Problem(
      message=f"rollout_engine={engine!r}: mcjax generates with a host-local"
      f" engine ({choices}; '{VANILLA_ENGINE}' means the native engine); set"
      f" rollout_engine={VANILLA_ENGINE}.",
  )


def unsupported_role(name: str) -> Problem:
  """`name` (a role, or its config key) is set but mcjax cannot run it."""
  return Problem(
      message=f"{name} is set: mcjax supports GRPO's actor, reference and"
      " rollout roles only (critic and reward models are not supported yet);"
      " remove it.",
      error=NotImplementedError,
  )


def lora(
    lora_enabled: bool, *, cause: str = "the actor has LoRA adapters"
) -> Problem | None:
  if not lora_enabled:
    return None
  return Problem(
      message=f"{cause}: mcjax does not train or publish LoRA actors"
      " yet; remove the LoRA settings to train full weights, or use the"
      " 'tunix' backend.",
      error=NotImplementedError,
  )


def offload_to_cpu(offload: bool) -> Problem | None:
  if not offload:
    return None
  return Problem(
      message="offload_to_cpu is not supported by mcjax; set it to false.",
  )


def disjoint_role(role: str, *, cause: str, fix: str) -> Problem:
  """`role` runs on devices other than the actor's mesh (disaggregated)."""
  return Problem(
      message=f"{cause}; mcjax is colocated: every role shares the actor's"
      " global mesh (every host generates on its own devices; disjoint"
      f" trainer/rollout meshes are the disaggregated mode). {fix}",
  )


def data_sharding_axes(
    axes: Sequence[str], mesh_axes: Sequence[str], *, prefix: str = ""
) -> Problem | None:
  missing = [a for a in axes if a not in mesh_axes]
  if not missing:
    return None
  return Problem(
      message=f"{prefix}data_sharding_axis={list(axes)} names axes"
      f" {missing} missing from the actor mesh's axis names"
      f" {list(mesh_axes)}.",
  )


def global_batch(
    name: str, value: int | None, num_hosts: int
) -> Problem | None:
  """A global batch knob must split evenly over the hosts."""
  if value is None or value % num_hosts == 0:
    return None
  return Problem(
      message=f"{name}={value} is global and must divide over {num_hosts}"
      f" hosts; use a multiple of {num_hosts}.",
  )


def sequence_packing(
    max_seq_token_per_tpu: int | None, *, prefix: str = ""
) -> Problem | None:
  if max_seq_token_per_tpu is None:
    return None
  return Problem(
      message=f"{prefix}max_seq_token_per_tpu (sequence packing) is not"
      " supported by mcjax yet; unset it.",
      error=NotImplementedError,
  )


def mesh_layout(
    shape: Sequence[int], *, num_hosts: int, devices_per_host: int | None
) -> tuple[int | None, Problem | None]:
  """The actor mesh as `runtime.global_mesh` builds it: (fsdp, tp), by host.

  Args:
    shape: `actor_model_config.mesh.shape`.
    num_hosts: Hosts in the job.
    devices_per_host: Devices per host; None derives it from `shape`.

  Returns:
    (devices per host or None, the problem or None). A tp group may not span
    hosts, so tp must divide a host's devices.
  """
  shape = tuple(shape)
  total = math.prod(shape)
  where = f"actor_model_config.mesh.shape={shape}"
  if len(shape) != 2:
    return devices_per_host, Problem(
        message=f"{where}: mcjax needs a 2-axis (fsdp, tp) mesh, e.g."
        " shape='(8,1)' axis_names=\"('fsdp','tp')\".",
    )
  if devices_per_host is None:
    if total % num_hosts:
      return None, Problem(
          message=f"{where} has {total} devices, which do not divide over"
          f" {num_hosts} hosts.",
      )
    devices_per_host = total // num_hosts
  if total != num_hosts * devices_per_host:
    return devices_per_host, Problem(
        message=f"{where} has {total} devices but the job has {num_hosts}"
        f" hosts x {devices_per_host} devices ="
        f" {num_hosts * devices_per_host}; make them equal.",
    )
  if devices_per_host % shape[1]:
    return devices_per_host, Problem(
        message=f"{where}: tp={shape[1]} must divide the {devices_per_host}"
        " devices of a host (a tp group may not span hosts).",
    )
  return devices_per_host, None


# --- the cluster's view: objects ----------------------------------------------


def same_mesh(a: Any, b: Any) -> bool:
  """Whether two meshes place the same axes on the same devices."""
  return a is b or (
      a.axis_names == b.axis_names
      and a.devices.shape == b.devices.shape
      and [d.id for d in a.devices.flat] == [d.id for d in b.devices.flat]
  )


def check_cluster(
    *, actor: Any, critic: Any, reward: Any, cluster_config: Any
) -> None:
  """Raises for the first thing `McJaxRLCluster` cannot run.

  Args:
    actor: The actor model.
    critic: The critic model, or None.
    reward: The reward model, or None.
    cluster_config: Tunix's `ClusterConfig`.

  Raises:
    NotImplementedError, TypeError, ValueError: see the rules above.
  """
  # pylint: disable=g-import-not-at-top
  from flax import nnx
  from tunix.sft import utils as sft_utils
  from tunix_mcjax import compat
  from tunix_mcjax import runtime
  # pylint: enable=g-import-not-at-top

  cfg = cluster_config
  for name, model in (("critic", critic), ("reward", reward)):
    if model is not None:
      unsupported_role(f"a {name} model").raise_()
  if not isinstance(actor, nnx.Module):
    raise TypeError("mcjax needs the actor as an nnx.Module.")
  _raise_first(
      lora(sft_utils.is_lora_enabled(actor)),
      offload_to_cpu(cfg.offload_to_cpu),
  )
  r2m = cfg.role_to_mesh
  mesh = r2m.get(compat.Role.ACTOR)
  if mesh is None:
    raise ValueError("cluster_config.role_to_mesh needs an ACTOR mesh.")
  for role in (compat.Role.ROLLOUT, compat.Role.REFERENCE):
    if role in r2m and not same_mesh(r2m[role], mesh):
      disjoint_role(
          role.value,
          cause=f"cluster_config.role_to_mesh gives the {role.value} role a"
          " mesh other than the actor's",
          fix="Give every role the actor's mesh.",
      ).raise_()
  devices = [d.id for d in mesh.devices.flat]
  expected = [d.id for d in runtime.host_contiguous_devices()]
  if devices != expected:
    raise ValueError(
        "The actor mesh must span every device of every host, host by host"
        " (use tunix_mcjax.runtime.global_mesh()); got device ids"
        f" {devices[:8]}..., expected {expected[:8]}..."
    )
  tc = cfg.training_config
  _raise_first(
      data_sharding_axes(tuple(tc.data_sharding_axis), mesh.axis_names),
      sequence_packing(tc.max_seq_token_per_tpu),
  )


def per_host_training_config(tc: Any, num_hosts: int) -> Any:
  """A copy of Tunix's RLTrainingConfig with this host's batch knobs.

  Args:
    tc: The job's RLTrainingConfig (global batch knobs).
    num_hosts: Hosts in the job.

  Returns:
    The copy; each knob of GLOBAL_BATCH_KNOBS divided by `num_hosts`.

  Raises:
    ValueError: A knob does not divide over the hosts.
  """
  local = copy.copy(tc)
  for name in GLOBAL_BATCH_KNOBS:
    value = getattr(tc, name)
    _raise_first(global_batch(f"training_config.{name}", value, num_hosts))
    if value is not None:
      setattr(local, name, value // num_hosts)
  return local


def _raise_first(*problems: Problem | None) -> None:
  for problem in problems:
    if problem is not None:
      problem.raise_()


# --- the CLI's view: Tunix's parsed config, no devices ------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobCheck:
  """What `check_job` found.

  Attributes:
    devices_per_host: The devices per host (given, or derived from the actor
      mesh); None where it cannot be derived.
    problems: The messages of everything mcjax cannot run, in rule order.
  """

  devices_per_host: int | None
  problems: tuple[str, ...]


def check_job(
    config: Mapping[str, Any],
    *,
    num_hosts: int,
    devices_per_host: int | None,
    engine_names: Sequence[str],
    separate_roles: Iterable[tuple[str, str]] = (),
    mesh_shape: Sequence[int] | None = None,
    mesh_axis_names: Sequence[str] | None = None,
) -> JobCheck:
  """Checks Tunix's parsed GRPO config against every rule; uses no device.

  Args:
    config: Tunix's GRPO config (the pipeline's `config` mapping).
    num_hosts: Hosts in the job.
    devices_per_host: Devices per host; None derives it from the actor mesh.
    engine_names: The registered mcjax engines.
    separate_roles: (role, its model-config key) for each role Tunix would
      place on devices of its own.
    mesh_shape: `actor_model_config.mesh.shape`; None when it did not parse
      (the caller reports why).
    mesh_axis_names: `actor_model_config.mesh.axis_names`, likewise.

  Returns:
    The devices per host and the problems found.
  """
  training = config.get("rl_training_config") or {}
  actor_cfg = config.get("actor_model_config") or {}
  problems = [
      training_mode(config.get("training_mode", "grpo")),
      rollout_engine(
          config.get("rollout_engine") or VANILLA_ENGINE, engine_names
      ),
      offload_to_cpu(bool(config.get("offload_to_cpu"))),
      *(
          unsupported_role(f"{role}_model_config")
          for role in UNSUPPORTED_ROLES
          if f"{role}_model_config" in config
      ),
      lora(
          bool(actor_cfg.get("lora_config")),
          cause="actor_model_config.lora_config is set",
      ),
  ]
  for role, key in separate_roles:
    problems.append(
        disjoint_role(
            role,
            cause=f"{key}.mesh gives the {role} role its own devices, disjoint"
            " from the actor's (Tunix's disaggregated placement)",
            fix=f"Set {key}.mesh=null {key}.same_mesh_as=actor.",
        )
    )
  if mesh_shape is not None:
    devices_per_host, problem = mesh_layout(
        mesh_shape, num_hosts=num_hosts, devices_per_host=devices_per_host
    )
    problems.append(problem)
    if mesh_axis_names is not None:
      problems.append(
          data_sharding_axes(
              tuple(training.get("data_sharding_axis") or ("fsdp",)),
              tuple(mesh_axis_names),
              prefix="rl_training_config.",
          )
      )
  problems.append(global_batch("batch_size", config.get("batch_size", 1),
                               num_hosts))
  problems.extend(
      global_batch(f"rl_training_config.{name}", training.get(name), num_hosts)
      for name in GLOBAL_BATCH_KNOBS
  )
  problems.append(
      sequence_packing(
          training.get("max_seq_token_per_tpu"), prefix="rl_training_config."
      )
  )
  return JobCheck(
      devices_per_host=devices_per_host,
      problems=tuple(p.message for p in problems if p is not None),
  )
