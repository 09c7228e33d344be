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

"""Reward functions scored in a process pool vs in-process."""

import inspect
import os

import pytest

from tunix_mcjax import rewards_pool
from tunix_mcjax.recipes import tasks


def raises_on_boom(prompts, completions, **kwargs):
  """Module level, so the pool can pickle it; raises on one completion."""
  del prompts, kwargs
  out = []
  for c in completions:
    if c == "boom":
      raise ZeroDivisionError("boom row")
    out.append(float(len(c)))
  return out


def worker_pid(prompts, completions, **kwargs):
  del prompts, kwargs
  return [float(os.getpid())] * len(completions)


ROWS = 11  # Uneven over 3 workers: chunks of 4, 4, 3.
PROMPTS = [f"q{i}" for i in range(ROWS)]
COMPLETIONS = [f"Work... #### {i * 7}" if i % 3 else f"\\boxed{{{i}}} no"
               for i in range(ROWS)]
ANSWERS = [f"... #### {i * 7}" for i in range(ROWS)]


@pytest.fixture(scope="module")
def pool():
  fns = [tasks.gsm8k_answer_reward, tasks.gsm8k_format_reward,
         raises_on_boom, worker_pid]
  with rewards_pool.RewardPool(fns, num_workers=3) as p:
    yield p


def test_pooled_rewards_equal_in_process(pool):
  answer, fmt = pool.fns[0], pool.fns[1]
  # Name and signature kept: Tunix reads both.
  assert answer.__name__ == "gsm8k_answer_reward"
  assert inspect.signature(answer) == inspect.signature(
      tasks.gsm8k_answer_reward)
  kwargs = dict(answer=ANSWERS, mode="train")
  want = tasks.gsm8k_answer_reward(PROMPTS, COMPLETIONS, **kwargs)
  assert 0 < sum(want) < ROWS  # Both outcomes occur.
  assert answer(PROMPTS, COMPLETIONS, **kwargs) == want
  assert fmt(PROMPTS, COMPLETIONS, mode="eval") == (
      tasks.gsm8k_format_reward(PROMPTS, COMPLETIONS))
  assert answer([], [], answer=[]) == []


def test_rows_are_scored_in_workers_by_chunk(pool):
  pids = pool.fns[3](PROMPTS, COMPLETIONS)
  assert len(pids) == ROWS and os.getpid() not in pids
  # Contiguous chunks of 4, 4 and 3 rows, each in one worker (which worker
  # takes which chunk is the executor's choice).
  assert len(set(pids[:4])) == len(set(pids[4:8])) == len(
      set(pids[8:])) == 1


def test_a_raising_reward_names_itself_and_its_row(pool):
  rows = list(COMPLETIONS)
  rows[6] = "boom"  # In the second chunk.
  with pytest.raises(rewards_pool.RewardWorkerError) as e:
    pool.fns[2](PROMPTS, rows)
  msg = str(e.value)
  assert "'raises_on_boom'" in msg and "ZeroDivisionError: boom row" in msg
  assert "row 6 of the batch" in msg and "'boom'" in msg
  # The pool still works afterwards.
  assert pool.fns[2](PROMPTS[:2], ["a", "bb"]) == [1.0, 2.0]


def test_unpicklable_reward_is_refused_by_name():
  def local_reward(prompts, completions, **kwargs):
    return [0.0] * len(completions)

  with pytest.raises(ValueError, match="'local_reward' cannot be pickled"):
    rewards_pool.RewardPool([tasks.gsm8k_format_reward, local_reward],
                            num_workers=1)
  with pytest.raises(ValueError, match="'<lambda>' cannot be pickled"):
    rewards_pool.RewardPool(lambda p, c: [0.0] * len(c), num_workers=1)
