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

r"""GRPO on a Qwen3-architecture model, stock Tunix or the mcjax backend.

On one machine (no cluster detected) the script re-runs itself as the job's
processes (`tunix_mcjax.launch.relaunch_as_local_hosts`; the 'tunix' backend
gets one process with every device). With GPUs or TPU chips here: one
process with all of them, or --num_hosts=N processes that each own 1/N.
Simulated hosts of fake CPU devices, with --simulate or --devices_per_host
(and on a machine without accelerators):

  python examples/grpo_qwen3.py --backend=mcjax --num_hosts=2 \
      --devices_per_host=4 --metrics_out=runs/demo/metrics.jsonl

The start line says which ("2 simulated hosts x 4 CPU devices", "2
processes x 4 GPUs"). On a real cluster (TPU VM pod, SLURM, ...) start one
process per host; the cluster is detected and --num_hosts/--devices_per_host
are ignored.

Trainer mesh: --mesh=auto (default) shards parameters over every device
(fsdp) when the model's widths divide, else uses hybrid sharding (hsdp:
data-parallel across hosts, fsdp within a host) and prints why; a mesh that
cannot shard the model is refused before any host starts (exit 2).

Host-side optimizations of the mcjax backend (LoCoJAX O1-O4): --profile=base
turns all four off, --profile=optimized turns all on; each switch
(--async_metrics, --freeze_gc, --balance_admission, --publish_in_one_call,
or their --no... forms) overrides the profile.
"""

from collections.abc import Sequence
import dataclasses
import json
import os
import sys
from typing import Any, NoReturn

from absl import app
from absl import flags
from absl import logging

from tunix_mcjax import compilation_cache
from tunix_mcjax.recipes import grpo_job
from tunix_mcjax.recipes import job_flags

# One flag per job field (its default the field's), and the launch and Ray
# flags the CLI shares: all made by recipes.job_flags from one definition.
_FLAGS = job_flags.define()


def _config() -> grpo_job.GrpoJobConfig:
  """The job the parsed flags ask for; ValueError if it cannot run."""
  return _FLAGS.config()


def _user_error(e: Exception) -> NoReturn:
  """A wrong flag or input: one line naming the fix, exit 2, no traceback.

  Found by one host of a running job (e.g. a reward call that timed out),
  the host exits at once: the others are stopped, not waited for.
  """
  from tunix_mcjax import launch  # pylint: disable=g-import-not-at-top

  print(f"grpo_qwen3.py: error: {e}", file=sys.stderr, flush=True)
  launch.exit_host(2)


def _check_before_start(cfg: grpo_job.GrpoJobConfig, *, num_hosts: int,
                        devices_per_host: int) -> None:
  """Raises ValueError for what needs no device, before any host starts
  (every backend; the hosts run the job's own checks again)."""
  # Bad batch sizes, engines, paths and meshes.
  grpo_job.check_job(cfg, num_hosts=num_hosts,
                     devices_per_host=devices_per_host)
  # Dataset rows, prompt lengths and the tokenizer.
  grpo_job.check_inputs(cfg)
  if cfg.checkpoint_dir is not None:
    from tunix_mcjax import checkpointing  # pylint: disable=g-import-not-at-top

    # An unwritable directory, a corrupt checkpoint, a stray numbered
    # directory, a --resume_step that is no complete checkpoint, or a
    # checkpoint of another configuration: refused here rather than inside
    # every host (or Ray actor).
    checkpointing.check_writable(cfg.checkpoint_dir)
    checkpointing.check_resume(cfg.checkpoint_dir,
                               cfg.checkpoint_fingerprint(),
                               step=cfg.resume_step, sets_aside_later=True)


def _set_aside_later(cfg: grpo_job.GrpoJobConfig) -> None:
  """--resume_step N: the steps after N leave Orbax's sight (moved, not
  deleted), once every check passed and the directory is this job's."""
  if cfg.resume_step is None:
    return
  from tunix_mcjax import checkpointing  # pylint: disable=g-import-not-at-top

  moved = checkpointing.set_aside_later(cfg.checkpoint_dir, cfg.resume_step)
  if moved:
    print(checkpointing.describe_set_aside(cfg.resume_step, moved),
          flush=True)


def _claim_files(cfg: grpo_job.GrpoJobConfig) -> Any:
  """Locks the checkpoint directory and the metrics file for this job (and
  empties the metrics file), or refuses: another job is using one."""
  from tunix_mcjax import job_files  # pylint: disable=g-import-not-at-top

  try:
    return job_files.claim(program="grpo_qwen3.py",
                           checkpoint_dir=cfg.checkpoint_dir,
                           metrics_out=cfg.metrics_out)
  except OSError as e:
    raise ValueError(f"cannot open {e.filename!r} ({e.strerror or e}).") from e


