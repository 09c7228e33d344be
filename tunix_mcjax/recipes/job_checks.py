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

"""The example's job checked before any host starts: model widths, the mesh
choice, the model directory, engines, datasets and batch sizes.

Runs without devices and without importing JAX (as `job_config`).
"""

from __future__ import annotations

import json
import os
from typing import Any

from tunix_mcjax import rules
from tunix_mcjax.recipes import tasks
from tunix_mcjax.recipes.job_config import GrpoJobConfig


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
  return rules.hf_model_dims(hf)


def choose_mesh(cfg: GrpoJobConfig, *, num_hosts: int,
                devices_per_host: int) -> Any:
  """The job's `rules.MeshChoice`; raises ValueError naming a fix.

  Needs no devices: the example calls it before any host starts.
  """
  choice, problem = rules.choose_mesh(
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
  if cfg.engine == "vllm":
    from tunix_mcjax import device_memory  # pylint: disable=g-import-not-at-top

    try:  # vLLM and JAX must fit one GPU (on CPU the split is unused).
      device_memory.split(cfg.engine_memory_fraction)
    except ValueError as e:
      problems.append(str(e))
  problem = rules.engine_tp(cfg.engine_tp, backend=cfg.backend,
                            engine=cfg.engine, trainer=cfg.trainer,
                            devices_per_host=devices_per_host)
  if problem is not None:
    problems.append(problem.message)
  if cfg.backend == "mcjax_da":
    from tunix_mcjax.rules import disaggregated  # pylint: disable=g-import-not-at-top

    problems.extend(p.message for p in disaggregated.disaggregated_job(
        engine=cfg.engine, batch_size=cfg.batch_size,
        num_iterations=cfg.num_iterations,
        max_seq_token_per_tpu=cfg.max_seq_token_per_tpu,
        trainer_hosts=cfg.trainer_hosts))
  if cfg.backend in ("mcjax", "mcjax_da"):
    for name, value in (("batch_size", cfg.batch_size),
                        ("mini_batch_size", cfg.mini_batch_size),
                        ("micro_batch_size", cfg.micro_batch_size)):
      problem = rules.global_batch(f"--{name}", value, num_hosts)
      if problem is not None:
        problems.append(problem.message)
  micro = cfg.micro_prompts()
  if (cfg.learner == "agentic_grpo" and cfg.eval_every is not None
      and cfg.backend != "tunix" and micro < 2 * num_hosts):
    # Tunix then computes the training log-probs on its rollout thread,
    # beside the evaluation pass's (agent_turns).
    problems.append(
        f"--eval_every with --learner=agentic_grpo needs training"
        f" micro-batches of at least 2 prompts per host (got {micro} over"
        f" {num_hosts} hosts); raise --micro_batch_size.")
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
  elif cfg.dataset not in ("toy", "calc"):
    problems.append(f"--dataset={cfg.dataset!r} is not 'toy', 'calc' or"
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
