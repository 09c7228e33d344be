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
import json
import os
from typing import Any

import tunix_mcjax
from tunix_mcjax import support
from tunix_mcjax.recipes import tasks

# The registered cluster backends; the registry is the one list of them.
BACKENDS = tuple(tunix_mcjax.backend_names())
_DEMO = tasks.DEMO_DEFAULTS
TRAINERS = ("tunix", "maxtext")


@dataclasses.dataclass(frozen=True, kw_only=True)
class GrpoJobConfig:
  """A GRPO job; sizes are global (the whole cluster), as in Tunix recipes."""

  backend: str = "mcjax"
  engine: str = "native"
  # The trainer's model: Tunix's Qwen3, or a MaxText Qwen3 behind MaxText's
  # Tunix adapter (the engine then runs Tunix's Qwen3 layout).
  trainer: str = "tunix"
  # MaxText only: base YAML (None: MaxText's base.yml), `key=value`
  # overrides (None: maxtext_models.TINY_QWEN3_OVERRIDES), a parameter
  # checkpoint (None: random init from `seed`), the scanned layer layout.
  maxtext_config: str | None = None
  maxtext_overrides: tuple[str, ...] | None = None
  load_parameters_path: str | None = None
  scan_layers: bool = True
  # Defaults: the built-in demo (tasks.DEMO_DEFAULTS), which the tiny model
  # measurably learns on CPU.
  steps: int = _DEMO.num_steps
  seed: int = _DEMO.seed
  batch_size: int = _DEMO.batch_size
  num_generations: int = _DEMO.num_generations
  max_new_tokens: int = _DEMO.max_tokens_to_generate
  max_prompt_length: int = _DEMO.max_prompt_length
  temperature: float = _DEMO.temperature
  top_p: float = 1.0
  top_k: int | None = None
  learning_rate: float = _DEMO.learning_rate
  beta: float = _DEMO.beta
  epsilon: float = 0.2
  model: str = "tiny"
  dataset: str = "toy"
  dtype: str = "float32"
  metrics_out: str | None = None
  dump_dir: str | None = None
  # The same `steps` batches are run this many times in a row (the
  # benchmark's two-pass protocol scores the second pass).
  passes: int = 1
  # mcjax host-side optimizations: a profile ("base", "optimized"; None: the
  # backend's defaults) and per-switch overrides (None: the profile's).
  profile: str | None = None
  async_metrics: bool | None = None
  freeze_gc: bool | None = None
  balance_admission: bool | None = None
  publish_in_one_call: bool | None = None
  # JAX profiler traces of these steps (1-based, counted over all passes).
  trace_steps: tuple[int, ...] = ()
  trace_dir: str | None = None
  # Gradient accumulation, global prompts as in Tunix's RLTrainingConfig:
  # one optimizer update per `mini_batch_size` prompts (None: the batch),
  # accumulated over micro-batches of `micro_batch_size` (None: the
  # mini-batch). Both must divide over the hosts.
  mini_batch_size: int | None = None
  micro_batch_size: int | None = None
  # Evaluation (Tunix's eval_ds): before every `eval_every`-th optimizer
  # update (RLTrainingConfig.eval_every_n_steps; None: no evaluation), on
  # `eval_batches` held-out global batches of `batch_size` prompts
  # (tasks.eval_dataset_from_spec).
  eval_every: int | None = None
  eval_batches: int = 1
  # Tunix's learner: GRPOLearner, DAPOLearner or DrGRPOLearner; and GRPO's
  # num_iterations (mu; > 1 takes old log-probs from the rollout engine).
  learner: str = "grpo"
  num_iterations: int = 1
  # LoRA actor, as Tunix's `actor_model_config.lora_config` (rank, alpha,
  # module_path): None trains full weights. The reference is the base model.
  lora_rank: int | None = None
  lora_alpha: float | None = None  # None: equal to lora_rank (scale 1).
  lora_modules: str = support.DEFAULT_LORA_MODULES
  # Trainer mesh (support.MESH_KINDS): "fsdp" over every device, "hsdp"
  # (data-parallel across hosts, fsdp within a host), or "auto": fsdp when
  # it divides the model's widths, else hsdp (support.choose_mesh).
  mesh: str = "auto"
  # Reward functions scored in a per-host pool of this many worker processes
  # (tunix_mcjax.rewards_pool); 0: in-process, one after the other (Tunix).
  reward_workers: int = 0
  # JAX's transfer guard over the backend's calls after the first step
  # (tunix_mcjax.transfers.GUARD_LEVELS; mcjax): "disallow" raises on an
  # implicit host<->device transfer there.
  transfer_guard: str = "allow"
  # Prompts longer than max_prompt_length: an error naming the row (False),
  # or dropped from the global dataset before dealing, with a count (True).
  skip_long_prompts: bool = False
  # Checkpoints (mcjax; see docs/checkpointing.md): every `checkpoint_every`
  # global steps into `checkpoint_dir`, keeping `max_to_keep` (None: all). A
  # directory that holds a checkpoint resumes from its latest complete one.
  checkpoint_dir: str | None = None
  checkpoint_every: int = 1
  max_to_keep: int | None = 3
  # Sequence packing (Tunix's RLTrainingConfig.max_seq_token_per_tpu):
  # tokens per packed row; None: no packing. mcjax only, with a token-mean
  # learner (--learner=dapo); see docs/cli.md.
  max_seq_token_per_tpu: int | None = None
  # The disaggregated backend (mcjax_da; docs/disaggregated.md): trainer and
  # rollout processes, how many policy versions a trained rollout may lag
  # (0: synchronous) and the cap C of its truncated importance weights.
  trainer_hosts: int = 1
  rollout_hosts: int = 2
  max_staleness: int = 1
  is_cap: float = 2.0

  def __post_init__(self):
    from tunix_mcjax import transfers  # pylint: disable=g-import-not-at-top

    transfers.check_level(self.transfer_guard)
    if self.transfer_guard != "allow" and self.backend != "mcjax":
      raise ValueError(
          f"--transfer_guard={self.transfer_guard} guards the mcjax"
          f" backend's calls; --backend={self.backend} does not take it.")
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
    problem = support.trainer_engine(self.trainer, self.engine,
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
    if self.mesh not in support.MESH_KINDS:
      raise ValueError(
          f"mesh must be one of {support.MESH_KINDS}, got {self.mesh!r}."
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
          support.lora_settings(
              self.lora_rank, self.lora_alpha_value(), self.lora_modules,
              prefix="lora_",
              module_path_key="modules",
          ),
          support.lora_engine(self.engine, True)
          if self.backend == "mcjax" else None,
      ):
        if problem is not None:
          problem.raise_()
    self._check_algorithm()
    if self.checkpoint_dir is not None and self.backend not in (
        "mcjax", "mcjax_da"):
      raise ValueError(
          "checkpoint_dir needs backend='mcjax' or 'mcjax_da' (its resume is"
          " exact: the data position and sampling keys are saved); the stock"
          " backend here does not checkpoint."
      )
    self.checkpoint_config()  # Validates checkpoint_every and max_to_keep.
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
    from tunix_mcjax import support  # pylint: disable=g-import-not-at-top

    problem = support.learner(self.learner)
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
      raise ValueError(
          "micro_batch_size needs mini_batch_size (as in Tunix's"
          " RLTrainingConfig); set --mini_batch_size."
      )
    mini = self.mini_batch_size or self.batch_size
    micro = self.micro_batch_size or mini
    for name, value, whole in (("mini_batch_size", mini, self.batch_size),
                               ("micro_batch_size", micro, mini)):
      if value < 1 or whole % value:
        raise ValueError(f"{name}={value} must be >= 1 and divide {whole}.")
    self._check_packing()
    if self.backend == "mcjax":
      # O3 with accumulation: the rules admission and the cluster apply on
      # every host, checked here before any host starts.
      balance = bool(self.optimizations().balance_admission)
      for problem in (
          support.balanced_micro_batches(
              balance_by_length=balance, loss_agg_mode=self.loss_agg_mode(),
              micro_batch_size=micro, mini_batch_size=mini),
          support.balanced_updates(
              balance_by_length=balance, mini_batch_size=mini,
              batch_size=self.batch_size),
      ):
        if problem is not None:
          raise ValueError(problem.message)

  def _check_packing(self) -> None:
    """--max_seq_token_per_tpu: where packing gives the unpacked losses."""
    from tunix_mcjax import support  # pylint: disable=g-import-not-at-top

    if self.max_seq_token_per_tpu is None:
      return
    if self.backend != "mcjax":
      raise ValueError(
          "--max_seq_token_per_tpu with --backend=tunix: Tunix 0.1.7's own"
          " packing is wrong off TPU (no attention mask for packed rows) and"
          " makes each packed row its own optimizer update; use"
          " --backend=mcjax, or compare with the unpacked run."
      )
    problem = support.sequence_packing(
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


# The tiny model's widths (models.tiny_qwen3_config defaults; a test keeps
# them equal), readable without importing jax: the example checks the mesh
# before any host starts.
TINY_DIMS = dict(embed_dim=64, hidden_dim=128, num_heads=4, num_kv_heads=2)


def model_dims(cfg: GrpoJobConfig) -> dict[str, int]:
  """The widths the trainer mesh must divide; {} where unknown (MaxText)."""
  if cfg.trainer != "tunix":
    return {}
  if cfg.model == "tiny":
    return dict(TINY_DIMS)
  path = os.path.join(cfg.model, "config.json")
  if not os.path.isfile(path):
    return {}  # The loader reports the missing checkpoint.
  with open(path) as f:
    hf = json.load(f)
  return support.hf_model_dims(hf)


def choose_mesh(cfg: GrpoJobConfig, *, num_hosts: int,
                devices_per_host: int) -> Any:
  """The job's `support.MeshChoice`; raises ValueError naming a fix.

  Needs no devices: the example calls it before any host starts.
  """
  choice, problem = support.choose_mesh(
      model_dims(cfg), num_hosts=num_hosts,
      devices_per_host=devices_per_host, mesh=cfg.mesh,
  )
  if problem is not None:
    problem.raise_()
  return choice


# The engines tunix_mcjax.engines registers (a test keeps this equal), so
# that checking a built-in name imports no engine.
BUILTIN_ENGINES = ("native", "vllm", "vllm_tpu")


# Files a Hugging Face tokenizer loads from; a directory with none of them
# fails inside every host.
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json",
                    "vocab.txt", "spiece.model")
# What the Tunix trainer reads from config.json (models.qwen3_config_from_hf).
_QWEN3_KEYS = ("hidden_size", "intermediate_size", "num_attention_heads",
               "num_hidden_layers", "vocab_size")


def _model_dir_problems(model: str, *, trainer: str) -> list[str]:
  """What makes `--model` unusable as a Hugging Face checkpoint directory."""
  directory = os.path.expanduser(model)
  path = os.path.join(directory, "config.json")
  if not os.path.isfile(path):
    return [f"--model={model!r} is not 'tiny' or a local Hugging Face"
            " checkpoint directory (no config.json there)."]
  problems = []
  try:
    with open(path, encoding="utf-8") as f:
      hf = json.load(f)
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
    return [f"--model={model!r}: cannot read {path!r} as JSON ({e})."]
  if not isinstance(hf, dict):
    return [f"--model={model!r}: {path!r} is not a JSON object."]
  if trainer == "tunix":
    missing = [k for k in _QWEN3_KEYS if k not in hf]
    if missing:
      problems.append(
          f"--model={model!r}: {path!r} lacks {', '.join(missing)}; a"
          " Hugging Face Qwen3 config.json has them.")
  if not any(os.path.isfile(os.path.join(directory, name))
             for name in _TOKENIZER_FILES):
    problems.append(
        f"--model={model!r} has no tokenizer (none of"
        f" {', '.join(_TOKENIZER_FILES)}); save the tokenizer next to the"
        " weights (tokenizer.save_pretrained).")
  return problems


def check_job(cfg: GrpoJobConfig, *, num_hosts: int,
              devices_per_host: int) -> Any:
  """Every check of `cfg` that needs no device; returns the mesh choice.

  The example runs it before any host starts (and each host again): a batch
  that does not divide over the hosts, an unknown engine, a missing dataset
  file or model directory, or a mesh that cannot shard the model.

  Raises:
    validation.InputError: naming every problem and its fix, on one line.
  """
  from tunix_mcjax.recipes import validation  # pylint: disable=g-import-not-at-top

  problems = []
  # The stock backend also runs Tunix's own sampler ('vanilla').
  known = (*BUILTIN_ENGINES, *(("vanilla",) if cfg.backend == "tunix" else ()))
  if cfg.engine not in known:
    # Importing the engines costs seconds before every run; only a name
    # that is not built in needs the registry (plug-in engines).
    from tunix_mcjax import engines  # pylint: disable=g-import-not-at-top,unused-import
    from tunix_mcjax.registry import ENGINES  # pylint: disable=g-import-not-at-top

    names = [*ENGINES.names(), *known[len(BUILTIN_ENGINES):]]
    if cfg.engine not in names:
      problems.append(f"--engine={cfg.engine!r} is not a registered engine;"
                      f" use one of {names}.")
  if cfg.backend == "mcjax_da":
    from tunix_mcjax.support import disaggregated  # pylint: disable=g-import-not-at-top

    problems.extend(p.message for p in disaggregated.disaggregated_job(
        engine=cfg.engine, batch_size=cfg.batch_size,
        mini_batch_size=cfg.mini_batch_size,
        num_iterations=cfg.num_iterations,
        max_seq_token_per_tpu=cfg.max_seq_token_per_tpu,
        trainer_hosts=cfg.trainer_hosts))
  if cfg.backend in ("mcjax", "mcjax_da"):
    for name, value in (("batch_size", cfg.batch_size),
                        ("mini_batch_size", cfg.mini_batch_size),
                        ("micro_batch_size", cfg.micro_batch_size)):
      problem = support.global_batch(f"--{name}", value, num_hosts)
      if problem is not None:
        problems.append(problem.message)
  if cfg.dataset.startswith("gsm8k:"):
    path = os.path.expanduser(cfg.dataset[len("gsm8k:"):])
    if not os.path.isfile(path):
      problems.append(f"--dataset={cfg.dataset}: {path!r} is not a file;"
                      " pass gsm8k:PATH of a GSM8K jsonl file.")
    elif cfg.eval_every is not None:
      try:
        test = tasks.gsm8k_test_path(path)
      except ValueError as e:
        problems.append(str(e))
      else:
        if not test.is_file():
          problems.append(f"--eval_every evaluates on {str(test)!r}, which"
                          " does not exist; put the test split next to the"
                          " training file or drop --eval_every.")
  elif cfg.dataset != "toy":
    problems.append(f"--dataset={cfg.dataset!r} is not 'toy' or"
                    " 'gsm8k:PATH'.")
  if cfg.model != "tiny":
    problems.extend(_model_dir_problems(cfg.model, trainer=cfg.trainer))
  if cfg.metrics_out and os.path.isdir(cfg.metrics_out):
    path = cfg.metrics_out
    problems.append(f"--metrics_out={path!r} is a directory; give the path"
                    " of a file (e.g."
                    f" {os.path.join(path, 'metrics.jsonl')!r}).")
  load = cfg.load_parameters_path
  if load and "://" not in load and not os.path.exists(load):
    problems.append(f"--load_parameters_path={load!r} does not exist.")
  choice = None
  if not problems:
    try:
      choice = choose_mesh(cfg, num_hosts=num_hosts,
                           devices_per_host=devices_per_host)
    except ValueError as e:
      problems.append(str(e))
  if problems:
    raise validation.InputError(" ".join(problems))
  return choice
