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

"""Whether mcjax (and mcjax_da's trainer hosts) can run a Tunix CLI config.

Reads what `tunix_mcjax.rules`'s rules need from a parsed
`grpo_main.GrpoCliPipeline`; uses no JAX device, so the process that starts
the job runs it before any host starts.
"""

from __future__ import annotations

from typing import Any

from tunix_mcjax import compat
from tunix_mcjax import rules
from tunix_mcjax.cli import data
from tunix_mcjax.cli.options import ConfigError
from tunix_mcjax.compat import tunix_cli


def _positive(name: str, value: Any) -> int | None:
  if value is None:
    return None
  if isinstance(value, bool) or not isinstance(value, int) or value < 1:
    raise ConfigError(f"{name} must be an integer >= 1, got {value!r}.")
  return value


def check_mcjax_config(
    pipeline: tunix_cli.GrpoPipeline,
    *,
    num_hosts: int,
    devices_per_host: int | None = None,
    sets_aside_later: bool = False,
) -> int:
  """Checks that mcjax can run `pipeline`'s config on this many hosts.

  The rules are `tunix_mcjax.rules`'s; this reads what they need from the
  pipeline. Uses no JAX device, so the parent process runs it before
  starting any host.

  Args:
    pipeline: The parsed Tunix config.
    num_hosts: Number of hosts (processes).
    devices_per_host: Devices per host; None derives it from the actor mesh.
    sets_aside_later: the caller (the launching process) sets the steps
      after --resume_step aside once every check passed
      (`checkpointing.set_aside_later`); False: they must be gone already.

  Returns:
    The devices per host.

  Raises:
    ConfigError: Listing everything mcjax cannot honour, with the fix.
  """
  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import engines
  from tunix_mcjax.registry import ENGINES
  # pylint: enable=g-import-not-at-top

  del engines  # Registers the built-in engines.
  _positive("--num_hosts", num_hosts)
  _positive("--devices_per_host", devices_per_host)
  unreadable: list[str] = []
  # Roles: all on the actor's mesh (colocated). Tunix gives every role with
  # its own `mesh` a separate device slice (disaggregated).
  try:
    owners = tunix_cli.resolve_mesh_owners(pipeline)
  except ValueError as e:
    owners = {}
    unreadable.append(f"role meshes: {e}")
  # Under mcjax_da the rollout's own mesh is the rollout hosts'
  # (`cli.disaggregated.plan`); every other role stays with the actor.
  da = pipeline.options.backend == "mcjax_da"
  separate = [
      (role.value, tunix_cli.role_model_key(pipeline, role))
      for role, owner in owners.items()
      if owner != compat.Role.ACTOR
      and not (da and role == compat.Role.ROLLOUT)
  ]
  try:
    shape, names = pipeline.parse_mesh_config("actor_model_config")
  except (ValueError, KeyError) as e:
    shape, names = None, None
    unreadable.append(f"actor_model_config.mesh: {e}")
  if shape is not None:
    # The trainer mesh (--mesh): a layout problem is check_job's to report.
    per_host, layout_problem = rules.mesh_layout(
        shape, num_hosts=num_hosts, devices_per_host=devices_per_host)
    if layout_problem is None:
      try:
        names = pipeline.mesh_choice(
            num_hosts=num_hosts, devices_per_host=per_host).axis_names
      except ConfigError as e:
        unreadable.append(str(e))
  check = rules.check_job(
      pipeline.config,
      num_hosts=num_hosts,
      devices_per_host=devices_per_host,
      engine_names=ENGINES.names(),
      separate_roles=separate,
      mesh_shape=shape,
      mesh_axis_names=names,
      engine=pipeline.options.engine,
      balance_by_length=pipeline.options.optimizations().balance_admission,
      backend=pipeline.options.backend,
      run_eval=pipeline.options.run_eval,
      resume_step=pipeline.options.resume_step,
      max_staleness=pipeline.options.staleness(
          off_policy_steps=pipeline.off_policy_steps),
  )
  problems = [*unreadable, *check.problems,
              *data.missing_local_inputs(pipeline.config),
              *_agentic_resume(pipeline.config)]
  engine_tp = pipeline.options.tp()
  if engine_tp != 1:
    # The engine the config's rollout_engine names (any vLLM name is not
    # native, whatever the platform), and the devices per host.
    tp_problem = rules.engine_tp(
        engine_tp, backend=pipeline.options.backend,
        engine=rules.selected_engine(pipeline.options.engine,
                                     pipeline.config),
        trainer="maxtext" if pipeline.maxtext else "tunix",
        devices_per_host=check.devices_per_host)
    if tp_problem is not None:
      problems.append(tp_problem.message)
  root = pipeline.checkpoint_root()
  resume_step = pipeline.options.resume_step
  if root is None and resume_step is not None:
    problems.append(
        f"--resume_step={resume_step} needs"
        " rl_training_config.checkpoint_root_directory (the directory"
        " holding that checkpoint).")
  if root is not None and not problems:
    from tunix_mcjax import checkpointing  # pylint: disable=g-import-not-at-top

    # An unwritable root, a corrupt checkpoint, a stray numbered directory,
    # a --resume_step that is no complete checkpoint, or a checkpoint of
    # another configuration: here, rather than inside every host (the hosts
    # check the model's shapes).
    try:
      checkpointing.check_writable(root)
      checkpointing.check_resume(root, pipeline.checkpoint_fingerprint(),
                                 step=resume_step,
                                 sets_aside_later=sets_aside_later)
    except checkpointing.CheckpointError as e:
      problems.append(str(e))
  if problems:
    raise ConfigError(
        f"this config cannot run with --backend={pipeline.options.backend}:"
        "\n  - "
        + "\n  - ".join(problems)
    )
  return check.devices_per_host


def _agentic_resume(config: Any) -> list[str]:
  """An agentic run that would resume from `./actor` unchecked: Tunix
  checkpoints there when checkpoint_root_directory is "" (what a null
  override of base_agentic_config.yaml's "/tmp/ckpts" becomes), and mcjax's
  checkpoint checks (configuration, completeness) only see a named root."""
  training = config.get("rl_training_config") or {}
  if (config.get("training_mode") != rules.AGENTIC_MODE
      or training.get("checkpoint_root_directory") != ""):
    return []
  from tunix_mcjax import checkpoint_files  # pylint: disable=g-import-not-at-top

  steps = checkpoint_files.orbax_steps("")
  if not steps:
    return []
  return [f"training_mode=agentic_grpo with checkpoint_root_directory=''"
          f" would resume from ./actor (steps {steps}; Tunix checkpoints"
          " there) without mcjax's checkpoint checks: set"
          " rl_training_config.checkpoint_root_directory to the directory"
          " holding actor/ to resume, or move ./actor away."]
