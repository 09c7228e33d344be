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
  obs, reward, done, _ = env.step("aaba")
  # Turn 1: half of "db" names the operand d; turn 2: 3 of 4 are the "a".
  assert done and reward == pytest.approx(0.5 * 1 / 2 + 0.5 * 3 / 4)
  env.close()
  assert rows == [{"prompt_index": 7, "pair": 1, "prompt": "hd:",
                   "turns": ["db", "aaba"], "reward": reward}]


def test_reward_is_each_turns_share_of_its_letter():
  r = agentic_tasks.calc_reward
  # Prompt "cd:": turn 1 names d, turn 2 relays the tool's letter (f).
  assert r(["d", "f"], "cd:", "f") == r(["dddd", "ff"], "cd:", "f") == 1.0
  assert r(["", ""], "cd:", "f") == r(["c", "g"], "cd:", "f") == 0.0
  assert r(["d", ""], "cd:", "f") == r(["", "ffff"], "cd:", "f") == 0.5
  assert r(["dc", "fg"], "cd:", "f") == pytest.approx(0.5)
  # Length-neutral: a longer turn of the same share scores the same.
  assert r(["dc", "fg"], "cd:", "f") == r(["dcdc", "fgfg"], "cd:", "f")


def test_turns_stop_at_eos_or_a_colon():
  tok = models.ToyTokenizer()
  assert agentic_tasks.stop_tokens(tok) == [tok.eos_id(), *tok.encode(":")]


@pytest.mark.parametrize("flags,match", [
    (dict(dataset="calc"), "goes with --learner=agentic_grpo"),
    (dict(learner="agentic_grpo"), "goes with --learner=agentic_grpo"),
    (dict(learner="agentic_grpo", dataset="calc", num_iterations=2),
     "--num_iterations > 1"),
    (dict(learner="agentic_grpo", dataset="calc", batch_size=4,
          mini_batch_size=2), "several updates per batch"),
    (dict(learner="agentic_grpo", dataset="calc", eval_every=1),
     "--eval_every"),
    # The default staleness of mcjax_da is 1.
    (dict(learner="agentic_grpo", dataset="calc", backend="mcjax_da"),
     r"--backend=mcjax_da with --max_staleness >= 1 \(set --max_staleness=0"),
    # vLLM on CPU/GPU runs (tests/engines/test_vllm_agentic.py); on TPU not
    # yet.
    (dict(learner="agentic_grpo", dataset="calc", engine="vllm_tpu"),
     "--engine=vllm_tpu"),
    (dict(learner="agentic_grpo", dataset="calc", batch_size=1),
     "at least 2 prompts"),
    (dict(learner="agentic_grpo", dataset="calc", checkpoint_dir="/x"),
     "--checkpoint_dir"),
])
def test_unsupported_settings_are_refused_with_the_flag(flags, match):
  with pytest.raises(ValueError, match=match):
    grpo_job.GrpoJobConfig(**flags)


@pytest.mark.parametrize("backend", ["mcjax", "mcjax_da"])
def test_per_host_micro_batch_of_one_is_refused_before_hosts_start(backend):
  cfg = grpo_job.GrpoJobConfig(learner="agentic_grpo", dataset="calc",
                               batch_size=4, backend=backend, max_staleness=0)
  with pytest.raises(Exception, match="use at least 8"):
    grpo_job.check_job(cfg, num_hosts=4, devices_per_host=1)


def test_disaggregated_on_policy_is_accepted():
  cfg = grpo_job.GrpoJobConfig(learner="agentic_grpo", dataset="calc",
                               backend="mcjax_da", max_staleness=0)
  assert cfg.da_options().max_staleness == 0
