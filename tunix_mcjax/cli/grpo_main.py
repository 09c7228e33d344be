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

r"""Tunix's GRPO command line with a choice of cluster backend.

Takes exactly the arguments of the pinned Tunix release's
`python -m tunix.cli.grpo_main` (a base config, `override_config_file=...`,
`key=value` overrides, `T_*` environment variables, `--pathways_bns`) plus
`--backend`:

  python -m tunix_mcjax.cli.grpo_main base_config.yaml key=value ... \
      --backend=mcjax [--num_hosts=2 --devices_per_host=4]

Everything runs through Tunix's own `GrpoPipeline` (config, tokenizer,
dataset, models, optimizer, rewards, learner); this module only swaps what
differs between backends:

* `--backend=tunix` (default): the stock pipeline and the stock `RLCluster`,
  started by Tunix's own `main`. Nothing changes for a config the stock CLI
  can run. Two additions only take effect where the stock CLI cannot run:
  a `model_config.model_id` that names a local Hugging Face Qwen3 checkpoint
  directory is loaded from disk (the stock loader always asks the hub; see
  `checkpoints`); and on devices without physical coordinates (CPU, GPU),
  where Tunix's mesh allocator always fails, a config whose roles all share
  the actor's mesh gets that mesh over the first devices (see
  `_coordless_role_to_mesh`).
* `--backend=mcjax`: one process per host. Every role shares one global mesh
  (`runtime.global_mesh`, shaped like `actor_model_config.mesh`; fsdp, or
  hsdp across hosts, by --mesh: `rules.config_mesh`), the cluster
  is `tunix_mcjax.create_rl_cluster("mcjax", ...)`, and each global batch of
  Tunix's dataset (after its prompt-length filtering) is dealt to the hosts by
  `cluster.shard_dataset`, full batches only (see `data`), so every host runs
  the same number of steps with global batch / hosts prompts each. Configs
  mcjax cannot honour (`tunix_mcjax.rules`: disjoint role meshes, invalid
  LoRA settings, engines without a host-local mcjax version, batch sizes
  that do not divide over the hosts, the agentic mode's unsupported
  combinations: `rules.agentic_job`, ...) fail before any host starts.
  `training_mode=agentic_grpo` runs Tunix's agentic learner as `_run`
  builds it, on prompts dealt the same way.
  Without a detected cluster the command re-runs itself as --num_hosts local
  processes (`launch.relaunch_as_local_hosts`).

* `--backend=mcjax_da`: trainer hosts and rollout hosts apart, on Ray. The
  parent process maps the config's actor and rollout meshes onto hosts
  (`cli.disaggregated.plan`: trainer hosts = actor mesh size / devices per
  host, rollout hosts = rollout mesh size / devices per host, the reference
  with the actor), refusing what cannot map, then starts them through
  `da.launcher`: each trainer host runs this pipeline as a host of mcjax
  does, with the cluster `McJaxDaRLCluster`; each rollout host builds the
  actor's model from the same config (`cli.disaggregated.CliSource`).

The pipeline itself (Tunix's `GrpoPipeline` with our cluster, meshes and
dealing) is `cli.pipeline`; this module dispatches.

Under every backend, the literal first argument `base_config.yaml` means
Tunix's own `tunix/cli/base_config.yaml` (see `base_config`).

"""

from __future__ import annotations

from collections.abc import Sequence
import sys
from typing import Any, NoReturn

from absl import app
from absl import flags
from absl import logging

from tunix_mcjax import compilation_cache
from tunix_mcjax.cli import base_config
from tunix_mcjax.cli import cli_flags
from tunix_mcjax.cli import pipeline
from tunix_mcjax.cli.options import CliOptions
from tunix_mcjax.cli.options import ConfigError
from tunix_mcjax.compat import tunix_cli

