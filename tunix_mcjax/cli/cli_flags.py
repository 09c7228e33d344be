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

"""The absl flags that `grpo_main` adds to Tunix's GRPO command line.

Defined on import, next to Tunix's own flags (`tunix.cli.grpo_main`), so only
the entry point imports this module; the rest of the CLI reads
`CliOptions` (`options_from_flags`). The flags examples/grpo_qwen3.py has
too are defined from the same definitions (`recipes.shared_flags`: the
launch and Ray flags, and `GrpoJobConfig`'s fields), with this CLI's
defaults where they differ.
"""

from __future__ import annotations

import dataclasses

from absl import flags

from tunix_mcjax.cli.options import BACKENDS
from tunix_mcjax.cli.options import CliOptions
from tunix_mcjax.cli.options import ConfigError
from tunix_mcjax.recipes import job_config
from tunix_mcjax.recipes import shared_flags

# Host processes of a local simulation when --num_hosts is not given.
LOCAL_SIM_NUM_HOSTS = shared_flags.LOCAL_SIM_NUM_HOSTS

_DEFAULTS = {f.name: f.default for f in dataclasses.fields(CliOptions)}


def _job_flag(name: str, note: str | None = None,
              order: tuple[str, ...] | None = None) -> flags.FlagHolder:
  """The example's flag of the job field `name` (`GrpoJobConfig`'s name,
  help and choices, in `order`), with this CLI's default (`CliOptions`')
  and `note`."""
  spec = shared_flags.field_spec(job_config.GrpoJobConfig, name,
                                 default=_DEFAULTS[name], order=order)
  return shared_flags.define(spec, note=note)


# The flags the example has too (shared_flags); what differs here is the
# default of some (CliOptions': from Tunix's config) and a note saying so.
BACKEND = _job_flag(
    "backend", "mcjax_da maps the actor's and the rollout's meshes onto"
    " hosts (docs/cli.md).",
    order=BACKENDS)  # The stock default first.
NUM_HOSTS = shared_flags.define(shared_flags.NUM_HOSTS,
                                note="--backend=mcjax only.")
DEVICES_PER_HOST = shared_flags.define(
    shared_flags.DEVICES_PER_HOST,
    note="Default: the size of actor_model_config.mesh divided by"
    " --num_hosts.")
SIMULATE = shared_flags.define(shared_flags.SIMULATE)
TIMEOUT = shared_flags.define(shared_flags.TIMEOUT)
METRICS_OUT = _job_flag("metrics_out")
TRANSFER_GUARD = _job_flag("transfer_guard")
ENGINE_TP = _job_flag(
    "engine_tp", "Default: 1; under mcjax_da the size of the rollout mesh's"
    " tp axis (rollout_model_config.mesh).")
REWARD_WORKERS = _job_flag("reward_workers")
REWARD_TIMEOUT_S = _job_flag("reward_timeout_s")
STEP_TIMEOUT_S = _job_flag("step_timeout_s")
HEARTBEAT_TIMEOUT_S = _job_flag("heartbeat_timeout_s")
PLACEMENT_INVARIANT = flags.DEFINE_bool(
    "placement_invariant_sampling",
    False,
    "tunix backend only, for comparisons with mcjax: sample with the mcjax"
    " engine rollout_engine selects (native or vLLM) and per-row keys, and"
    " drop a final partial batch. Off:"
    " the stock engine named by `rollout_engine`.",
)
ENGINE = _job_flag(
    "engine", "mcjax only. Default: `rollout_engine` in Tunix's meaning"
    " (vanilla = native; Tunix's vllm and sglang_jax are refused, naming"
    " the engine to pass here).")
PROFILE = _job_flag("profile")
ASYNC_METRICS = _job_flag("async_metrics")
FREEZE_GC = _job_flag("freeze_gc")
BALANCE_ADMISSION = _job_flag("balance_admission")
PUBLISH_IN_ONE_CALL = _job_flag("publish_in_one_call")
MESH = _job_flag(
    "mesh", "mcjax only; unset: auto. fsdp and hsdp lay out"
    " actor_model_config.mesh's (fsdp, tp); the widths are read from a local"
    " checkpoint's config.json. A 3-axis (data, fsdp, tp) actor mesh is"
    " hsdp.")
