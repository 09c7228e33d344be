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

"""The GRPO job's configuration (`GrpoJobConfig`) and its checks.

Everything here runs without devices and without importing JAX: the
example validates a job and chooses its mesh before any host starts.
`grpo_job.run` runs the job.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import tunix_mcjax
from tunix_mcjax import rewards_pool
from tunix_mcjax import rules
from tunix_mcjax import step_watchdog
from tunix_mcjax.rules import vllm_keys
from tunix_mcjax import transfers
from tunix_mcjax.recipes import shared_flags
from tunix_mcjax.recipes import tasks

# The registered cluster backends; the registry is the one list of them.
BACKENDS = tuple(tunix_mcjax.backend_names())
_DEMO = tasks.DEMO_DEFAULTS
TRAINERS = ("tunix", "maxtext")


def _field(default: Any, text: str, **flag: Any) -> Any:
  """A job field with `default`, and its flag's help (`job_flag`)."""
  return dataclasses.field(default=default,
                           metadata=shared_flags.job_flag(text, **flag))


def _no_flag(default: Any) -> Any:
  """A job field without a flag: set in code (tests, the benchmark)."""
  return dataclasses.field(
      default=default, metadata=shared_flags.no_flag(
          "sampling and clipping knobs kept at Tunix's defaults; no flag"
          " checks them yet"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class GrpoJobConfig:
  """A GRPO job; sizes are global (the whole cluster), as in Tunix recipes."""

  # Each field is a flag of examples/grpo_qwen3.py (recipes.job_flags):
  # `_field(DEFAULT, HELP)` gives both, `_no_flag(DEFAULT)` none. The CLI
  # defines the flags it shares with the example from these (cli_flags).
  backend: str = _field(
      "mcjax", "RL cluster backend: 'tunix' (stock, single controller),"
      " 'mcjax' (one process per host) or 'mcjax_da' (trainer hosts and"
      " rollout hosts apart, on Ray; docs/disaggregated.md).",
      choices=BACKENDS)
  engine: str = _field(
      "native", "Rollout engine by registered name (tunix_mcjax.registry;"
      " built in: native, vllm = PyTorch vLLM, vllm_tpu).")
  # The trainer's model: Tunix's Qwen3, or a MaxText Qwen3 behind MaxText's
  # Tunix adapter (the engine then runs Tunix's Qwen3 layout).
  trainer: str = _field(
      "tunix", "Trainer model: Tunix's Qwen3, or a MaxText Qwen3 (MaxText's"
      " Tunix adapter, MaxText's logical axis rules).", choices=TRAINERS)
  # MaxText only: base YAML (None: MaxText's base.yml), `key=value`
  # overrides (None: maxtext_models.TINY_QWEN3_OVERRIDES), a parameter
  # checkpoint (None: random init from `seed`), the scanned layer layout.
  maxtext_config: str | None = _field(
      None, "--trainer=maxtext: base MaxText YAML (default: MaxText's"
      " base.yml).")
  maxtext_overrides: tuple[str, ...] | None = _field(
      None, "--trainer=maxtext: key=value MaxText settings replacing the tiny"
      " Qwen3 defaults (tunix_mcjax.maxtext.models.TINY_QWEN3_OVERRIDES),"
      " e.g. model_name=qwen3-0.6b,weight_dtype=bfloat16.")
  load_parameters_path: str | None = _field(
      None, "--trainer=maxtext: a MaxText parameter checkpoint (default:"
      " random init from --seed).")
  scan_layers: bool = _field(
      True, "--trainer=maxtext: MaxText's scanned layer layout.")
  # Defaults: the built-in demo (tasks.DEMO_DEFAULTS), which the tiny model
  # measurably learns on CPU.
  steps: int = _field(_DEMO.num_steps, "GRPO steps (global batches).")
  seed: int = _field(_DEMO.seed, "Seed for model, data and sampling.")
  batch_size: int = _field(
      _DEMO.batch_size, "Global prompts per step (all hosts together).")
  num_generations: int = _field(
      _DEMO.num_generations, "Samples per prompt (G).")
  max_new_tokens: int = _field(
      _DEMO.max_tokens_to_generate, "Completion length cap.")
  max_prompt_length: int = _field(
      _DEMO.max_prompt_length, "Prompt length (tokens) the sampler pads to.")
  temperature: float = _field(_DEMO.temperature, "Sampling temperature.")
  top_p: float = _no_flag(1.0)
  top_k: int | None = _no_flag(None)
  learning_rate: float = _field(_DEMO.learning_rate, "Adam step size.")
  beta: float = _field(_DEMO.beta, "KL coefficient (0 = no reference).")
  epsilon: float = _no_flag(0.2)
  model: str = _field(
      "tiny", "'tiny' or a local Hugging Face Qwen3 checkpoint dir.")
  dataset: str = _field(
      "toy", "'toy', 'gsm8k:PATH' (a GSM8K jsonl file) or 'calc' (a"
      " two-turn tool task for --learner=agentic_grpo).")
  dtype: str = _field(
      "float32", "Parameters and activations (optimizer moments follow the"
      " parameters, as in Tunix); real checkpoints and accelerators use"
      " bfloat16.", name="param_dtype", choices=("float32", "bfloat16"))
  metrics_out: str | None = _field(
      None, "JSONL file of per-step metrics: one JSON object per step (step,"
      " reward_mean, loss, ...; docs/metrics.md), emptied when the job"
      " starts; host 0 writes.")
  dump_dir: str | None = _field(
      None, "Write rollouts, rewards and final parameters here.")
  # The same `steps` batches are run this many times in a row (the
  # benchmark's two-pass protocol scores the second pass).
  passes: int = _field(
      1, "Run the same --steps batches this many times in a row.")
  # mcjax host-side optimizations: a profile ("base", "optimized"; None: the
  # backend's defaults) and per-switch overrides (None: the profile's).
  profile: str | None = _field(
      None, "mcjax host-side optimizations (docs/host-optimizations.md):"
      " base = O1-O4 off, optimized = all on; unset = the backend's defaults"
      " (only O4, one-call publication, on). The O1-O4 switches"
      " (--async_metrics, --freeze_gc, --balance_admission,"
      " --publish_in_one_call) override it.",
      # host_optimizations.PROFILES (a test keeps them equal), whose module
      # this one does not import.
      choices=("base", "optimized"))
  async_metrics: bool | None = _field(
      None, "mcjax, O1: export metrics on a background thread, off the"
      " step's barrier (unset: --profile's).")
  freeze_gc: bool | None = _field(
      None, "mcjax, O2: gc.freeze() after warm-up; no full gc.collect() per"
      " step (unset: --profile's).")
  balance_admission: bool | None = _field(
      None, "mcjax, O3: deal prompts to hosts balanced by prompt length"
      " (unset: --profile's).")
  publish_in_one_call: bool | None = _field(
      None, "mcjax, O4: publish all weights in one call, else one call per"
      " parameter (unset: --profile's).")
  # JAX profiler traces of these steps (1-based, counted over all passes).
  trace_steps: tuple[int, ...] = _field(
      (), "Steps (1-based) to record a JAX profiler trace of.")
  trace_dir: str | None = _field(
      None, "Where profiler traces go (one folder per host).")
  # Gradient accumulation, global prompts as in Tunix's RLTrainingConfig:
  # one optimizer update per `mini_batch_size` prompts (None: the batch),
  # accumulated over micro-batches of `micro_batch_size` (None: the
  # mini-batch). Both must divide over the hosts.
  mini_batch_size: int | None = _field(
      None, "Global prompts per optimizer update (default: --batch_size).")
  micro_batch_size: int | None = _field(
      None, "Global prompts per gradient-accumulation micro-batch (Tunix's"
      " train_micro_batch_size; default: --mini_batch_size).")
  # Evaluation (Tunix's eval_ds): before every `eval_every`-th optimizer
  # update (RLTrainingConfig.eval_every_n_steps; None: no evaluation), on
  # `eval_batches` held-out global batches of `batch_size` prompts
  # (tasks.eval_dataset_from_spec).
  eval_every: int | None = _field(
      None, "Evaluate (Tunix's eval_ds) before every N-th optimizer update;"
      " default: no evaluation.")
  eval_batches: int = _field(
      1, "Held-out global batches of --batch_size prompts per evaluation"
      " (toy: a held-out draw; gsm8k:.../train.jsonl: the test.jsonl next to"
      " it).")
  # Tunix's learner: GRPOLearner, DAPOLearner or DrGRPOLearner; and GRPO's
  # num_iterations (mu; > 1 takes old log-probs from the rollout engine).
  learner: str = _field(
      "grpo", "Tunix learner: GRPOLearner, DAPOLearner (needs --beta=0),"
      " DrGRPOLearner, or the agentic GRPOLearner (multi-turn agents;"
      " --dataset=calc).", choices=rules.LEARNERS)
  # The agentic learner's concurrent agents per host (Tunix's default).
  max_concurrency: int = _field(
      16, "--learner=agentic_grpo: agents run concurrently per host.")
  num_iterations: int = _field(
      1, "GRPO's num_iterations (mu); > 1 takes old log-probs from the"
      " engine.")
  # LoRA actor, as Tunix's `actor_model_config.lora_config` (rank, alpha,
  # module_path): None trains full weights. The reference is the base model.
  lora_rank: int | None = _field(
      None, "Train a LoRA actor of this rank (qwix, as Tunix's lora_config);"
      " unset: full weights. The reference is the base model.")
  lora_alpha: float | None = _field(  # None: equal to lora_rank (scale 1).
      None, "LoRA alpha (adapters scaled by alpha/rank); unset: the rank.")
  lora_modules: str = _field(
      rules.DEFAULT_LORA_MODULES, "Regex of the modules to adapt (qwix"
      " module_path, full match).")
  # Devices per engine replica on each host (McJaxOptions.engine_tp): the
  # host's engine mesh is (devices_per_host // engine_tp, engine_tp), data
  # parallel over the first axis, tensor parallel over the second.
  engine_tp: int = _field(
      1, "mcjax, --engine=native: devices of a host per engine replica"
      " (tensor parallelism); the host's other devices run further replicas"
      " (data parallelism). Must divide the devices per host"
      " (docs/engines.md#engine-tensor-parallelism).")
  # Trainer mesh (rules.MESH_KINDS): "fsdp" over every device, "hsdp"
  # (data-parallel across hosts, fsdp within a host), or "auto": fsdp when
  # it divides the model's widths, else hsdp (rules.choose_mesh).
  mesh: str = _field(
      "auto", "Trainer mesh: fsdp over every device; hsdp = data-parallel"
      " across hosts x fsdp within a host (parameters replicated across"
      " hosts); auto = fsdp when it divides the model's widths, else hsdp"
      " (printed).", choices=rules.MESH_KINDS)
  # Reward functions scored in a per-host pool of this many worker processes
  # (tunix_mcjax.rewards_pool); 0: in-process, one after the other (Tunix).
  reward_workers: int = _field(
      0, "Score the reward functions in a per-host pool of this many worker"
      " processes (functions must be picklable); 0: in-process, one after"
      " the other (as stock Tunix).")
  # The most one reward call may take (rewards_pool): in the pool the hung
  # worker is killed and replaced, in-process the call runs on a watchdog
  # thread; either way the job fails naming the function, rows and host.
  reward_timeout_s: float = _field(
      rewards_pool.DEFAULT_TIMEOUT_S, "Seconds one reward call may take"
      " before the job fails naming the function, its rows and the host"
      " (with --reward_workers the hung worker is killed; in-process the"
      " call runs on a watchdog thread). A huge value all but turns it off.")
  # JAX's transfer guard over the backend's calls after the first step
  # (tunix_mcjax.transfers.GUARD_LEVELS; mcjax, mcjax_da's trainer hosts):
  # "disallow" raises on an implicit host<->device transfer there.
  transfer_guard: str = _field(
      "allow", "mcjax, mcjax_da: JAX's transfer guard over the backend's"
      " (mcjax_da: the trainer hosts') calls of"
      " every step after the first; 'disallow' raises on an implicit"
      " host<->device transfer (docs/design.md lists the deliberate ones).",
      choices=transfers.GUARD_LEVELS)
  # --engine=vllm on a GPU: vLLM's share of each host's GPU; JAX gets the
  # rest less a reserve (tunix_mcjax.device_memory). Tunix's
  # rollout_vllm_hbm_utilization, whose default it keeps.
  engine_memory_fraction: float = _field(
      vllm_keys.DEFAULT_HBM_UTILIZATION, "--engine=vllm on a GPU: the share of each host's GPU memory"
      " for vLLM (Tunix's rollout_vllm_hbm_utilization); the JAX trainer in"
      " the same process gets the rest less 0.05 (XLA_PYTHON_CLIENT_MEM_"
      "FRACTION, unless set). Checked before any host starts.")
  # mcjax, mcjax_da: a host whose step (after its first) does not end in
  # time stops, naming the step and phase (tunix_mcjax.step_watchdog).
  step_timeout_s: float = _field(
      step_watchdog.DEFAULT_STEP_TIMEOUT_S, "mcjax, mcjax_da: seconds a"
      " host's training step may take after its first (which compiles),"
      " evaluation and checkpoint saves between steps included; then the"
      " host stops, naming the step and phase. Catches a collective that"
      " hangs on a stopped or cut-off host on a cluster, where no launcher"
      " watches. A huge value all but turns it off.")
  # mcjax, mcjax_da: jax.distributed's heartbeat_timeout_seconds.
  heartbeat_timeout_s: int | None = _field(
      None, "mcjax, mcjax_da: seconds without a heartbeat after which JAX's"
      " coordination service declares a host dead and aborts the others"
      " (jax.distributed's heartbeat_timeout_seconds; default: JAX's, 100 s)."
      " Lower it on a cluster to end a job sooner when a machine dies; the"
      " end is JAX's abort, not one line (--step_timeout_s gives that).")
  # Prompts longer than max_prompt_length: an error naming the row (False),
  # or dropped from the global dataset before dealing, with a count (True).
  skip_long_prompts: bool = _field(
      False, "Drop dataset rows whose prompt is longer than"
      " --max_prompt_length tokens (counted; the same rows on every host);"
      " default: an error naming the first such row.")
  # Checkpoints (mcjax; see docs/checkpointing.md): every `checkpoint_every`
  # global steps into `checkpoint_dir`, keeping `max_to_keep` (None: all). A
  # directory that holds a checkpoint resumes from its latest complete one.
  checkpoint_dir: str | None = _field(
      None, "mcjax, mcjax_da: save checkpoints here (Orbax, all (trainer)"
      " hosts); a directory that holds one resumes from its latest complete"
      " checkpoint (printed).")
  checkpoint_every: int = _field(
      1, "Save a checkpoint every N global steps (and after the last).")
  max_to_keep: int | None = _field(3, "Keep the N most recent checkpoints.")
  # Resume from the checkpoint of this step (its directory's number under
  # <checkpoint_dir>/actor) instead of the latest; the launching process
  # sets the later steps aside once every check passed (checkpointing).
  resume_step: int | None = _field(
      None, "mcjax, mcjax_da: resume from the complete checkpoint of this"
      " step (its directory under --checkpoint_dir/actor) instead of the"
      " latest; the later steps are moved to --checkpoint_dir/actor.set_aside"
      " before any host starts (nothing is deleted).")
  # Sequence packing (Tunix's RLTrainingConfig.max_seq_token_per_tpu):
  # tokens per packed row; None: no packing. mcjax only, with a token-mean
  # learner (--learner=dapo); see docs/cli.md.
  max_seq_token_per_tpu: int | None = _field(
      None, "mcjax: sequence packing (Tunix's RLTrainingConfig knob), tokens"
      " per packed row; needs a token-mean learner (--learner=dapo)."
      " Default: no packing.")
  # Per-token log-probs over chunks of this many positions, so the learner
  # never holds the full [B, T, vocab] float32 logits
  # (tunix_mcjax.compat.chunked_logps; Tunix 0.1.7 has no such knob).
  logps_chunk_size: int | None = _field(
      None, "Compute per-token log-probs (policy, reference) over chunks of"
      " this many positions, so the full [batch, length, vocab] float32"
      " logits are never materialised (Tunix's Qwen3; docs/memory.md)."
      " Default: off, Tunix's computation.")
  # The disaggregated backend (mcjax_da; docs/disaggregated.md): trainer and
  # rollout processes, how many policy versions a trained rollout may lag
  # (0: synchronous) and the cap C of its truncated importance weights.
  trainer_hosts: int = _field(
      1, "--backend=mcjax_da: trainer processes (one JAX program among"
      " them).")
  rollout_hosts: int = _field(
      2, "--backend=mcjax_da: rollout processes, each with its own engine (a"
      " multiple of --trainer_hosts).")
  max_staleness: int = _field(
      1, "--backend=mcjax_da: most policy versions a trained rollout may"
      " lag; 0 = synchronous, 1 = generate the next batch while training"
      " this one.")
  is_cap: float = _field(
      2.0, "--backend=mcjax_da: cap C of the truncated importance weight"
      " min(exp(logp_trainer - logp_sampler), C) per token (max_staleness"
      " >= 1).")

  def __post_init__(self):
    from tunix_mcjax import transfers  # pylint: disable=g-import-not-at-top

    transfers.check_level(self.transfer_guard)
    if self.logps_chunk_size is not None:
      if self.logps_chunk_size < 1:
        raise ValueError(
            f"logps_chunk_size must be >= 1, got {self.logps_chunk_size}.")
      # Where it would not apply, it is refused rather than ignored.
      if self.backend == "mcjax_da" or self.trainer != "tunix":
        raise ValueError(
            "--logps_chunk_size applies to Tunix trainers under --backend="
            "tunix or mcjax (the trainer hosts of mcjax_da and MaxText"
            " trainers compute log-probs their own way): drop it.")
    if self.transfer_guard != "allow" and self.backend not in (
        "mcjax", "mcjax_da"):
      raise ValueError(
          f"--transfer_guard={self.transfer_guard} guards the mcjax and"
          f" mcjax_da backends' calls; --backend={self.backend} does not"
          " take it.")
    if self.backend not in BACKENDS:
      raise ValueError(
          f"backend must be one of {BACKENDS}, got {self.backend!r}."
      )
    if self.trainer not in TRAINERS:
      raise ValueError(
          f"trainer must be one of {TRAINERS}, got {self.trainer!r}."
      )
    if self.trainer != "maxtext" and (
        self.maxtext_config or self.maxtext_overrides is not None
        or self.load_parameters_path
    ):
      raise ValueError(
          "maxtext_config, maxtext_overrides and load_parameters_path need"
          " trainer='maxtext'."
      )
    problem = rules.trainer_engine(self.trainer, self.engine,
                                     backend=self.backend)
    if problem is not None:
      problem.raise_()
    for item in self.maxtext_overrides or ():
      if "=" not in item:
        raise ValueError(
            f"maxtext_overrides entries are key=value, got {item!r}."
        )
    if self.passes < 1:
      raise ValueError(f"passes must be >= 1, got {self.passes}.")
    if self.eval_every is not None and self.eval_every < 1:
      raise ValueError(
          f"eval_every must be >= 1 (or None: no evaluation), got"
          f" {self.eval_every}."
      )
    if self.eval_batches < 1:
      raise ValueError(f"eval_batches must be >= 1, got {self.eval_batches}.")
    if self.reward_workers < 0:
      raise ValueError(
          f"reward_workers must be >= 0 (0: in-process), got"
          f" {self.reward_workers}.")
    rewards_pool.check_timeout(self.reward_timeout_s)
    step_watchdog.check_timeout(self.step_timeout_s)
    if (self.step_timeout_s != step_watchdog.DEFAULT_STEP_TIMEOUT_S
        and self.backend not in ("mcjax", "mcjax_da")):
      raise ValueError(
          f"--step_timeout_s watches the hosts of the mcjax and mcjax_da"
          f" backends; --backend={self.backend} does not take it.")
    step_watchdog.check_heartbeat(self.heartbeat_timeout_s, self.backend)
    if self.mesh not in rules.MESH_KINDS:
      raise ValueError(
          f"mesh must be one of {rules.MESH_KINDS}, got {self.mesh!r}."
      )
    if self.trainer == "maxtext" and self.mesh == "hsdp":
      raise ValueError(
          "mesh='hsdp' is for trainer='tunix'; MaxText builds its own mesh:"
          " set its dcn_data_parallelism through --maxtext_overrides."
      )
    # Validates the profile name and the switches.
    self.optimizations()
    if self.trace_steps and not self.trace_dir:
      raise ValueError("trace_steps needs trace_dir.")
    for name in ("steps", "batch_size", "max_new_tokens", "max_prompt_length"):
      if getattr(self, name) < 1:
        raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
    if self.num_generations < 2:
      raise ValueError(
          f"num_generations must be >= 2 for GRPO, got {self.num_generations}."
      )
    # 0 is allowed: a run whose policy never changes (e.g. checking that
    # sampler and trainer log-probs agree).
    if not self.learning_rate >= 0:
      raise ValueError(
          f"learning_rate must be >= 0, got {self.learning_rate}.")
    if self.dtype not in ("float32", "bfloat16"):
      raise ValueError(f"dtype must be float32 or bfloat16, got {self.dtype}.")
    if self.lora_rank is None:
      if self.lora_alpha is not None:
        raise ValueError("lora_alpha needs lora_rank (the LoRA rank, >= 1).")
    else:
      if self.trainer != "tunix":
        raise ValueError(
            "LoRA (lora_rank) is applied to Tunix's model with qwix; use"
            " trainer='tunix'."
        )
      for problem in (
          rules.lora_settings(
              self.lora_rank, self.lora_alpha_value(), self.lora_modules,
              prefix="lora_",
              module_path_key="modules",
          ),
          rules.lora_engine(self.engine, True)
          if self.backend == "mcjax" else None,
      ):
        if problem is not None:
          problem.raise_()
    self._check_algorithm()
    problem = rules.engine_tp(self.engine_tp, backend=self.backend,
                              engine=self.engine, trainer=self.trainer)
    if problem is not None:
      problem.raise_()
    if self.checkpoint_dir is not None and self.backend not in (
        "mcjax", "mcjax_da"):
      raise ValueError(
          "checkpoint_dir needs backend='mcjax' or 'mcjax_da' (its resume is"
          " exact: the data position and sampling keys are saved); the stock"
          " backend here does not checkpoint."
      )
    self.checkpoint_config()  # Validates checkpoint_every and max_to_keep.
    if self.resume_step is not None and (
        self.checkpoint_dir is None or self.resume_step < 0):
      raise ValueError(
          f"--resume_step={self.resume_step} needs --checkpoint_dir (the"
          " directory holding that checkpoint) and a step >= 0.")
    if self.backend == "mcjax_da":
      self.da_options()  # Host counts, staleness and cap.

  def da_options(self) -> Any:
    """The disaggregated backend's `DaOptions` (validated)."""
    from tunix_mcjax.da import options as da_options  # pylint: disable=g-import-not-at-top

    return da_options.DaOptions(
        trainer_hosts=self.trainer_hosts, rollout_hosts=self.rollout_hosts,
        max_staleness=self.max_staleness, is_cap=self.is_cap)

  def checkpoint_config(self) -> Any:
    """The `checkpointing.CheckpointConfig`, or None (no checkpoints)."""
    from tunix_mcjax import checkpointing  # pylint: disable=g-import-not-at-top

    if self.checkpoint_dir is None:
      if self.checkpoint_every != 1 or self.max_to_keep != 3:
        # Not silently ignored.
        checkpointing.CheckpointConfig(
            directory="-", every=self.checkpoint_every,
            max_to_keep=self.max_to_keep)
      return None
    return checkpointing.CheckpointConfig(
        directory=self.checkpoint_dir, every=self.checkpoint_every,
        max_to_keep=self.max_to_keep)

  def checkpoint_fingerprint(self) -> dict[str, Any]:
    """What a resume must not change (host count, steps, passes, logging
    and host optimizations may change)."""
    keys = ("trainer", "model", "dataset", "engine", "dtype", "seed",
            "batch_size", "mini_batch_size", "micro_batch_size",
            "num_generations", "num_iterations", "learner", "beta", "epsilon",
            "learning_rate", "temperature", "top_p", "top_k",
            "max_new_tokens", "max_prompt_length", "lora_rank", "lora_alpha",
            "lora_modules", "skip_long_prompts")
    if self.backend == "mcjax_da":
      # The off-policy correction's settings (absent from a colocated
      # run's checkpoint, which a K = 0 run may resume: the same numbers).
      keys += ("max_staleness", "is_cap")
    return {k: getattr(self, k) for k in keys}

  def _check_algorithm(self) -> None:
    """Learner and batch knobs: what Tunix and mcjax can run together."""
    from tunix_mcjax import rules  # pylint: disable=g-import-not-at-top

    problem = rules.learner(self.learner)
    if problem is not None:
      raise ValueError(problem.message.replace("learner=", "--learner="))
    if self.num_iterations < 1:
      raise ValueError(
          f"num_iterations must be >= 1, got {self.num_iterations}."
      )
    if self.learner == "dapo" and self.beta != 0.0:
      raise ValueError(
          f"--learner=dapo with --beta={self.beta}: DAPO has no KL term"
          " (Tunix's DAPOConfig requires beta=None); set --beta=0."
      )
    if self.micro_batch_size is not None and self.mini_batch_size is None:
      raise ValueError("micro_batch_size needs mini_batch_size (as in Tunix's"
                       " RLTrainingConfig); set --mini_batch_size.")
    mini, micro = self.mini_batch_size or self.batch_size, self.micro_prompts()
    for name, value, whole in (("mini_batch_size", mini, self.batch_size),
                               ("micro_batch_size", micro, mini)):
      if value < 1 or whole % value:
        raise ValueError(f"{name}={value} must be >= 1 and divide {whole}.")
    self._check_packing()
    from tunix_mcjax.recipes import agentic_tasks  # pylint: disable=g-import-not-at-top

    agentic_tasks.check_job_config(self)
    if self.backend == "mcjax":
      # O3 with accumulation: the rules admission and the cluster apply on
      # every host, checked here before any host starts.
      balance = bool(self.optimizations().balance_admission)
      for problem in (
          rules.balanced_micro_batches(
              balance_by_length=balance, loss_agg_mode=self.loss_agg_mode(),
              micro_batch_size=micro, mini_batch_size=mini),
          rules.balanced_updates(
              balance_by_length=balance, mini_batch_size=mini,
              batch_size=self.batch_size),
      ):
        if problem is not None:
          raise ValueError(problem.message)

  def _check_packing(self) -> None:
    """--max_seq_token_per_tpu: where packing gives the unpacked losses."""
    from tunix_mcjax import rules  # pylint: disable=g-import-not-at-top

    if self.max_seq_token_per_tpu is None:
      return
    if self.backend != "mcjax":
      raise ValueError(
          "--max_seq_token_per_tpu with --backend=tunix: Tunix 0.1.7's own"
          " packing is wrong off TPU (no attention mask for packed rows) and"
          " makes each packed row its own optimizer update; use"
          " --backend=mcjax, or compare with the unpacked run."
      )
    problem = rules.sequence_packing(
        self.max_seq_token_per_tpu, loss_agg_mode=self.loss_agg_mode(),
        num_iterations=self.num_iterations, prefix="--",
    )
    if problem is not None:
      raise ValueError(problem.message)
    longest = self.max_prompt_length + self.max_new_tokens
    if self.max_seq_token_per_tpu < longest:
      raise ValueError(
          f"--max_seq_token_per_tpu={self.max_seq_token_per_tpu} is shorter"
          f" than the longest row ({self.max_prompt_length} prompt +"
          f" {self.max_new_tokens} completion tokens); set it to at least"
          f" {longest}."
      )

  def loss_agg_mode(self) -> str:
    """The learner's loss aggregation (Tunix's config defaults)."""
    return {"dapo": "token-mean", "drgrpo": "sequence-mean-token-scale"}.get(
        self.learner, "sequence-mean-token-mean"
    )

  def updates_per_batch(self) -> int:
    """Optimizer updates per global batch (Tunix counts max_steps in them)."""
    return self.batch_size // (self.mini_batch_size or self.batch_size)

  def micro_prompts(self) -> int:
    """Global prompts per training micro-batch (as Tunix defaults it)."""
    return self.micro_batch_size or self.mini_batch_size or self.batch_size

  def lora_alpha_value(self) -> float | None:
    """LoRA alpha (defaults to the rank); None without LoRA."""
    if self.lora_rank is None:
      return None
    return self.lora_rank if self.lora_alpha is None else self.lora_alpha

  def lora_config(self) -> dict[str, Any] | None:
    """Tunix's `lora_config` mapping for this job; None without LoRA."""
    if self.lora_rank is None:
      return None
    return {"rank": self.lora_rank, "alpha": float(self.lora_alpha_value()),
            "module_path": self.lora_modules}

  def optimizations(self) -> Any:
    """The mcjax `HostOptimizations` this job asks for."""
    from tunix_mcjax import host_optimizations  # pylint: disable=g-import-not-at-top

    return host_optimizations.from_profile(
        self.profile,
        async_metrics=self.async_metrics,
        freeze_gc=self.freeze_gc,
        balance_admission=self.balance_admission,
        publish_in_one_call=self.publish_in_one_call,
    )