# The flags are defined in cli_flags; `--help` lists them as this entry
# point's own, and callers read them here as options.
flags.adopt_module_key_flags(cli_flags)
options_from_flags = cli_flags.options_from_flags
# The pipeline's names, as callers have read them from here.
GrpoCliPipeline = pipeline.GrpoCliPipeline
StockStepRecorder = pipeline.StockStepRecorder
check_mcjax_config = pipeline.check_mcjax_config
check_tunix_seams = pipeline.check_tunix_seams
run_pipeline = pipeline.run_pipeline


# --- entry point --------------------------------------------------------------


def _fail(message: str) -> NoReturn:
  """One line, exit 2; a host of a running job exits at once (the others
  are stopped, not waited for: `launch.exit_host`)."""
  from tunix_mcjax import launch  # pylint: disable=g-import-not-at-top

  print(f"grpo_main: error: {message}", file=sys.stderr, flush=True)
  launch.exit_host(2)


def _claim_files(options: CliOptions, pipeline: Any = None) -> Any:
  """Locks the job's checkpoint root (from `pipeline`'s config) and
  --metrics_out (emptied: one run per file), or fails: another job uses
  one. Held until this process exits."""
  from tunix_mcjax import job_files  # pylint: disable=g-import-not-at-top

  training = {} if pipeline is None else (
      pipeline.config.get("rl_training_config") or {})
  try:
    return job_files.claim(
        program="grpo_main",
        checkpoint_dir=training.get("checkpoint_root_directory"),
        metrics_out=options.metrics_out,
        flag_names=("rl_training_config.checkpoint_root_directory",
                    "--metrics_out"))
  except job_files.InUseError as e:
    _fail(str(e))
  except OSError as e:
    _fail(f"cannot open {e.filename!r} ({e.strerror or e}).")


def _set_aside_later(options: CliOptions, pipeline: Any) -> None:
  """--resume_step N: the steps after N leave Orbax's sight (moved, not
  deleted), once every check passed and the root is this job's."""
  root = pipeline.checkpoint_root()
  if options.resume_step is None or root is None:
    return
  from tunix_mcjax import checkpointing  # pylint: disable=g-import-not-at-top

  try:
    moved = checkpointing.set_aside_later(root, options.resume_step)
  except checkpointing.CheckpointError as e:
    _fail(str(e))
  if moved:
    print(checkpointing.describe_set_aside(options.resume_step, moved),
          flush=True)


def _main_tunix(argv: list[str], options: CliOptions) -> None:
  if cli_flags.NUM_HOSTS.present or cli_flags.DEVICES_PER_HOST.present:
    logging.warning(
        "--num_hosts/--devices_per_host only apply to --backend=mcjax; the"
        " tunix backend runs as one process on this machine's devices."
    )
  # One run per file; only the process that starts the job clears it.
  _claim_files(options)
  _run_pipeline_or_fail(argv, options)


def _start_local_hosts(argv: list[str], options: CliOptions) -> int:
  """Checks the config here, then re-runs this command as the job's hosts
  on this machine (its accelerators, or simulated CPU hosts)."""
  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import launch
  from tunix_mcjax import platforms
  # pylint: enable=g-import-not-at-top

  machine = platforms.detect_machine()
  reason = platforms.simulation_reason(
      machine, simulate=cli_flags.SIMULATE.value,
      devices_per_host=cli_flags.DEVICES_PER_HOST.value)
  try:
    pipeline = GrpoCliPipeline(argv, options=options)
    if reason is None:
      plan = platforms.plan_local_hosts(
          machine, num_hosts=cli_flags.NUM_HOSTS.value, devices_per_host=None)
      check_mcjax_config(pipeline, num_hosts=plan.num_hosts,
                         devices_per_host=plan.devices_per_host,
                         sets_aside_later=True)
    else:
      num_hosts = cli_flags.NUM_HOSTS.value
      if num_hosts is None:
        num_hosts = cli_flags.LOCAL_SIM_NUM_HOSTS
      devices_per_host = check_mcjax_config(
          pipeline, num_hosts=num_hosts,
          devices_per_host=cli_flags.DEVICES_PER_HOST.value,
          sets_aside_later=True)
      plan = platforms.simulated(num_hosts, devices_per_host, reason=reason)
  except ValueError as e:  # ConfigError, or Tunix's own config errors.
    _fail(str(e))
  _claim_files(options, pipeline)
  _set_aside_later(options, pipeline)
  try:
    return launch.relaunch_as_local_hosts(
        sys.argv[1:],
        plan=plan,
        timeout_s=cli_flags.TIMEOUT.value,
        note=_start_note(pipeline, options, plan),
        host_main=lambda: _main_host(argv, options),
    )
  except launch.LaunchError as e:  # Refused before any host started.
    _fail(str(e))


