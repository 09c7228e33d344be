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

# Flag defaults are the job config's own.
_DEFAULTS = grpo_job.GrpoJobConfig()

_BACKEND = flags.DEFINE_enum(
    "backend", _DEFAULTS.backend, list(grpo_job.BACKENDS), "RL cluster backend."
)
_ENGINE = flags.DEFINE_string(
    "engine", _DEFAULTS.engine,
    "Rollout engine name.",
)
_TRAINER = flags.DEFINE_enum(
    "trainer", _DEFAULTS.trainer, list(grpo_job.TRAINERS),
    "Trainer model: Tunix's Qwen3, or a MaxText Qwen3 (MaxText's Tunix"
    " adapter, MaxText's logical axis rules).",
)
_MAXTEXT_CONFIG = flags.DEFINE_string(
    "maxtext_config", _DEFAULTS.maxtext_config,
    "--trainer=maxtext: base MaxText YAML (default: MaxText's base.yml).",
)
_MAXTEXT_OVERRIDES = flags.DEFINE_list(
    "maxtext_overrides", None,
    "--trainer=maxtext: key=value MaxText settings replacing the tiny Qwen3"
    " defaults (tunix_mcjax.maxtext.models.TINY_QWEN3_OVERRIDES), e.g."
    " model_name=qwen3-0.6b,weight_dtype=bfloat16.",
)
_LOAD_PARAMETERS_PATH = flags.DEFINE_string(
    "load_parameters_path", _DEFAULTS.load_parameters_path,
    "--trainer=maxtext: a MaxText parameter checkpoint (default: random init"
    " from --seed).",
)
_SCAN_LAYERS = flags.DEFINE_boolean(
    "scan_layers", _DEFAULTS.scan_layers,
    "--trainer=maxtext: MaxText's scanned layer layout."
)
_NUM_HOSTS = flags.DEFINE_integer(
    "num_hosts", None,
    "Processes on this machine (no cluster detected): each owns 1/N of its"
    " GPUs or TPU chips (default 1), or N simulated hosts (default 2)."
)
_DEVICES_PER_HOST = flags.DEFINE_integer(
    "devices_per_host", None,
    "Fake CPU devices per simulated host (default 4); asks for simulated"
    " hosts."
)
_SIMULATE = flags.DEFINE_boolean(
    "simulate", False,
    "Simulated hosts of fake CPU devices even where GPUs or TPU chips are"
    " present (a machine without them always simulates)."
)
_STEPS = flags.DEFINE_integer(
    "steps", _DEFAULTS.steps,
    "GRPO steps (global batches).",
)
_SEED = flags.DEFINE_integer(
    "seed", _DEFAULTS.seed,
    "Seed for model, data and sampling.",
)
_BATCH_SIZE = flags.DEFINE_integer(
    "batch_size", _DEFAULTS.batch_size,
    "Global prompts per step (all hosts together)."
)
_NUM_GENERATIONS = flags.DEFINE_integer(
    "num_generations", _DEFAULTS.num_generations, "Samples per prompt (G)."
)
_MAX_NEW_TOKENS = flags.DEFINE_integer(
    "max_new_tokens", _DEFAULTS.max_new_tokens, "Completion length cap."
)
_MAX_PROMPT_LENGTH = flags.DEFINE_integer(
    "max_prompt_length", _DEFAULTS.max_prompt_length,
    "Prompt length (tokens) the sampler pads to."
)
_LEARNING_RATE = flags.DEFINE_float(
    "learning_rate", _DEFAULTS.learning_rate,
    "Adam step size.",
)
_BETA = flags.DEFINE_float(
    "beta", _DEFAULTS.beta,
    "KL coefficient (0 = no reference).",
)
_TEMPERATURE = flags.DEFINE_float(
    "temperature", _DEFAULTS.temperature,
    "Sampling temperature.",
)
_MODEL = flags.DEFINE_string(
    "model", _DEFAULTS.model,
    "'tiny' or a local Hugging Face Qwen3 checkpoint dir."
)
_PARAM_DTYPE = flags.DEFINE_enum(
    "param_dtype", _DEFAULTS.dtype, ["float32", "bfloat16"],
    "Parameters and activations (optimizer moments follow the parameters, as"
    " in Tunix); real checkpoints and accelerators use bfloat16.",
)
_DATASET = flags.DEFINE_string(
    "dataset", _DEFAULTS.dataset, "'toy' or 'gsm8k:PATH' (a GSM8K jsonl file)."
)
_METRICS_OUT = flags.DEFINE_string(
    "metrics_out", _DEFAULTS.metrics_out,
    "JSONL file of per-step metrics (host 0 writes)."
)
_DUMP_DIR = flags.DEFINE_string(
    "dump_dir", _DEFAULTS.dump_dir,
    "Write rollouts, rewards and final parameters here."
)
_PASSES = flags.DEFINE_integer(
    "passes", _DEFAULTS.passes,
    "Run the same --steps batches this many times in a row."
)
_PROFILE = flags.DEFINE_enum(
    "profile", _DEFAULTS.profile, ["base", "optimized"],
    "mcjax host-side optimizations: base = O1-O4 off, optimized = all on;"
    " unset = the backend's defaults (only one-call publication on).",
)
_ASYNC_METRICS = flags.DEFINE_boolean(
    "async_metrics", _DEFAULTS.async_metrics,
    "O1: export metrics on a background thread, off the step's barrier.",
)
_FREEZE_GC = flags.DEFINE_boolean(
    "freeze_gc", _DEFAULTS.freeze_gc,
    "O2: gc.freeze() after warm-up; no full gc.collect() per step.",
)
_BALANCE_ADMISSION = flags.DEFINE_boolean(
    "balance_admission", _DEFAULTS.balance_admission,
    "O3: deal prompts to hosts balanced by prompt length.",
)
_PUBLISH_IN_ONE_CALL = flags.DEFINE_boolean(
    "publish_in_one_call", _DEFAULTS.publish_in_one_call,
    "O4: publish all weights in one call (else one call per parameter).",
)
_TRACE_STEPS = flags.DEFINE_list(
    "trace_steps", [], "Steps (1-based) to record a JAX profiler trace of."
)
_TRACE_DIR = flags.DEFINE_string(
    "trace_dir", _DEFAULTS.trace_dir,
    "Where profiler traces go (one folder per host)."
)
_TRANSFER_GUARD = flags.DEFINE_enum(
    "transfer_guard", _DEFAULTS.transfer_guard, ["allow", "log", "disallow"],
    "mcjax: JAX's transfer guard over the backend's calls of every step"
    " after the first; 'disallow' raises on an implicit host<->device"
    " transfer (docs/design.md lists the deliberate ones).",
)
_REWARD_WORKERS = flags.DEFINE_integer(
    "reward_workers", _DEFAULTS.reward_workers,
    "Score the reward functions in a per-host pool of this many worker"
    " processes (functions must be picklable); 0: in-process.",
)
_MESH = flags.DEFINE_enum(
    "mesh", _DEFAULTS.mesh, ["auto", "fsdp", "hsdp"],
    "Trainer mesh: fsdp over every device; hsdp = data-parallel across hosts"
    " x fsdp within a host (parameters replicated across hosts); auto = fsdp"
    " when it divides the model's widths, else hsdp (printed).",
)
_LORA_RANK = flags.DEFINE_integer(
    "lora_rank", None,
    "Train a LoRA actor of this rank (qwix, as Tunix's lora_config); unset:"
    " full weights. The reference is the base model.",
)
_LORA_ALPHA = flags.DEFINE_float(
    "lora_alpha", None, "LoRA alpha (adapters scaled by alpha/rank); unset:"
    " the rank.",
)
_LORA_MODULES = flags.DEFINE_string(
    "lora_modules", _DEFAULTS.lora_modules,
    "Regex of the modules to adapt (qwix module_path, full match).",
)
_MINI_BATCH_SIZE = flags.DEFINE_integer(
    "mini_batch_size", _DEFAULTS.mini_batch_size,
    "Global prompts per optimizer update (default: --batch_size).",
)
_MICRO_BATCH_SIZE = flags.DEFINE_integer(
    "micro_batch_size", _DEFAULTS.micro_batch_size,
    "Global prompts per gradient-accumulation micro-batch (Tunix's"
    " train_micro_batch_size; default: --mini_batch_size).",
)
_LEARNER = flags.DEFINE_enum(
    "learner", _DEFAULTS.learner, ["grpo", "dapo", "drgrpo"],
    "Tunix learner: GRPOLearner, DAPOLearner (needs --beta=0) or"
    " DrGRPOLearner.",
)
_NUM_ITERATIONS = flags.DEFINE_integer(
    "num_iterations", _DEFAULTS.num_iterations,
    "GRPO's num_iterations (mu); > 1 takes old log-probs from the engine.",
)
_EVAL_EVERY = flags.DEFINE_integer(
    "eval_every", _DEFAULTS.eval_every,
    "Evaluate (Tunix's eval_ds) before every N-th optimizer update; default:"
    " no evaluation.",
)
_EVAL_BATCHES = flags.DEFINE_integer(
    "eval_batches", _DEFAULTS.eval_batches,
    "Held-out global batches of --batch_size prompts per evaluation (toy: a"
    " held-out draw; gsm8k:.../train.jsonl: the test.jsonl next to it).",
)
_SKIP_LONG_PROMPTS = flags.DEFINE_boolean(
    "skip_long_prompts", _DEFAULTS.skip_long_prompts,
    "Drop dataset rows whose prompt is longer than --max_prompt_length"
    " tokens (counted; the same rows on every host); default: an error"
    " naming the first such row.",
)
_CHECKPOINT_DIR = flags.DEFINE_string(
    "checkpoint_dir", _DEFAULTS.checkpoint_dir,
    "mcjax, mcjax_da: save checkpoints here (Orbax, all (trainer) hosts); a"
    " directory that holds one resumes from its latest complete checkpoint"
    " (printed).",
)
_CHECKPOINT_EVERY = flags.DEFINE_integer(
    "checkpoint_every", _DEFAULTS.checkpoint_every,
    "Save a checkpoint every N global steps (and after the last).",
)
_MAX_TO_KEEP = flags.DEFINE_integer(
    "max_to_keep", _DEFAULTS.max_to_keep,
    "Keep the N most recent checkpoints.",
)
_MAX_SEQ_TOKEN_PER_TPU = flags.DEFINE_integer(
    "max_seq_token_per_tpu", _DEFAULTS.max_seq_token_per_tpu,
    "mcjax: sequence packing (Tunix's RLTrainingConfig knob), tokens per"
    " packed row; needs a token-mean learner (--learner=dapo). Default: no"
    " packing.",
)
_TRAINER_HOSTS = flags.DEFINE_integer(
    "trainer_hosts", _DEFAULTS.trainer_hosts,
    "--backend=mcjax_da: trainer processes (one JAX program among them).",
)
_ROLLOUT_HOSTS = flags.DEFINE_integer(
    "rollout_hosts", _DEFAULTS.rollout_hosts,
    "--backend=mcjax_da: rollout processes, each with its own engine (a"
    " multiple of --trainer_hosts).",
)
_MAX_STALENESS = flags.DEFINE_integer(
    "max_staleness", _DEFAULTS.max_staleness,
    "--backend=mcjax_da: most policy versions a trained rollout may lag; 0 ="
    " synchronous, 1 = generate the next batch while training this one.",
)
_IS_CAP = flags.DEFINE_float(
    "is_cap", _DEFAULTS.is_cap,
    "--backend=mcjax_da: cap C of the truncated importance weight"
    " min(exp(logp_trainer - logp_sampler), C) per token (max_staleness >= 1).",
)
_TIMEOUT = flags.DEFINE_integer(
    "timeout", 3600, "Local simulation: stop all hosts after this many s."
)
_COMPILATION_CACHE_DIR = compilation_cache.define_flag()
_RAY_ADDRESS = flags.DEFINE_string(
    "ray_address", None,
    "--backend=mcjax_da: an existing Ray cluster to run on (HOST:PORT of its"
    " GCS, ray://HOST:PORT, or 'auto' = RAY_ADDRESS or the cluster `ray"
    " start` made here); the job kills only its own actors and leaves the"
    " cluster running. Default: a Ray head of the job's own on 127.0.0.1"
    " (RAY_ADDRESS alone does not change that).",
)
_RAY_PLACEMENT_STRATEGY = flags.DEFINE_enum(
    "ray_placement_strategy", "SPREAD",
    ["SPREAD", "STRICT_SPREAD", "PACK", "STRICT_PACK"],
    "--backend=mcjax_da: Ray placement-group strategy over the hosts' bundles"
    " (one per host).",
)
_RAY_BUNDLE = flags.DEFINE_list(
    "ray_bundle", ["CPU=1"],
    "--backend=mcjax_da: Ray resources of each host's bundle, NAME=AMOUNT"
    " items (e.g. CPU=8,TPU=4 or CPU=8,GPU=1).",
)


