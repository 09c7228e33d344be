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

import contextlib
import threading
import time

import numpy as np
import pytest
from tunix.rl.rollout import base_rollout

from tunix_mcjax import admission
from tunix_mcjax import agent_turns
from tunix_mcjax import ledger as ledger_lib
from tunix_mcjax.compat import agentic_learner

G = 2


def _stats():
  return ledger_lib.BatchStats(digest="d", prompt_tokens=-1)


def _turns(first_step=0, batches=((10, 11), (20, 21)), lag=None):
  """A host's ledger with `batches` (global prompt indices) admitted."""
  train, evaluation = ledger_lib.StepLedger(), ledger_lib.StepLedger()
  for prompts in batches:
    train.record_batch(prompts, G, stats=_stats(), admission_s=0.0)
  row_ids = admission.TrainEvalRowIds(train, evaluation)
  return train, row_ids, agent_turns.AgentTurns(
      train, row_ids, first_step=first_step, lag=lag)


def _engine(row_ids, calls=None, length=6):
  """A stand-in for the host's engine (the real ones: the equivalence
  tests): row r's tokens are its identity, then `length` - 2 sevens."""

  def run(prompts, max_generation_steps):
    prompts = [prompts] if isinstance(prompts, str) else prompts
    ids = row_ids.take(len(prompts))
    if calls is not None:
      calls.append((len(prompts), max_generation_steps))
    tokens = [np.asarray([*r, *[7] * (length - 2)]) for r in ids.tolist()]
    return base_rollout.RolloutOutput(
        text=[_decode(t.tolist()) for t in tokens], logits=[], tokens=tokens,
        left_padded_prompt_tokens=np.zeros((len(prompts), 3), np.int32),
        logprobs=[[-1.0 * (i + 1)] * length for i in range(len(prompts))])

  return run


def _decode(tokens):
  return ",".join(map(str, tokens))


def _turn(turns, run, group, pair, budget=None):
  return turns.generate({"group_id": group, "pair_index": pair}, "p:",
                        budget, run, decode=_decode)


def _take(turns, row_ids, group, pair):
  return _turn(turns, _engine(row_ids), group, pair).tokens[0][:2].tolist()


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
    turns.generate({"group_id": 0, "pair_index": 0}, ["a", "b"], None,
                   _engine(row_ids), decode=_decode)


def test_other_calls_take_from_the_ledger():
  _, row_ids, turns = _turns()
  calls = []
  assert not turns.is_turn({"step": 0})
  out = turns.generate({"step": 0}, ["a", "b"], 5, _engine(row_ids, calls),
                       decode=_decode)
  assert [t[:2].tolist() for t in out.tokens] == [[10, 0], [10, 1]]
  # A rendered conversation (a string) is one prompt.
  out = turns.generate({"group_id": 1, "pair_index": 0}, "abc:", 5,
                       _engine(row_ids, calls), decode=_decode)
  assert out.tokens[0][:2].tolist() == [11, 0]
  # The other call as asked; the turn to the full budget, then cut.
  assert calls == [(2, 5), (1, None)]


def test_a_turn_is_cut_to_its_own_budget():
  _, row_ids, turns = _turns()
  out = _turn(turns, _engine(row_ids, length=6), 1, 1, budget=4)
  assert out.tokens[0].tolist() == [11, 1, 7, 7]
  assert out.text == ["11,1,7,7"] and out.logprobs == [[-1.0] * 4]
  # Within its budget: as the engine returned it.
  out = _turn(turns, _engine(row_ids, length=6), 1, 1, budget=9)
  assert out.tokens[0].tolist() == [11, 1 + G, 7, 7, 7, 7]
  assert out.text == ["11,3,7,7,7,7"] and len(out.logprobs[0]) == 6


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


def _wait_until(what, timeout_s=30.0):
  deadline = time.monotonic() + timeout_s
  while not what():
    assert time.monotonic() < deadline, "timed out"
    time.sleep(0.01)