TRAINER_HOSTS = _job_flag(
    "trainer_hosts", "Default: the size of actor_model_config.mesh /"
    " --devices_per_host.")
ROLLOUT_HOSTS = _job_flag(
    "rollout_hosts", "Default: the size of rollout_model_config.mesh /"
    " --devices_per_host (needed when the rollout has no mesh of its own).")
MAX_STALENESS = _job_flag(
    "max_staleness", "Default: 1, and with training_mode=agentic_grpo"
    " the config's agentic_grpo_config.off_policy_steps (Tunix's bound).")
IS_CAP = _job_flag("is_cap")
RESUME_STEP = _job_flag(
    "resume_step", "Here the checkpoint directory is"
    " rl_training_config.checkpoint_root_directory.")
RAY_ADDRESS = shared_flags.define(shared_flags.RAY_ADDRESS)
RAY_PLACEMENT_STRATEGY = shared_flags.define(
    shared_flags.RAY_PLACEMENT_STRATEGY)
RAY_BUNDLE = shared_flags.define(shared_flags.RAY_BUNDLE)
PARAMS_OUT = flags.DEFINE_string(
    "params_out",
    None,
    "After training, host 0 writes the actor's final parameters to this .npz"
    " file (any backend; for comparing backends).",
)
COMPILATION_CACHE_DIR = shared_flags.define(
    shared_flags.COMPILATION_CACHE_DIR)
RUN_EVAL = flags.DEFINE_bool(
    "run_eval",
    False,
    "Evaluate on Tunix's test split (the batches after `train_fraction`,"
    " every `eval_every_n_steps`), under either backend; Tunix's own"
    " grpo_main discards that split. Off: stock behaviour.",
)


def options_from_flags() -> CliOptions:
  """This entry point's options from its parsed flags; ConfigError if bad."""
  da_only = [f"--{f.name}" for f in (MAX_STALENESS, IS_CAP, RAY_ADDRESS,
                                      RAY_PLACEMENT_STRATEGY, RAY_BUNDLE)
             if f.present]
  if da_only and BACKEND.value != "mcjax_da":
    raise ConfigError(f"{', '.join(da_only)} apply to --backend=mcjax_da"
                      " only.")
  from tunix_mcjax import launch  # pylint: disable=g-import-not-at-top

  try:  # Before the metrics file is claimed (emptied).
    launch.check_timeout(TIMEOUT.value)
  except launch.LaunchError as e:
    raise ConfigError(str(e)) from e
  return CliOptions(
      backend=BACKEND.value,
      metrics_out=METRICS_OUT.value,
      placement_invariant_sampling=PLACEMENT_INVARIANT.value,
      engine=ENGINE.value,
      profile=PROFILE.value,
      async_metrics=ASYNC_METRICS.value,
      freeze_gc=FREEZE_GC.value,
      balance_admission=BALANCE_ADMISSION.value,
      publish_in_one_call=PUBLISH_IN_ONE_CALL.value,
      run_eval=RUN_EVAL.value,
      mesh=MESH.value,
      reward_workers=REWARD_WORKERS.value,
      reward_timeout_s=REWARD_TIMEOUT_S.value,
      trainer_hosts=TRAINER_HOSTS.value,
      rollout_hosts=ROLLOUT_HOSTS.value,
      max_staleness=MAX_STALENESS.value,
      is_cap=IS_CAP.value,
      resume_step=RESUME_STEP.value,
      params_out=PARAMS_OUT.value,
      transfer_guard=TRANSFER_GUARD.value,
      step_timeout_s=STEP_TIMEOUT_S.value,
      heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S.value,
      engine_tp=ENGINE_TP.value,
  )
