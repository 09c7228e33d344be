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

"""Agent turns' row identities (tunix_mcjax/agent_turns.py), in process."""

import threading

import numpy as np
import pytest

from tunix_mcjax import admission
from tunix_mcjax import agent_turns
from tunix_mcjax import ledger as ledger_lib

G = 2


def _stats():
  return ledger_lib.BatchStats(digest="d", prompt_tokens=-1)


def _turns(first_step=0, batches=((10, 11), (20, 21))):
  """A host's ledger with `batches` (global prompt indices) admitted."""
  train, evaluation = ledger_lib.StepLedger(), ledger_lib.StepLedger()
  for prompts in batches:
    train.record_batch(prompts, G, stats=_stats(), admission_s=0.0)
  row_ids = admission.TrainEvalRowIds(train, evaluation)
  return train, row_ids, agent_turns.AgentTurns(
      train, row_ids, first_step=first_step)


def _take(turns, row_ids, group, pair):
  with turns.turn({"group_id": group, "pair_index": pair}, 1):
    return row_ids.take(1)[0].tolist()


def test_turn_identity_is_global_prompt_pair_and_turn():
  train, row_ids, turns = _turns()
  # Group 1 is the host's second prompt of step 0 (global prompt 11); its
  # second turn keys its noise as sample pair + G.
  assert _take(turns, row_ids, 1, 1) == [11, 1]
  assert _take(turns, row_ids, 1, 1) == [11, 1 + G]
  assert _take(turns, row_ids, 1, 1) == [11, 1 + 2 * G]
  # Group 2 is step 1's first prompt (20), whatever order turns come in.
  assert _take(turns, row_ids, 2, 0) == [20, 0]
  # Only first turns count as admitted rows generated.
  assert [e.taken for e in train.entries] == [1, 1]


def test_a_step_closes_once_every_agent_took_a_turn():
  train, row_ids, turns = _turns()
  for group, pair in [(0, 1), (1, 0), (0, 0)]:
    _take(turns, row_ids, group, pair)
  with pytest.raises(RuntimeError, match="every admitted row"):
    train.close_step()
  _take(turns, row_ids, 1, 1)
  assert train.close_step().batch.batch == 0


def test_resumed_step_numbers_groups_from_the_resumed_step():
  # Resumed at step 5: the learner numbers groups from 5 x 2 on.
  _, row_ids, turns = _turns(first_step=5)
  assert _take(turns, row_ids, 11, 0) == [11, 0]
  assert _take(turns, row_ids, 12, 1) == [20, 1]


def test_a_turn_without_an_admitted_row_is_an_error():
  _, row_ids, turns = _turns()
  with pytest.raises(RuntimeError, match="no admitted row"):
    _take(turns, row_ids, 9, 0)  # Step 4 was never admitted.
  with pytest.raises(RuntimeError, match="no admitted row"):
    _take(turns, row_ids, 0, G)  # No sample G in a group of G.
  with pytest.raises(ValueError, match="one"):
    with turns.turn({"group_id": 0, "pair_index": 0}, 2):
      pass


def test_other_calls_take_from_the_ledger():
  _, row_ids, turns = _turns()
  assert not turns.is_turn({"step": 0})
  with turns.around({"step": 0}, ["a", "b"]):
    np.testing.assert_array_equal(row_ids.take(2), [[10, 0], [10, 1]])
  # A rendered conversation (a string) is one prompt.
  with turns.around({"group_id": 1, "pair_index": 0}, "abc:"):
    np.testing.assert_array_equal(row_ids.take(1), [[11, 0]])


def test_turns_from_many_threads_get_their_own_identities():
  _, row_ids, turns = _turns(batches=(tuple(range(8)),))
  got, errors = {}, []

  def agent(group, pair):
    try:
      got[(group, pair)] = [_take(turns, row_ids, group, pair)
                            for _ in range(3)]
    except Exception as e:  # pylint: disable=broad-except
      errors.append(e)

  threads = [threading.Thread(target=agent, args=(g, p))
             for g in range(8) for p in range(G)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert not errors
  assert got == {(g, p): [[g, p], [g, p + G], [g, p + 2 * G]]
                 for g in range(8) for p in range(G)}


def test_global_programs_off_the_main_thread_are_refused():
  agent_turns.require_main_thread("x")  # The main thread: fine.
  errors = []

  def off_main():
    try:
      agent_turns.require_main_thread("get_actor_per_token_logps")
    except RuntimeError as e:
      errors.append(str(e))

  t = threading.Thread(target=off_main)
  t.start()
  t.join()
  assert errors and "compute_logps_micro_batch_size" in errors[0]