def test_turns_waiting_for_the_engine_run_in_one_call():
  _, row_ids, turns = _turns(batches=(tuple(range(8)),))
  calls, release, results = [], threading.Event(), {}
  engine = _engine(row_ids, calls)

  def run(prompts, budget):
    if not calls:  # The first call holds the engine until 5 more wait.
      assert release.wait(30)
    return engine(prompts, budget)

  def agent(group):
    results[group] = _turn(turns, run, group, 0).tokens[0][:2].tolist()

  first = threading.Thread(target=agent, args=(0,))
  first.start()
  _wait_until(lambda: turns._busy)  # pylint: disable=protected-access
  others = [threading.Thread(target=agent, args=(g,)) for g in range(1, 6)]
  for t in others:
    t.start()
  _wait_until(lambda: len(turns._pending) == 5)  # pylint: disable=protected-access
  release.set()
  for t in [first, *others]:
    t.join(30)
  # One row, then the 5 that waited (padded to 8 rows, a power of two).
  assert calls == [(1, None), (8, None)]
  assert results == {g: [g, 0] for g in range(6)}


def test_an_engine_error_reaches_every_turn_of_its_call():
  _, row_ids, turns = _turns()

  def run(prompts, budget):
    raise RuntimeError("engine down")

  with pytest.raises(RuntimeError, match="engine down"):
    _turn(turns, run, 0, 0)
  # The engine is free again.
  assert _take(turns, row_ids, 0, 1) == [10, 1]


class _Config:
  """The two fields of Tunix's RLTrainingConfig that `order_logps` reads."""

  def __init__(self, micro, mini=None):
    self.train_micro_batch_size, self.mini_batch_size = micro, mini


class _Example:
  """A train example of `groups` groups (only its rows are read)."""

  def __init__(self, groups):
    self.prompt_ids = np.zeros((groups * G, 3), np.int32)


def test_rollout_thread_log_probs_wait_for_the_updates_before_them():
  """The learner's rollout thread asks for each group's log-probs as the
  group finishes; with 2 groups per update, group 2's wait for the first
  update and group 4's for the second, so every host issues L0 L1 T L2 L3
  T L4."""
  _, _, turns = _turns(batches=((10, 11, 12, 13, 14),))
  events, lock = [], threading.Lock()

  def rollout_thread():
    for group in range(5):
      turns.order_logps(_Config(2))
      with lock:
        events.append(f"L{group}")

  t = threading.Thread(target=rollout_thread)
  t.start()
  for _ in range(2):
    while True:  # The main thread trains once two groups are ready.
      with lock:
        ready = sum(e.startswith("L") for e in events) - 2 * sum(
            e == "T" for e in events)
      if ready >= 2:
        break
      time.sleep(0.01)
    time.sleep(0.1)  # A group's log-probs that did not wait would show.
    with lock:
      events.append("T")
    turns.trained([_Example(2)])
  t.join(timeout=10)
  assert events == ["L0", "L1", "T", "L2", "L3", "T", "L4"]


def test_main_thread_log_probs_do_not_wait(monkeypatch):
  _, _, turns = _turns()
  monkeypatch.setattr(agent_turns, "ORDER_TIMEOUT_S", 0.2)
  turns.order_logps(_Config(1))
  # No update yet: on the rollout thread this one would wait, and fail.
  turns.order_logps(_Config(1))


@pytest.mark.parametrize("evaluating", [False, True])
def test_a_train_step_that_never_comes_is_an_error(monkeypatch, evaluating):
  _, _, turns = _turns()
  monkeypatch.setattr(agent_turns, "ORDER_TIMEOUT_S", 0.2)
  errors = []

  def rollout_thread():
    try:
      # An evaluation pass's log-probs do not wait (the main thread waits
      # for the pass).
      with (turns.evaluation() if evaluating else contextlib.nullcontext()):
        for _ in range(2):
          turns.order_logps(_Config(1))
    except RuntimeError as e:
      errors.append(str(e))

  t = threading.Thread(target=rollout_thread)
  t.start()
  t.join(timeout=10)
  if evaluating:
    assert not errors
  else:
    assert errors and "waited 0 s for the updates of the 1 groups" in errors[0]


