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

"""The two views of a job that apply every rule (see the package docstring).

* `check_cluster`: `McJaxRLCluster` at construction, on the objects; raises
  the first problem.
* `check_job`: the CLI, on Tunix's parsed GRPO config, before any host
  starts; uses no JAX device and lists every problem.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
import dataclasses
from typing import Any

from tunix_mcjax.rules.agentic import agentic_job
from tunix_mcjax.rules.agentic import learner_section
from tunix_mcjax.rules.batches import GLOBAL_BATCH_KNOBS
from tunix_mcjax.rules.batches import balanced_micro_batches
from tunix_mcjax.rules.batches import balanced_updates
from tunix_mcjax.rules.batches import batch_axes
from tunix_mcjax.rules.batches import checkpoint_interval
from tunix_mcjax.rules.batches import data_sharding_axes
from tunix_mcjax.rules.batches import global_batch
from tunix_mcjax.rules.engines import VANILLA_ENGINE
from tunix_mcjax.rules.engines import cli_model_source
from tunix_mcjax.rules.engines import selected_engine
from tunix_mcjax.rules.engines import rollout_engine
from tunix_mcjax.rules.learners import UNSUPPORTED_ROLES
from tunix_mcjax.rules.learners import disjoint_role
from tunix_mcjax.rules.learners import offload_to_cpu
from tunix_mcjax.rules.learners import sequence_packing
from tunix_mcjax.rules.learners import training_mode
from tunix_mcjax.rules.learners import unsupported_role
from tunix_mcjax.rules.lora import lora_engine
from tunix_mcjax.rules.lora import lora_settings
from tunix_mcjax.rules.meshes import host_blocks
from tunix_mcjax.rules.meshes import mesh_layout
from tunix_mcjax.rules.problem import Problem
from tunix_mcjax.rules.problem import raise_first
from tunix_mcjax.rules.vllm_keys import vllm_engine


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
    NotImplementedError, TypeError, ValueError: see the rule modules.
  """
  # pylint: disable=g-import-not-at-top
  from flax import nnx
  from tunix_mcjax import compat
  from tunix_mcjax import runtime
  # pylint: enable=g-import-not-at-top

  cfg = cluster_config
  for name, model in (("critic", critic), ("reward", reward)):
    if model is not None:
      unsupported_role(f"a {name} model").raise_()
  if not isinstance(actor, nnx.Module):
    raise TypeError("mcjax needs the actor as an nnx.Module.")
  raise_first(offload_to_cpu(cfg.offload_to_cpu))
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
  devices = sorted(d.id for d in mesh.devices.flat)
  expected = sorted(d.id for d in runtime.host_contiguous_devices())
  if devices != expected:
    raise ValueError(
        "The actor mesh must span every device of every host once (use"
        " tunix_mcjax.runtime.global_mesh()); got device ids"
        f" {devices[:8]}..., expected {expected[:8]}..."
    )
  tc = cfg.training_config
  raise_first(
      data_sharding_axes(tuple(tc.data_sharding_axis), mesh.axis_names),
      sequence_packing(tc.max_seq_token_per_tpu),
  )
  # Any device order whose host blocks line up with admission (a
  # topology-ordered mesh, a user's jax.make_mesh), not only ids in order.
  raise_first(host_blocks(
      mesh.devices, mesh.axis_names, batch_axes(tc.data_sharding_axis)))


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
    engine: str | None = None,
    balance_by_length: bool = False,
    backend: str = "mcjax",
    run_eval: bool = False,
    resume_step: int | None = None,
    max_staleness: int = 0,
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
    engine: The mcjax engine named explicitly (the CLI's --engine); None
      takes it from `rollout_engine` (Tunix's meaning of the name).
    balance_by_length: Whether O3 (balance_admission) is on.
    backend: The CLI's --backend (mcjax or mcjax_da).
    run_eval, resume_step: The CLI's --run_eval and --resume_step.
    max_staleness: The CLI's --max_staleness (mcjax_da).

  Returns:
    The devices per host and the problems found.
  """
  training = config.get("rl_training_config") or {}
  actor_cfg = config.get("actor_model_config") or {}
  mode = config.get("training_mode", "grpo")
  grpo = config.get(learner_section(config)) or {}
  problems = [
      training_mode(mode),
      *cli_model_source(config, engine=selected_engine(engine, config),
                        mesh_shape=mesh_shape, backend=backend),
      *agentic_job(config, backend=backend,
                   engine=selected_engine(engine, config),
                   run_eval=run_eval, resume_step=resume_step,
                   max_staleness=max_staleness, num_hosts=num_hosts),
      rollout_engine(
          config.get("rollout_engine") or VANILLA_ENGINE, engine_names
      ) if engine is None else (
          None if engine in engine_names else Problem(
              message=f"--engine={engine!r} is not an mcjax engine; use one"
              f" of {list(engine_names)}."
          )
      ),
      balanced_micro_batches(
          balance_by_length=balance_by_length,
          loss_agg_mode=grpo.get("loss_agg_mode", "sequence-mean-token-mean"),
          micro_batch_size=training.get("train_micro_batch_size"),
          mini_batch_size=training.get("mini_batch_size"),
          prefix="grpo_config.",
      ),
      balanced_updates(
          balance_by_length=balance_by_length,
          mini_batch_size=training.get("mini_batch_size"),
          batch_size=config.get("batch_size"),
          prefix="rl_training_config.",
      ),
      offload_to_cpu(bool(config.get("offload_to_cpu"))),
      *(
          unsupported_role(f"{role}_model_config")
          for role in UNSUPPORTED_ROLES
          if f"{role}_model_config" in config
      ),
      *_lora_job(actor_cfg.get("lora_config"), engine, config),
      vllm_engine(config.get("rollout_config") or {})
      if selected_engine(engine, config) == "vllm" else None,
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
  if training.get("checkpoint_root_directory"):
    problems.append(
        checkpoint_interval(
            # Orbax's default interval is 1 update.
            (training.get("checkpointing_options") or {}).get(
                "save_interval_steps", 1),
            batch_size=config.get("batch_size"),
            mini_batch_size=training.get("mini_batch_size"),
            num_iterations=grpo.get("num_iterations", 1),
            prefix="rl_training_config.",
        )
    )
  problems.append(
      sequence_packing(
          training.get("max_seq_token_per_tpu"),
          loss_agg_mode=grpo.get("loss_agg_mode", "sequence-mean-token-mean"),
          num_iterations=grpo.get("num_iterations", 1),
          prefix="rl_training_config.",
      )
  )
  return JobCheck(
      devices_per_host=devices_per_host,
      problems=tuple(p.message for p in problems if p is not None),
  )


def _lora_job(
    lora_config: Mapping[str, Any] | None,
    engine: str | None,
    config: Mapping[str, Any],
) -> list[Problem | None]:
  """The LoRA rules on Tunix's `actor_model_config.lora_config`."""
  if not lora_config:
    return []
  engine = selected_engine(engine, config)
  return [
      lora_settings(
          lora_config.get("rank"),
          lora_config.get("alpha"),
          lora_config.get("module_path"),
          prefix="actor_model_config.lora_config.",
      ),
      lora_engine(engine, True),
  ]