def _config() -> grpo_job.GrpoJobConfig:
  return grpo_job.GrpoJobConfig(
      backend=_BACKEND.value,
      trainer=_TRAINER.value,
      maxtext_config=_MAXTEXT_CONFIG.value,
      maxtext_overrides=(
          None if _MAXTEXT_OVERRIDES.value is None
          else tuple(_MAXTEXT_OVERRIDES.value)),
      load_parameters_path=_LOAD_PARAMETERS_PATH.value,
      scan_layers=_SCAN_LAYERS.value,
      engine=_ENGINE.value,
      steps=_STEPS.value,
      seed=_SEED.value,
      batch_size=_BATCH_SIZE.value,
      num_generations=_NUM_GENERATIONS.value,
      max_new_tokens=_MAX_NEW_TOKENS.value,
      max_prompt_length=_MAX_PROMPT_LENGTH.value,
      learning_rate=_LEARNING_RATE.value,
      beta=_BETA.value,
      temperature=_TEMPERATURE.value,
      model=_MODEL.value,
      dtype=_PARAM_DTYPE.value,
      dataset=_DATASET.value,
      metrics_out=_METRICS_OUT.value,
      dump_dir=_DUMP_DIR.value,
      passes=_PASSES.value,
      profile=_PROFILE.value,
      async_metrics=_ASYNC_METRICS.value,
      freeze_gc=_FREEZE_GC.value,
      balance_admission=_BALANCE_ADMISSION.value,
      publish_in_one_call=_PUBLISH_IN_ONE_CALL.value,
      trace_steps=tuple(int(k) for k in _TRACE_STEPS.value),
      trace_dir=_TRACE_DIR.value,
      mini_batch_size=_MINI_BATCH_SIZE.value,
      micro_batch_size=_MICRO_BATCH_SIZE.value,
      eval_every=_EVAL_EVERY.value,
      eval_batches=_EVAL_BATCHES.value,
      learner=_LEARNER.value,
      num_iterations=_NUM_ITERATIONS.value,
      lora_rank=_LORA_RANK.value,
      lora_alpha=_LORA_ALPHA.value,
      lora_modules=_LORA_MODULES.value,
      mesh=_MESH.value,
      reward_workers=_REWARD_WORKERS.value,
      transfer_guard=_TRANSFER_GUARD.value,
      skip_long_prompts=_SKIP_LONG_PROMPTS.value,
      checkpoint_dir=_CHECKPOINT_DIR.value,
      checkpoint_every=_CHECKPOINT_EVERY.value,
      max_to_keep=_MAX_TO_KEEP.value,
      max_seq_token_per_tpu=_MAX_SEQ_TOKEN_PER_TPU.value,
      trainer_hosts=_TRAINER_HOSTS.value,
      rollout_hosts=_ROLLOUT_HOSTS.value,
      max_staleness=_MAX_STALENESS.value,
      is_cap=_IS_CAP.value,
  )


