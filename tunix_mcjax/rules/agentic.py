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

"""Tunix's agentic GRPO learner through the CLI (training_mode=agentic_grpo):
what mcjax runs of it, as the example's `--learner=agentic_grpo` refusals
(`recipes/agentic_tasks.check_job_config`), on Tunix's parsed config.

Why each refusal (docs/agentic.md, "How it runs on mcjax"):

* mcjax computes the trainer-side log-probs from the live trainer state
  until a step's first optimizer update and from a copy of the synced
  policy after it (`AgentTurns.before_update`): several updates per batch
  run colocated and disaggregated (verified); `num_iterations` > 1 is not
  built;
* `compute_logps_micro_batch_size` must equal `train_micro_batch_size`, as
  Tunix requires; with one prompt per host Tunix computes the log-probs on
  its rollout thread, which mcjax orders with the train steps
  (`agent_turns.AgentTurns.order_logps`);
* agent turns are keyed by the learner's group ids (its evaluation groups
  get ids of their own: `compat.agentic_learner`), and by the engine's
  per-row keys (the native engine's and vLLM's per-row seeds); evaluation
  (`--run_eval`) needs the training log-probs on the learner's main thread
  (at least 2 prompts per host in a micro-batch), where an evaluation pass
  cannot interleave with them (`agent_turns`); a resumed learner numbers
  its groups
  from the restored step on, which admission's resume matches (resume is
  exact: tests/test_agentic_equivalence.py);
* under the disaggregated backend the agents run on the trainer hosts and
  their turns on the rollout hosts; the staleness bound is Tunix's
  `off_policy_steps` (mcjax pins each batch's turns to the stalest policy
  it allows, `agent_turns`), so `--max_staleness` must agree with it; the
  colocated backend runs on-policy (off_policy_steps 0): its engines share
  the trainers' devices and weights.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tunix_mcjax.rules.problem import Problem

AGENTIC_MODE = "agentic_grpo"
# Tunix's `training_mode` values mcjax's CLI runs.
TRAINING_MODES = ("grpo", AGENTIC_MODE)


def learner_section(config: Mapping[str, Any]) -> str:
  """The config section of the mode's learner: Tunix's agentic mode reads
  agentic_grpo_config, GRPO grpo_config."""
  agentic = config.get("training_mode", "grpo") == AGENTIC_MODE
  return "agentic_grpo_config" if agentic else "grpo_config"


def agentic_job(
    config: Mapping[str, Any],
    *,
    backend: str,
    engine: str,
    run_eval: bool = False,
    resume_step: int | None = None,
    max_staleness: int = 0,
    num_hosts: int = 1,
) -> list[Problem]:
  """What mcjax cannot run of an agentic config; [] for another mode.

  Args:
    config: Tunix's parsed GRPO config.
    backend: the CLI's --backend.
    engine: the mcjax engine the config selects (`rules.selected_engine`).
    run_eval: the CLI's --run_eval.
    resume_step: the CLI's --resume_step.
    max_staleness: the CLI's --max_staleness (mcjax_da).
    num_hosts: hosts (mcjax_da: trainer hosts) the batch is dealt over.
  """
  if config.get("training_mode", "grpo") != AGENTIC_MODE:
    return []
  training = config.get("rl_training_config") or {}
  agentic = config.get("agentic_grpo_config") or {}
  batch = config.get("batch_size", 1)
  mini = training.get("mini_batch_size") or batch
  micro = training.get("train_micro_batch_size") or mini
  logps = training.get("compute_logps_micro_batch_size")
  lora = (config.get("actor_model_config") or {}).get("lora_config")
  off_policy = agentic.get("off_policy_steps", 0)
  # (refused, what, the fix)
  cases = (
      (backend == "mcjax_da" and max_staleness != off_policy,
       f"--backend=mcjax_da, --max_staleness={max_staleness} and"
       f" agentic_grpo_config.off_policy_steps={off_policy} (Tunix's"
       " bound on agent turns' staleness)",
       f"set off_policy_steps={max_staleness}, or drop --max_staleness"),
      (backend != "mcjax_da" and off_policy != 0,
       f"agentic_grpo_config.off_policy_steps={off_policy} on the colocated"
       " backend (its engines share the trainers' devices)",
       "use --backend=mcjax_da, or set it to 0"),
      (agentic.get("num_iterations", 1) != 1,
       "agentic_grpo_config.num_iterations="
       f"{agentic.get('num_iterations')} (several updates per batch)",
       "set it to 1"),
      (run_eval and micro < 2 * num_hosts,
       f"--run_eval and rl_training_config.train_micro_batch_size={micro}"
       f" over {num_hosts} hosts (below 2 prompts per host Tunix computes"
       " the log-probs on its rollout thread, beside the evaluation pass)",
       "raise train_micro_batch_size or drop --run_eval"),
      (bool(lora), "actor_model_config.lora_config (LoRA; not verified)",
       "remove it"),
      (training.get("max_seq_token_per_tpu") is not None,
       "rl_training_config.max_seq_token_per_tpu (sequence packing)",
       "unset it"),
      (engine not in ("native", "vllm"), f"engine {engine!r} (the native"
       " engine and vLLM key each agent turn's sampling; this one is not"
       " verified)", "set rollout_engine=vanilla or vllm"),
  )
  problems = [
      Problem(message=f"training_mode=agentic_grpo with {what}: not"
              f" supported by mcjax yet (docs/agentic.md); {fix}.",
              error=NotImplementedError)
      for refused, what, fix in cases if refused
  ]
  if logps != micro:
    problems.append(Problem(
        message=f"training_mode=agentic_grpo needs"
        f" rl_training_config.compute_logps_micro_batch_size={micro} (got"
        f" {logps}): equal to train_micro_batch_size, so that every host"
        " computes the log-probs of the micro-batches it trains (mcjax's"
        " global programs run in the same order on every host)."))
  # Tunix's learner checks it too, but only inside the hosts.
  if agentic.get("use_rollout_logps", True) and not (
      config.get("rollout_config") or {}).get("return_logprobs"):
    problems.append(Problem(
        message="training_mode=agentic_grpo needs"
        " rollout_config.return_logprobs=true (Tunix's agentic learner uses"
        " the rollout's log-probs; agentic_grpo_config.use_rollout_logps)."))
  return problems
