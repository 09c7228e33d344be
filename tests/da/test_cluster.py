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

"""The disaggregated cluster's admission ahead of the learner."""

import collections
import types

import numpy as np
import pytest

from tunix_mcjax import admission
from tunix_mcjax.da import cluster
from tunix_mcjax.da import remote_engine


def _batches(n: int, size: int = 4):
  return [{"prompts": [f"p{b}-{i}" for i in range(size)],
           "answers": [str(i) for i in range(size)]} for b in range(n)]


@pytest.mark.parametrize("depth", [0, 1, 2])
def test_ledger_holds_exactly_the_buffered_batches(depth):
  ledger = admission.StepLedger()
  sharded = admission.Admission(
      admission.AdmissionConfig(num_hosts=2, host_index=1,
                                num_generations=2),
      ledger=ledger,
  ).shard(_batches(4))
  ahead = cluster._Lookahead(sharded, depth)  # pylint: disable=protected-access
  seen = []
  for batch in ahead:
    seen.append(batch["prompts"])
    # The learner's batch is the oldest open entry; the rest are buffered.
    untaken = ledger.entries[1:]
    assert len(untaken) == len(ahead.buffered())
    assert len(ahead.buffered()) <= depth
    for entry, buffered in zip(untaken, ahead.buffered()):
      # Host 1 of 2 takes prompts 2, 3 of each batch of 4: row ids name
      # the global prompt index.
      assert buffered["prompts"][0].split("-")[1] == "2"
      assert entry.row_ids[0, 0] % 4 == 2
    ledger.take(ledger.entries[0].row_ids.shape[0])
    ledger.close_step()
  assert seen == [b["prompts"][2:] for b in _batches(4)]
  assert not ledger.entries


def _one_host_ahead(num_batches, depth):
  """A ledger and `num_batches` batches of 4 prompts (G = 2) admitted on one
  host, `depth` ahead of the learner."""
  ledger = admission.StepLedger()
  sharded = admission.Admission(
      admission.AdmissionConfig(num_hosts=1, host_index=0,
                                num_generations=2), ledger=ledger,
  ).shard(_batches(num_batches))
  return ledger, cluster._Lookahead(sharded, depth)  # pylint: disable=protected-access


def _da_cluster_reading(ledger, lookahead, num_generations, **micro):
  """A `McJaxDaRLCluster` with only the state `_upcoming` reads (building
  one needs Ray and rollout hosts); `micro`: this host's training config's
  batch knobs (default: micro-batches of 2 prompts)."""
  da = object.__new__(cluster.McJaxDaRLCluster)
  da.ledger = ledger
  da._lookahead = lookahead  # pylint: disable=protected-access
  da._num_generations = num_generations  # pylint: disable=protected-access
  knobs = dict(mini_batch_size=None, train_micro_batch_size=2,
               rollout_micro_batch_size=None,
               compute_logps_micro_batch_size=None)
  knobs.update(micro)
  da.cluster_config = types.SimpleNamespace(
      training_config=types.SimpleNamespace(**knobs))
  return da


