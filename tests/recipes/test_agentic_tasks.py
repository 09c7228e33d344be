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

"""The calc task of --learner=agentic_grpo (recipes/agentic_tasks.py)."""

import numpy as np
import pytest

from tunix_mcjax.recipes import agentic_tasks
from tunix_mcjax.recipes import grpo_job
from tunix_mcjax.recipes import models


def test_dataset_numbers_prompts_and_states_the_answer():
  batches = agentic_tasks.calc_dataset(num_batches=2, batch_size=3, seed=0)
  assert [list(b["prompt_index"]) for b in batches] == [[0, 1, 2], [3, 4, 5]]
  for b in batches:
    for prompt, answer in zip(b["prompts"], b["answer"]):
      x, y = (agentic_tasks.CALC_DIGITS.index(c) for c in prompt[:2])
      assert prompt.endswith(":")
      assert answer == agentic_tasks.CALC_DIGITS[(x + y) % 10]
  # Every character is in the tiny model's alphabet.
  assert set("".join(batches[0]["prompts"])) <= set(models.TOY_ALPHABET)


def test_environment_runs_the_calculator_between_two_turns():
  rows = []
  env_class = agentic_tasks._environment_class()  # pylint: disable=protected-access
  env = env_class({"prompts": np.asarray(["hd:"]),
                   "prompt_index": np.asarray([7])},
                  recorder=rows, group_id=0, pair_index=1)
  obs, _ = env.reset()
  assert obs == {"prompts": "hd:"}
  # 7 + 3 = 10: the tool's last digit is 0 ("a").
  obs, reward, done, _ = env.step("db")
  assert (obs, reward, done) == ("a:", 0.0, False)
  obs, reward, done, _ = env.step("a")
  # Turn 1 starts with the operand d but is one letter too long (-0.25);
  # turn 2 is exactly the tool's letter a.
  assert done and reward == pytest.approx(0.5 * 0.75 + 0.5 * 1.0)
  env.close()
  assert rows == [{"prompt_index": 7, "pair": 1, "prompt": "hd:",
                   "turns": ["db", "a"], "reward": reward}]


def test_reward_wants_exactly_one_right_letter_per_turn():
  r = agentic_tasks.calc_reward
  # Prompt "cd:": turn 1 names d, turn 2 relays the tool's letter (f).
  assert r(["d", "f"], "cd:", "f") == 1.0
  assert r(["c", "g"], "cd:", "f") == 0.0
  assert r(["d", "g"], "cd:", "f") == r(["c", "f"], "cd:", "f") == 0.5
  # Only the first letter counts; each letter more costs a quarter.
  assert r(["dd", "f"], "cd:", "f") == r(["dc", "f"], "cd:", "f") == (
      pytest.approx(0.5 * 0.75 + 0.5))
  assert r(["dddd", "ffff"], "cd:", "f") == pytest.approx(0.25)
  assert r(["cc", "g"], "cd:", "f") == pytest.approx(-0.125)
  # An empty turn is one letter short.
  assert r(["", ""], "cd:", "f") == pytest.approx(-0.25)
  assert r(["", "f"], "cd:", "f") == pytest.approx(0.375)


def test_turns_stop_at_any_token_but_a_digit_letter():
  tok = models.ToyTokenizer()
  stops = agentic_tasks.stop_tokens(tok)
  # eos first (Tunix's sampler pads with the first), each token once.
  assert stops[0] == tok.eos_id() and len(set(stops)) == len(stops)
  digits = tok.encode(agentic_tasks.CALC_DIGITS)
  assert sorted(stops + digits) == list(range(tok.vocab_size))
  assert set(tok.encode(":k")) <= set(stops)
  assert {tok.pad_id(), tok.bos_id(), tok.unk_id()} <= set(stops)


@pytest.mark.parametrize("flags,match", [
    (dict(dataset="calc"), "goes with --learner=agentic_grpo"),
    (dict(learner="agentic_grpo"), "goes with --learner=agentic_grpo"),
    (dict(learner="agentic_grpo", dataset="calc", num_iterations=2),
     "--num_iterations > 1"),
    # vLLM on CPU/GPU runs (tests/engines/test_vllm_agentic.py); on TPU not
    # yet.
    (dict(learner="agentic_grpo", dataset="calc", engine="vllm_tpu"),
     "--engine=vllm_tpu"),
])
def test_unsupported_settings_are_refused_with_the_flag(flags, match):
  with pytest.raises(ValueError, match=match):
    grpo_job.GrpoJobConfig(**flags)


def test_several_updates_per_batch_are_accepted_disaggregated():
  # tests/test_agentic_equivalence.py's "da2" run.
  cfg = grpo_job.GrpoJobConfig(learner="agentic_grpo", dataset="calc",
                               batch_size=4, mini_batch_size=2,
                               backend="mcjax_da", max_staleness=0)
  assert cfg.mini_batch_size == 2


@pytest.mark.parametrize("backend", ["mcjax", "mcjax_da"])
def test_evaluation_needs_two_prompts_per_host(backend):
  # tests/test_agentic_equivalence.py evaluates at 2 per host; at 1 Tunix
  # computes the log-probs on its rollout thread, beside the evaluation.
  flags = dict(learner="agentic_grpo", dataset="calc", batch_size=6,
               eval_every=1, backend=backend, max_staleness=0)
  grpo_job.check_job(grpo_job.GrpoJobConfig(**flags), num_hosts=3,
                     devices_per_host=1)
  with pytest.raises(Exception, match="at least 2 prompts per host"):
    grpo_job.check_job(grpo_job.GrpoJobConfig(**flags), num_hosts=6,
                       devices_per_host=1)


@pytest.mark.parametrize("backend", ["mcjax", "mcjax_da"])
def test_per_host_micro_batch_of_one_is_accepted(backend):
  # Tunix then computes log-probs on its rollout thread, which mcjax orders
  # (agent_turns.AgentTurns.order_logps).
  cfg = grpo_job.GrpoJobConfig(learner="agentic_grpo", dataset="calc",
                               batch_size=4, backend=backend, max_staleness=0)
  grpo_job.check_job(cfg, num_hosts=4, devices_per_host=1)
  # A micro-batch that does not divide over the hosts still is refused.
  cfg = grpo_job.GrpoJobConfig(learner="agentic_grpo", dataset="calc",
                               batch_size=4, mini_batch_size=4,
                               micro_batch_size=2, backend=backend,
                               max_staleness=0)
  with pytest.raises(Exception, match="micro_batch_size"):
    grpo_job.check_job(cfg, num_hosts=4, devices_per_host=1)


@pytest.mark.parametrize("staleness", [0, 1, 2])
def test_disaggregated_at_any_staleness_is_accepted(staleness):
  # The learner's off_policy_steps (tests/test_agentic_equivalence.py's
  # "da_k1" run).
  cfg = grpo_job.GrpoJobConfig(learner="agentic_grpo", dataset="calc",
                               backend="mcjax_da", max_staleness=staleness)
  assert cfg.da_options().max_staleness == staleness