def _user_error(e: Exception) -> NoReturn:
  """A wrong flag or input: one line naming the fix, exit 2, no traceback."""
  print(f"grpo_qwen3.py: error: {e}", file=sys.stderr, flush=True)
  sys.exit(2)


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

    # An unwritable directory, or a checkpoint of another configuration:
    # refused here rather than inside every host (or Ray actor).
    checkpointing.check_writable(cfg.checkpoint_dir)
    checkpointing.check_resume(cfg.checkpoint_dir,
                               cfg.checkpoint_fingerprint())


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
  compilation_cache.configure(_COMPILATION_CACHE_DIR.value,
                              program="grpo_qwen3.py")
  try:
    cfg = _config()  # Validates before any host starts.
    if not _TIMEOUT.value > 0:  # Also under mcjax_da, before any claim.
      raise ValueError(
          f"--timeout must be > 0 seconds, got {_TIMEOUT.value!r}.")
  except ValueError as e:
    _user_error(e)
  from tunix_mcjax import launch  # pylint: disable=g-import-not-at-top
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
          platforms.detect_machine(), num_hosts=_NUM_HOSTS.value,
          devices_per_host=_DEVICES_PER_HOST.value, simulate=_SIMULATE.value)
      if cfg.backend != "mcjax":
        # The tunix backend: one process with every host's devices.
        plan = dataclasses.replace(
            plan, num_hosts=1,
            devices_per_host=plan.devices_per_host * plan.num_hosts)
      _check_before_start(cfg, num_hosts=plan.num_hosts,
                          devices_per_host=plan.devices_per_host)
      claim = _claim_files(cfg)
    except ValueError as e:
      _user_error(e)
    try:
      status = launch.relaunch_as_local_hosts(
          sys.argv[1:],
          plan=plan,
          timeout_s=_TIMEOUT.value,
          note=f"backend={cfg.backend}",
          host_main=lambda: _run_host(cfg),
      )
    except launch.LaunchError as e:  # Refused before any host started.
      _user_error(e)
    claim.release()
    sys.exit(status)
  _run_host(cfg)


