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

"""Agentic GRPO in the example: a built-in two-turn tool task ("calc").

Tunix's `AgenticGRPOLearner` (tunix.rl.agentic) runs one agent and one
environment per (prompt, sample). The task, in the tiny model's alphabet
(letters a..j are the digits 0..9): the prompt "cd:" asks for c + d. Turn 1
names the operand to add (d); the environment calls Tunix's
`CalculatorTool` on the prompt's operands and shows the result's last digit
("f:"); turn 2 relays it. A turn ends at any token that is not a digit
letter, and each turn scores 1 if it starts with its letter, less a quarter
for each letter it is away from a one-letter answer; half the reward each.
Every trajectory has two model turns.

The environment's reward is the trajectory reward Tunix's agentic reward
manager adds up; the task has no reward functions of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

# Letter i stands for digit i.
CALC_DIGITS = "abcdefghij"


def _text(x: Any) -> str:
  """A field of one example (the learner hands one-element arrays)."""
  arr = np.asarray(x).reshape(-1)
  return str(arr[0]) if arr.size else ""


# The evaluation set's first `prompt_index` (the dumps tell its episodes).
EVAL_FIRST_INDEX = 10**6


def calc_dataset(*, num_batches: int, batch_size: int, seed: int,
                 first_index: int = 0) -> list[dict[str, np.ndarray]]:
  """Global batches of "xy:" prompts, their answers; `prompt_index`
  numbers the prompts from `first_index`."""
  if batch_size < 1 or num_batches < 1:
    raise ValueError(
        f"batch_size and num_batches must be >= 1, got {batch_size},"
        f" {num_batches}.")
  rng = np.random.default_rng(seed)
  batches = []
  for b in range(num_batches):
    pairs = rng.integers(len(CALC_DIGITS), size=(batch_size, 2))
    batches.append({
        "prompts": np.asarray(
            [f"{CALC_DIGITS[x]}{CALC_DIGITS[y]}:" for x, y in pairs]),
        # The letter turn 2 is scored against (the environment computes it
        # with the calculator; kept here for readers of the data).
        "answer": np.asarray([CALC_DIGITS[(x + y) % 10] for x, y in pairs]),
        "prompt_index": first_index + np.arange(b * batch_size,
                                                (b + 1) * batch_size),
    })
  return batches


def stop_tokens(tokenizer: Any) -> list[int]:
  """Where a turn of the calc task ends: at any token that is not a digit
  letter (eos first: Tunix's sampler pads with the first stop token).

  Tunix's sampler trims a turn's stop token and its agentic learner trains
  only the turn's other tokens, so the model learns to stop only by
  learning not to go on. With eos and a colon alone (2 of the 16 tokens) a
  random model's turns were about 6 tokens long and grew as it learned;
  with these 6 (pad, bos and unk included, so none is trained mid-turn)
  they are 0-2 letters from the start.
  """
  digits = set(tokenizer.encode(CALC_DIGITS))
  eos = tokenizer.eos_id()
  return [eos, *(i for i in range(tokenizer.vocab_size)
                 if i != eos and i not in digits)]


def _turn_score(text: str, letter: str) -> float:
  """1 if `text` starts with `letter`, less a quarter for each letter it
  is away from a one-letter answer (an empty turn scores -0.25)."""
  return float(text[:1] == letter) - 0.25 * abs(len(text) - 1)


def calc_reward(turns: Sequence[str], prompt: str, letter: str) -> float:
  """An episode's reward: half for turn 1 naming the operand the tool adds
  last (`prompt`'s second letter), half for turn 2 relaying the tool's
  `letter`; a turn scores 1 if it starts with its letter, less a quarter
  for each letter it is away from one letter (so "" scores -0.25).

  Not length-neutral on purpose: the learner never trains a turn's stop
  token, and with a length-neutral reward (the share of the right letter)
  turns grew from 12 to 43 tokens in 40 steps; with no penalty for an empty
  turn (whose episode may have no trained tokens) the model learned to
  stop at once.
  """
  first, answer = turns
  return 0.5 * _turn_score(first, prompt[1]) + 0.5 * _turn_score(answer, letter)


def _environment_class() -> type[Any]:
  """The task's environment (Tunix's agentic modules import lazily)."""
  # pylint: disable=g-import-not-at-top
  from tunix.rl.agentic.agents import agent_types
  from tunix.rl.agentic.environments import base_environment
  from tunix.rl.agentic.tools import calculator_tool
  # pylint: enable=g-import-not-at-top

  class CalcEnvironment(base_environment.BaseTaskEnv):
    """Two turns: any answer, the calculator's result, the scored answer."""

    def __init__(self, single_example: dict[str, Any], *,
                 recorder: list[dict[str, Any]] | None = None, **kwargs: Any):
      super().__init__(task=single_example, max_steps=2, **kwargs)
      self._recorder = recorder
      self._turns: list[str] = []
      self._tool = calculator_tool.CalculatorTool(
          name="calculator", description="Adds, subtracts, multiplies.")
      self._result = ""
      self._reward = 0.0

    def _initial_observation(self) -> dict[str, Any]:
      return {"prompts": _text(self.task["prompts"])}

    def _step_impl(self, action: Any) -> Any:
      if isinstance(action, agent_types.Action):
        action = action.action
      self._turns.append(str(action))
      if self.step_count == 1:
        prompt = _text(self.task["prompts"])
        out = self._tool.apply(a=CALC_DIGITS.index(prompt[0]),
                               b=CALC_DIGITS.index(prompt[1]), op="+")
        if out.error:
          raise RuntimeError(f"calculator: {out.error}")
        self._result = CALC_DIGITS[int(out.output) % 10]
        return base_environment.EnvStepResult(
            observation=f"{self._result}:", reward=0.0, done=False,
            info={"response": action})
      self._reward = calc_reward(self._turns, _text(self.task["prompts"]),
                                   self._result)
      return base_environment.EnvStepResult(
          observation={}, reward=self._reward, done=True,
          info={"response": action})

    def close(self) -> None:
      # Every episode, also one whose turns used up the response budget
      # (Tunix then ends it without stepping the environment: reward 0).
      if self._recorder is not None:
        self._recorder.append({
            "prompt_index": int(_text(self.task["prompt_index"])),
            "pair": int(self.extra_kwargs.get("pair_index", -1)),
            "prompt": _text(self.task["prompts"]),
            "turns": list(self._turns), "reward": self._reward})
      super().close()

  return CalcEnvironment


def toy_chat_parser(tokenizer: Any) -> Any:
  """Tunix's chat-parser interface for the tiny model: the messages'
  contents, concatenated (the toy alphabet has no room for role markers)."""
  from tunix.rl.agentic.parser.chat_template_parser import parser  # pylint: disable=g-import-not-at-top

  class ToyChatParser(parser.BaseChatTemplateParser):

    def _init_tokens(self) -> Any:
      return parser.TokenConfig()

    def _init_generation_prompt(self) -> str:
      return ""

  return ToyChatParser(tokenizer)


def check_job_config(cfg: Any) -> None:
  """--learner=agentic_grpo: what mcjax runs of Tunix's agentic learner
  (`cfg`: the GrpoJobConfig)."""
  agentic, calc = cfg.learner == "agentic_grpo", cfg.dataset == "calc"
  if agentic != calc:
    raise ValueError(
        "--dataset=calc (the two-turn tool task) goes with"
        " --learner=agentic_grpo, and the agentic learner with it; set"
        " both or neither.")
  if not agentic:
    return
  problems = {
      "--trainer=maxtext": cfg.trainer != "tunix",
      "--model other than tiny (the task is in its alphabet)":
          cfg.model != "tiny",
      f"--engine={cfg.engine}": cfg.engine not in ("native", "vanilla",
                                                   "vllm"),
      "--num_iterations > 1": cfg.num_iterations != 1,
      "--max_seq_token_per_tpu": cfg.max_seq_token_per_tpu is not None,
      "--lora_rank": cfg.lora_rank is not None,
      "--max_concurrency < 1": cfg.max_concurrency < 1,
  }
  bad = [k for k, v in problems.items() if v]
  if bad:
    raise ValueError(
        f"--learner=agentic_grpo with {', '.join(bad)}: not supported yet"
        " (docs/agentic.md); remove it.")


def learner(cfg: Any, cluster: Any, reward_fns: Sequence[Any],
            recorder: list[dict[str, Any]] | None) -> Any:
  """Tunix's agentic GRPO learner on `cluster` for the calc task.

  Under mcjax_da, --max_staleness K is the learner's off_policy_steps, and
  at K >= 1 its token-level importance weights (`sampler_is`, capped at
  --is_cap) correct the stale turns, as the GRPO learner's are under
  mcjax_da."""
  from tunix.rl.agentic import agentic_grpo_learner  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.compat import agentic_learner  # pylint: disable=g-import-not-at-top

  lag = cfg.max_staleness if cfg.backend == "mcjax_da" else 0
  return agentic_learner.learner_class()(
      rl_cluster=cluster,
      algo_config=agentic_grpo_learner.GRPOConfig(
          num_generations=cfg.num_generations,
          num_iterations=cfg.num_iterations, beta=cfg.beta,
          epsilon=cfg.epsilon, max_response_length=cfg.max_new_tokens,
          max_concurrency=cfg.max_concurrency, off_policy_steps=lag,
          **({"sampler_is": "token", "sampler_is_threshold": cfg.is_cap}
             if lag else {})),
      reward_fns=list(reward_fns) or None,
      chat_parser=toy_chat_parser(cluster.tokenizer),
      env_class=_environment_class(),
      env_kwargs={"recorder": recorder},
  )