@pytest.mark.parametrize("depth", [1, 2])
def test_micro_batches_are_prefetched_in_the_learners_calls(depth):
  # 4 prompts per host and batch, G = 2: 8 rows, generated (as Tunix's
  # learner does with micro-batches of 2 prompts) in calls of 4 rows.
  ledger, ahead = _one_host_ahead(4, depth)
  da = _da_cluster_reading(ledger, ahead, 2)
  upcoming = da._upcoming  # pylint: disable=protected-access
  for b, batch in enumerate(ahead):
    rows = [p for p in batch["prompts"] for _ in range(2)]
    for lo in (0, 4):
      ids = ledger.take(4)
      assert ids[0, 0] == 4 * b + lo // 2
      calls = upcoming(depth, 4)
      # The rest of this batch, then the next `depth` batches, 4 rows a
      # call, each with its own rows' ids.
      left = 1 if lo == 0 else 0
      assert len(calls) == left + 2 * min(depth, 3 - b)
      if left:
        assert calls[0][0] == rows[4:]
        assert calls[0][1][0, 0] == 4 * b + 2
      for k, (prompts, call_ids) in enumerate(calls[left:]):
        assert len(prompts) == 4
        assert call_ids[0, 0] == 4 * (b + 1 + k // 2) + 2 * (k % 2)
    assert not upcoming(0, 4)  # Synchronous: nothing ahead.
    ledger.close_step()


def test_calls_that_split_a_batch_unevenly_are_refused():
  ledger, ahead = _one_host_ahead(2, 1)
  next(iter(ahead))
  ledger.take(3)
  da = _da_cluster_reading(ledger, ahead, 2)
  with pytest.raises(RuntimeError, match="is not one of the calls of"):
    da._upcoming(1, 3)  # pylint: disable=protected-access


@pytest.mark.parametrize(
    ("prompts", "g", "knobs", "calls"),
    [
        # Nothing set: one call for the batch.
        (4, 2, {}, [8]),
        # Training micro-batch 2: a call each (the rollout and log-prob
        # micro-batches default to it).
        (4, 2, dict(train_micro_batch_size=2), [4, 4]),
        # Tunix's run_qwen3_8b_disagg.sh: training micro-batch 1, rollout
        # micro-batch 8: the whole batch of 8 merged, one call.
        (8, 2, dict(train_micro_batch_size=1, rollout_micro_batch_size=8),
         [16]),
        # Rollout micro-batch 2 over training micro-batches of 1: two are
        # merged per call.
        (4, 2, dict(train_micro_batch_size=1, rollout_micro_batch_size=2),
         [4, 4]),
        # A rollout micro-batch smaller than the training one: each merge
        # (one micro-batch of 4) in calls of 2 prompts.
        (8, 1, dict(train_micro_batch_size=4, rollout_micro_batch_size=2),
         [2, 2, 2, 2]),
        # lcm(rollout 2, log-probs 3) = 6 prompts: micro-batches of 4 merge
        # to 8 (the first count >= 6), called 2 at a time; the mini-batch's
        # last micro-batch is flushed alone.
        (12, 1, dict(train_micro_batch_size=4, rollout_micro_batch_size=2,
                     compute_logps_micro_batch_size=3), [2, 2, 2, 2, 2, 2]),
        (12, 1, dict(train_micro_batch_size=4, rollout_micro_batch_size=6,
                     compute_logps_micro_batch_size=3), [6, 2, 4]),
        # Two mini-batches: a merge never spans them.
        (8, 1, dict(mini_batch_size=4, train_micro_batch_size=2,
                    rollout_micro_batch_size=3), [3, 1, 3, 1]),
    ])
def test_the_learners_generate_calls(prompts, g, knobs, calls):
  full = dict(mini_batch_size=None, train_micro_batch_size=None,
              rollout_micro_batch_size=None,
              compute_logps_micro_batch_size=None)
  full.update(knobs)
  assert cluster.learner_generate_calls(
      prompts, num_generations=g, **full) == calls


def test_prefetched_calls_follow_a_rollout_micro_batch_of_its_own():
  # 4 prompts, G = 2, training micro-batch 1 and rollout micro-batch 2: the
  # learner generates each batch in two calls of 4 rows.
  ledger, ahead = _one_host_ahead(3, 1)
  da = _da_cluster_reading(ledger, ahead, 2, train_micro_batch_size=1,
                           rollout_micro_batch_size=2)
  next(iter(ahead))
  ledger.take(4)
  calls = da._upcoming(1, 4)  # pylint: disable=protected-access
  assert [len(p) for p, _ in calls] == [4, 4, 4]
  assert [ids[0, 0] for _, ids in calls] == [2, 4, 6]
  # A call the plan does not make (2 rows) is refused.
  ledger.take(2)
  with pytest.raises(RuntimeError, match="is not one of the calls of"):
    da._upcoming(1, 2)  # pylint: disable=protected-access


def _part(rows, version, first_token, wait=1.0):
  return remote_engine.GeneratedBatch(
      tokens=[np.array([first_token + i]) for i in range(rows)],
      logprobs=[np.array([-0.1 * (first_token + i)]) for i in range(rows)],
      version=version, rollout_wait_s=wait, generate_s=2 * wait,
      weights_wait_s=wait, weights_get_s=wait, weights_install_s=wait,
      reissued_rows=rows)




def test_training_micro_batches_take_generated_rows_in_order():
  # Two calls of 4 rows, trained in micro-batches of 2, 4 and 2 rows.
  generated = collections.deque([_part(4, 3, 0, wait=1.0),
                                 _part(4, 3, 4, wait=2.0)])

  def take(rows):
    return cluster.take_generated(generated, rows)

  first = take(2)
  assert [int(t[0]) for t in first.tokens] == [0, 1]
  # The call's waits and counts go with its first rows only.
  assert (first.rollout_wait_s, first.reissued_rows) == (1.0, 4)
  middle = take(4)
  assert [int(t[0]) for t in middle.tokens] == [2, 3, 4, 5]
  assert [float(lp[0]) for lp in middle.logprobs] == pytest.approx(
      [-0.2, -0.3, -0.4, -0.5])
  assert (middle.rollout_wait_s, middle.generate_s, middle.reissued_rows,
          middle.weights_wait_s, middle.version) == (2.0, 4.0, 4, 2.0, 3)
  last = take(2)
  assert [int(t[0]) for t in last.tokens] == [6, 7]
  assert (last.rollout_wait_s, last.reissued_rows) == (0.0, 0)
  assert not generated
  with pytest.raises(RuntimeError, match="only 0 generated rows wait"):
    take(1)


def test_a_micro_batch_over_two_policy_versions_is_refused():
  generated = collections.deque([_part(2, 1, 0), _part(2, 2, 2)])
  with pytest.raises(RuntimeError, match=r"policy versions \[1, 2\]"):
    cluster.take_generated(generated, 4)


def test_a_steps_micro_batches_combine_into_one_record():
  first = {"policy_version": 2, "staleness": 1, "rollout_wait_s": 1.0,
           "weights_wait_s": 0.5, "reissued_rows": 0,
           "is_weight_mean": 1.0, "is_weight_min": 0.9,
           "is_weight_max": 1.1, "misaligned_tokens": 3, "new_field": "a"}
  second = {**first, "rollout_wait_s": 2.0, "weights_wait_s": 0.25,
            "reissued_rows": 4, "is_weight_mean": 2.0,
            "is_weight_min": 0.5, "is_weight_max": 1.5,
            "misaligned_tokens": 1, "new_field": "b"}
  merged = cluster._merge_parts(first, second, 30, 10)  # pylint: disable=protected-access
  assert merged == {
      "policy_version": 2, "staleness": 1, "rollout_wait_s": 3.0,
      "weights_wait_s": 0.5, "reissued_rows": 4,
      "is_weight_mean": 1.25, "is_weight_min": 0.5, "is_weight_max": 1.5,
      "misaligned_tokens": 4, "new_field": "b"}