# --- off-policy (mcjax_da, lag K = off_policy_steps) -----------------------


def _pinned_engine(turns, row_ids, seen):
  """The engine, recording the (policy version, batch step) each call's
  turns are pinned to, as the DA engine reads them."""
  engine = _engine(row_ids)

  def run(prompts, budget):
    seen.append(turns.current_turns())
    return engine(prompts, budget)

  return run


@pytest.mark.parametrize("first_step,lag,versions", [
    (0, 1, [(0, 0), (0, 1), (1, 2)]),
    (0, 0, [(0, 0), (1, 1), (2, 2)]),
    (0, 2, [(0, 0), (0, 1), (0, 2)]),
    (4, 1, [(4, 4), (4, 5), (5, 6)]),  # Resumed at step 4.
])
def test_turns_are_pinned_to_their_batch_policy(first_step, lag, versions):
  batches = ((10, 11), (20, 21), (30, 31))
  _, row_ids, turns = _turns(first_step, batches, lag=lag)
  turns.observe_groups()
  seen = []
  run = _pinned_engine(turns, row_ids, seen)
  for batch in range(3):
    for group in range(2):
      g = (first_step + batch) * 2 + group
      for pair in range(G):
        _turn(turns, run, g, pair)
    for _ in range(2):
      turns.group_done()
  assert seen[::4] == versions
  assert turns.current_turns() is None  # Outside an engine call.


def test_colocated_turns_are_not_pinned():
  _, row_ids, turns = _turns()
  seen = []
  _turn(turns, _pinned_engine(turns, row_ids, seen), 0, 0)
  assert seen == [None]


def test_next_batch_agents_wait_for_the_groups_before_them():
  """Off-policy, batch 1's first turns start once both of batch 0's groups
  ended (the learner's producer reports them); later turns of batch 0's
  agents do not wait."""
  _, row_ids, turns = _turns(lag=1)
  turns.observe_groups()
  run, started = _engine(row_ids), threading.Event()
  _turn(turns, run, 0, 0)
  results = []

  def next_batch_agent():
    started.set()
    results.append(_turn(turns, run, 2, 0).tokens[0][:2].tolist())

  t = threading.Thread(target=next_batch_agent)
  t.start()
  assert started.wait(10)
  # Batch 0's agent takes its second turn meanwhile.
  assert _turn(turns, run, 0, 0).tokens[0][:2].tolist() == [10, 2]
  turns.group_done()
  time.sleep(0.2)
  assert not results  # One group of two ended: still waiting.
  turns.group_done()
  t.join(10)
  assert results == [[20, 0]]


def test_a_learner_that_does_not_report_groups_is_an_error():
  _, row_ids, turns = _turns(lag=1)
  with pytest.raises(RuntimeError, match="compat.agentic_learner"):
    _turn(turns, _engine(row_ids), 2, 0)


def test_held_agents_time_out_with_a_clear_error(monkeypatch):
  _, row_ids, turns = _turns(lag=1)
  turns.observe_groups()
  monkeypatch.setattr(agent_turns, "ORDER_TIMEOUT_S", 0.2)
  with pytest.raises(RuntimeError, match="for the 2 groups before it"):
    _turn(turns, _engine(row_ids), 2, 0)


def _queued_behind_one(turns, row_ids, first, others):
  """Agent turns of group `first`, then `others` while the engine holds the
  first call; each call's rows and what it saw, as (evaluating, pinned
  (version, step), rows)."""
  calls, release, seen = [], threading.Event(), []
  engine = _engine(row_ids, calls)

  def run(prompts, budget):
    seen.append((row_ids.is_evaluating, turns.current_turns()))
    if not calls:
      assert release.wait(30)
    return engine(prompts, budget)

  threads = [threading.Thread(target=_turn, args=(turns, run, g, 0))
             for g in (first, *others)]
  threads[0].start()
  _wait_until(lambda: turns._busy)  # pylint: disable=protected-access
  for t in threads[1:]:
    t.start()
  _wait_until(lambda: len(turns._pending) == len(others))  # pylint: disable=protected-access
  release.set()
  for t in threads:
    t.join(30)
  return sorted((*s, n) for s, (n, _) in zip(seen, calls))