def _start_note(pipeline: Any, options: CliOptions, plan: Any) -> str:
  """The start line's words: the backend, the engine Tunix's
  rollout_engine='vllm' means here, and with the 'vllm' engine the split of
  each GPU between vLLM and JAX (rollout_vllm_hbm_utilization, checked),
  whose JAX share this sets in the environment the hosts inherit."""
  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import device_memory
  from tunix_mcjax import rules
  # pylint: enable=g-import-not-at-top

  note = f"backend={options.backend}" + _tunix_vllm_words(
      pipeline, options, plan.platform)
  engine = rules.selected_engine(options.engine, pipeline.config,
                                 plan.platform)
  if engine != "vllm":
    return note
  # As the engine will read it: Tunix maps vllm_config.hbm_utilization
  # (default 0.4) onto it where rollout_engine='vllm'.
  hbm = getattr(pipeline.create_rollout_config(),
                "rollout_vllm_hbm_utilization", None)
  memory = device_memory.split(
      float(hbm or rules.vllm_keys.DEFAULT_HBM_UTILIZATION),
      flag="rollout_config.rollout_vllm_hbm_utilization")
  device_memory.apply(memory)
  return note + (", " + memory.describe() if plan.platform == "gpu" else "")


def _tunix_vllm_words(pipeline: Any, options: CliOptions,
                      platform: str) -> str:
  """", rollout_engine=vllm: ..." for the start line where the config says
  Tunix's rollout_engine='vllm' (the engine it means on `platform`)."""
  from tunix_mcjax import rules  # pylint: disable=g-import-not-at-top

  if (options.engine is not None
      or pipeline.config.get("rollout_engine") != rules.TUNIX_VLLM_ENGINE):
    return ""
  engine = rules.selected_engine(options.engine, pipeline.config, platform)
  return (f", rollout_engine=vllm: mcjax engine {engine!r} (the host-local"
          f" vLLM on {platform.upper()})")


def _start_disaggregated(argv: list[str], options: CliOptions) -> int:
  """mcjax_da: maps the config onto trainer and rollout hosts (refusing
  what cannot map, before anything starts), then runs them on Ray."""
  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.cli import disaggregated
  from tunix_mcjax.da import launcher
  from tunix_mcjax.da import ray_waits
  # pylint: enable=g-import-not-at-top

  if cli_flags.NUM_HOSTS.present:
    _fail("--num_hosts does not apply to --backend=mcjax_da: its hosts come"
          " from the actor and rollout meshes (or --trainer_hosts and"
          " --rollout_hosts).")
  from tunix_mcjax import platforms  # pylint: disable=g-import-not-at-top

  try:
    pipeline = GrpoCliPipeline(argv, options=options)
    # As the example's flags: the Ray cluster and the hosts' placement.
    placement = launcher.placement_from_flags(
        strategy=cli_flags.RAY_PLACEMENT_STRATEGY.value,
        bundle=cli_flags.RAY_BUNDLE.value,
        ray_address=cli_flags.RAY_ADDRESS.value)
    # Accelerators named in the bundle are a host's devices too.
    per_host = cli_flags.DEVICES_PER_HOST.value
    if per_host is None:
      per_host = next((int(a) for a in placement.accelerators().values()),
                      None)
    plan = disaggregated.plan(pipeline, devices_per_host=per_host)
    devices = launcher.host_devices(
        placement, hosts=plan.options.trainer_hosts + plan.options.rollout_hosts,
        devices_per_host=cli_flags.DEVICES_PER_HOST.value,
        simulate=cli_flags.SIMULATE.value,
        ray_address=cli_flags.RAY_ADDRESS.value,
        machine=platforms.detect_machine(),
        needed_per_host=plan.devices_per_host)
  except ValueError as e:  # ConfigError, or Tunix's own config errors.
    _fail(str(e))
  print(f"[grpo_main] mcjax_da: {plan.describe()}; hosts on"
        f" {devices.describe()}"
        f"{_tunix_vllm_words(pipeline, options, devices.platform)}",
        flush=True)
  _claim_files(options, pipeline)
  _set_aside_later(options, pipeline)
  try:
    launcher.run_local(
        disaggregated.CliTask(argv=tuple(argv), options=plan.options),
        rollout_source=plan.rollout_source(argv),
        devices_per_host=(devices.devices_per_host if devices.simulated
                          else None),
        timeout_s=cli_flags.TIMEOUT.value,
        ray_address=cli_flags.RAY_ADDRESS.value,
        placement=devices.placement)
  except RuntimeError as e:
    print(f"grpo_main: error: {e}", file=sys.stderr, flush=True)
    if isinstance(e, ray_waits.RayHeadLost):
      ray_waits.leave_without_ray(1)  # Ray's exit hook would wait for it.
    return 1
  return 0