def main(argv: Sequence[str]) -> None:
  del argv
  if not flags.FLAGS["verbosity"].present:
    # Tunix logs every rollout string at INFO; keep the console to progress.
    logging.set_verbosity(logging.WARNING)
  # Before anything compiles; the hosts this starts inherit the directory.
  compilation_cache.configure(_FLAGS.compilation_cache_dir.value,
                              program="grpo_qwen3.py")
  from tunix_mcjax import launch  # pylint: disable=g-import-not-at-top

  try:
    cfg = _config()  # Validates before any host starts.
    # Also under mcjax_da, and before any claim empties the metrics file.
    launch.check_timeout(_FLAGS.timeout.value)
  except ValueError as e:
    _user_error(e)
  from tunix_mcjax import runtime  # pylint: disable=g-import-not-at-top

  if cfg.backend == "mcjax_da":
    _run_disaggregated(cfg)
    return
  try:
    on_cluster = runtime.in_multi_controller_environment()
  except runtime.ClusterDetectionError as e:
    _user_error(e)
  if not on_cluster:
    from tunix_mcjax import platforms  # pylint: disable=g-import-not-at-top
    try:
      plan = platforms.plan_local_hosts(
          platforms.detect_machine(), num_hosts=_FLAGS.num_hosts.value,
          devices_per_host=_FLAGS.devices_per_host.value,
          simulate=_FLAGS.simulate.value)
      if cfg.backend != "mcjax":
        # The tunix backend: one process with every host's devices.
        plan = dataclasses.replace(
            plan, num_hosts=1,
            devices_per_host=plan.devices_per_host * plan.num_hosts)
      _check_before_start(cfg, num_hosts=plan.num_hosts,
                          devices_per_host=plan.devices_per_host)
      claim = _claim_files(cfg)
      _set_aside_later(cfg)
    except ValueError as e:
      _user_error(e)
    try:
      status = launch.relaunch_as_local_hosts(
          sys.argv[1:],
          plan=plan,
          timeout_s=_FLAGS.timeout.value,
          note=_start_note(cfg, plan),
          host_main=lambda: _run_host(cfg),
      )
    except launch.LaunchError as e:  # Refused before any host started.
      _user_error(e)
    claim.release()
    sys.exit(status)
  _run_host(cfg)


def _start_note(cfg: grpo_job.GrpoJobConfig, plan: Any) -> str:
  """The start line's words about the job: its backend, and with vLLM on
  GPUs how each GPU is split between vLLM and JAX."""
  note = f"backend={cfg.backend}"
  if cfg.engine == "vllm" and plan.platform == "gpu":
    from tunix_mcjax import device_memory  # pylint: disable=g-import-not-at-top

    note += ", " + device_memory.split(cfg.engine_memory_fraction).describe()
  return note


def _run_host(cfg: grpo_job.GrpoJobConfig) -> None:
  """One host of the job (or the whole job, on a detected cluster)."""
  from tunix_mcjax import checkpointing  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import runtime  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.recipes import validation  # pylint: disable=g-import-not-at-top

  from tunix_mcjax import host_failure  # pylint: disable=g-import-not-at-top

  try:
    summary = grpo_job.run(cfg)
  except (validation.InputError, checkpointing.CheckpointError) as e:
    # Data, reward function or tokenizer; a checkpoint that does not fit the
    # job, or a failed save: the message names the fix.
    _user_error(e)
  except Exception as e:  # pylint: disable=broad-exception-caught
    # Said (a lost peer in one line), and this host ends at once instead of
    # waiting for the others at JAX's shutdown barrier.
    host_failure.end_host(e, program="grpo_qwen3.py",
                          host_index=host_failure.host_index())
  if os.environ.get(runtime.ENV_HOST_ID, "0") == "0":
    _print_summary(cfg, summary)


def _run_disaggregated(cfg: grpo_job.GrpoJobConfig) -> None:
  """--backend=mcjax_da: trainer and rollout hosts as Ray actors (local)."""
  from tunix_mcjax import platforms  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.da import launcher  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.da import ray_waits  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.recipes import da_job  # pylint: disable=g-import-not-at-top

  try:
    devices = launcher.host_devices(
        launcher.placement_from_flags(
            strategy=_FLAGS.ray_placement_strategy.value,
            bundle=_FLAGS.ray_bundle.value,
            ray_address=_FLAGS.ray_address.value),
        hosts=cfg.trainer_hosts + cfg.rollout_hosts,
        devices_per_host=_FLAGS.devices_per_host.value,
        simulate=_FLAGS.simulate.value, ray_address=_FLAGS.ray_address.value,
        machine=platforms.detect_machine())
    _check_before_start(cfg, num_hosts=cfg.trainer_hosts,
                        devices_per_host=devices.devices_per_host)
    _claim_files(cfg)  # Held until this driver exits.
    _set_aside_later(cfg)
  except ValueError as e:
    _user_error(e)
  print(f"[grpo_qwen3] mcjax_da hosts: {devices.describe()}", flush=True)
  try:
    summary = launcher.run_local(
        da_job.GrpoJobTask(job=cfg),
        rollout_source=da_job.GrpoJobSource(job=cfg),
        devices_per_host=(devices.devices_per_host if devices.simulated
                          else None),
        timeout_s=_FLAGS.timeout.value, ray_address=_FLAGS.ray_address.value,
        placement=devices.placement)
  except RuntimeError as e:
    print(f"grpo_qwen3.py: error: {e}", file=sys.stderr, flush=True)
    if isinstance(e, ray_waits.RayHeadLost):
      ray_waits.leave_without_ray(1)  # Ray's exit hook would wait for it.
    sys.exit(1)
  _print_summary(cfg, summary)


def _print_summary(cfg: grpo_job.GrpoJobConfig, summary) -> None:
  records = summary["records"]
  if not records:
    return
  first, last = records[0], records[-1]
  print(
      f"[grpo] mean reward: first step {first['reward_mean']:.3f} -> last"
      f" step {last['reward_mean']:.3f} ({len(records)} steps,"
      f" {summary['wall_s']:.1f} s)",
      flush=True,
  )
  print(
      json.dumps({
          "backend": cfg.backend,
          "num_hosts": summary["num_hosts"],
          "steps": len(records),
          "reward_first": first["reward_mean"],
          "reward_last": last["reward_mean"],
          "wall_s": round(summary["wall_s"], 1),
      }),
      flush=True,
  )


if __name__ == "__main__":
  app.run(main)