def _run_host(cfg: grpo_job.GrpoJobConfig) -> None:
  """One host of the job (or the whole job, on a detected cluster)."""
  from tunix_mcjax import checkpointing  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import runtime  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.recipes import validation  # pylint: disable=g-import-not-at-top

  try:
    summary = grpo_job.run(cfg)
  except (validation.InputError, checkpointing.CheckpointError) as e:
    # Data, reward function or tokenizer; a checkpoint that does not fit the
    # job, or a failed save: the message names the fix.
    _user_error(e)
  if os.environ.get(runtime.ENV_HOST_ID, "0") == "0":
    _print_summary(cfg, summary)


def _run_disaggregated(cfg: grpo_job.GrpoJobConfig) -> None:
  """--backend=mcjax_da: trainer and rollout hosts as Ray actors (local)."""
  from tunix_mcjax import platforms  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.da import launcher  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.recipes import da_job  # pylint: disable=g-import-not-at-top

  try:
    devices = launcher.host_devices(
        launcher.placement_from_flags(
            strategy=_RAY_PLACEMENT_STRATEGY.value, bundle=_RAY_BUNDLE.value,
            ray_address=_RAY_ADDRESS.value),
        hosts=cfg.trainer_hosts + cfg.rollout_hosts,
        devices_per_host=_DEVICES_PER_HOST.value, simulate=_SIMULATE.value,
        ray_address=_RAY_ADDRESS.value, machine=platforms.detect_machine())
    _check_before_start(cfg, num_hosts=cfg.trainer_hosts,
                        devices_per_host=devices.devices_per_host)
    _claim_files(cfg)  # Held until this driver exits.
  except ValueError as e:
    _user_error(e)
  print(f"[grpo_qwen3] mcjax_da hosts: {devices.describe()}", flush=True)
  try:
    summary = launcher.run_local(
        da_job.GrpoJobTask(job=cfg),
        rollout_source=da_job.GrpoJobSource(job=cfg),
        devices_per_host=(devices.devices_per_host if devices.simulated
                          else None),
        timeout_s=_TIMEOUT.value, ray_address=_RAY_ADDRESS.value,
        placement=devices.placement)
  except RuntimeError as e:
    print(f"grpo_qwen3.py: error: {e}", file=sys.stderr, flush=True)
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