def test_turns_of_two_policies_never_share_an_engine_call():
  _, row_ids, turns = _turns(batches=(tuple(range(8)), tuple(range(8, 16))),
                             lag=0)
  # Step 0's group 1 and step 1's groups 8, 9 wait together (at lag 0
  # step 1 runs on version 1).
  assert _queued_behind_one(turns, row_ids, 0, (1, 8, 9)) == [
      (False, (0, 0), 1), (False, (0, 0), 1), (False, (1, 1), 2)]


@pytest.mark.parametrize("lag", [None, 1])
def test_next_batch_log_probs_wait_for_the_synced_step_to_be_logged(lag):
  """A group of the next batch waits for the last update's weight sync and
  the main thread's logging of that step (a cross-host gather), colocated
  (lag None: its agents start after the sync, and a fast one finished
  before the logging, a Gloo abort seen when one host's compiles were
  slower) and off-policy (it may end before the sync): every host issues
  T S M L."""
  _, _, turns = _turns(lag=lag)
  events = []

  def rollout_thread():
    for group in range(3):
      turns.order_logps(_Config(2))
      events.append(f"L{group}")

  t = threading.Thread(target=rollout_thread)
  t.start()
  _wait_until(lambda: len(events) == 2)
  events.append("T")
  turns.trained([_Example(2)])
  time.sleep(0.2)
  assert events == ["L0", "L1", "T"]  # Trained, not synced yet.
  events.append("S")
  turns.weights_synced()
  time.sleep(0.2)
  # Metrics buffered off the main thread (the rollout thread's rewards)
  # log nothing.
  threading.Thread(target=turns.metrics_buffered).start()
  time.sleep(0.2)
  assert events == ["L0", "L1", "T", "S"]  # Synced, its step not logged.
  events.append("M")
  turns.metrics_buffered()
  t.join(10)
  assert events == ["L0", "L1", "T", "S", "M", "L2"]


# --- evaluation (compat.agentic_learner numbers its groups) ----------------

_EVAL = agentic_learner.EVAL_GROUP_OFFSET


def _with_eval_prompts(row_ids, prompts=(2**31, 2**31 + 1)):
  row_ids.evaluation.record_batch(prompts, G, stats=_stats(), admission_s=0.0)


def test_evaluation_turns_take_evaluation_identities_each_pass():
  train, row_ids, turns = _turns()
  _with_eval_prompts(row_ids)
  for _ in range(2):  # Two passes: the same identities (the same noise).
    with turns.evaluation():
      # The pass's second prompt, sample 1: its first and second turns.
      assert _take(turns, row_ids, _EVAL + 1, 1) == [2**31 + 1, 1]
      assert _take(turns, row_ids, _EVAL + 1, 1) == [2**31 + 1, 1 + G]
  # No training row was taken, and evaluation rows stay out of the step.
  assert train.pending() == 4 * G


def test_an_evaluation_turn_without_admitted_rows_is_an_error():
  _, row_ids, turns = _turns()
  with pytest.raises(RuntimeError, match="admission recorded 0 evaluation"):
    _turn(turns, _engine(row_ids), _EVAL, 0)


def test_evaluation_and_training_turns_never_share_an_engine_call():
  _, row_ids, turns = _turns(batches=(tuple(range(8)),))
  _with_eval_prompts(row_ids)
  # Training turns outside the evaluation ledger, evaluation ones inside.
  assert _queued_behind_one(turns, row_ids, 0, (1, _EVAL, _EVAL + 1)) == [
      (False, None, 1), (False, None, 1), (True, None, 2)]