def _main_host(argv: list[str], options: CliOptions) -> None:
  """One host of an mcjax job (local simulation or a real cluster)."""
  from tunix_mcjax import runtime  # pylint: disable=g-import-not-at-top

  info = runtime.initialize(runtime.RuntimeConfig.from_env(  # Before JAX.
      heartbeat_timeout_s=options.heartbeat_timeout_s))
  try:
    check_mcjax_config(
        GrpoCliPipeline(argv, options=options),
        num_hosts=info.process_count,
        devices_per_host=info.local_device_count,
    )
  except ConfigError as e:
    _fail(str(e))
  _run_pipeline_or_fail(argv, options)


def _run_pipeline_or_fail(argv: list[str], options: CliOptions) -> None:
  """`run_pipeline`; a bad input found while running (a reward function
  that raises or returns NaN, a checkpoint that fails to restore) is one
  line and exit 2, not a traceback."""
  from tunix_mcjax import checkpointing  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.recipes import validation  # pylint: disable=g-import-not-at-top

  from tunix_mcjax import host_failure  # pylint: disable=g-import-not-at-top

  try:
    run_pipeline(argv, options)
  except (validation.InputError, checkpointing.CheckpointError) as e:
    _fail(str(e))
  except Exception as e:  # pylint: disable=broad-exception-caught
    # Said, and this host ends at once (not at JAX's shutdown barrier).
    host_failure.end_host(e, program="grpo_main",
                          host_index=host_failure.host_index())


def main(argv: Sequence[str]) -> None:
  # Before anything compiles; the hosts this starts inherit the directory.
  compilation_cache.configure(cli_flags.COMPILATION_CACHE_DIR.value,
                              program="grpo_main")
  try:
    options = options_from_flags()
  except ConfigError as e:
    _fail(str(e))
  try:
    argv = base_config.resolve_base_config(argv)
  except ConfigError as e:
    _fail(str(e))
  if options.backend == "tunix":
    _main_tunix(argv, options)
    return
  if tunix_cli.pathways_bns():
    _fail("--pathways_bns: mcjax runs without Pathways (one process per host).")
  if options.backend == "mcjax_da":
    # This process is the driver: Ray runs the trainer and rollout hosts.
    sys.exit(_start_disaggregated(argv, options))
  from tunix_mcjax import runtime  # pylint: disable=g-import-not-at-top

  try:
    on_cluster = runtime.in_multi_controller_environment()
  except runtime.ClusterDetectionError as e:
    _fail(str(e))
  if on_cluster:
    _main_host(argv, options)
  else:
    sys.exit(_start_local_hosts(argv, options))


if __name__ == "__main__":
  app.run(main)
