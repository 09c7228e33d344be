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

import pytest

from tunix_mcjax import admission
from tunix_mcjax.da import cluster


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


def _da_cluster_reading(ledger, lookahead, num_generations):
  """A `McJaxDaRLCluster` with only the state `_upcoming` reads (building
  one needs Ray and rollout hosts)."""
  da = object.__new__(cluster.McJaxDaRLCluster)
  da.ledger = ledger
  da._lookahead = lookahead  # pylint: disable=protected-access
  da._num_generations = num_generations  # pylint: disable=protected-access
  return da


@pytest.mark.parametrize("depth", [1, 2])
def test_micro_batches_are_prefetched_in_the_learners_calls(depth):
  # 4 prompts per host and batch, G = 2: 8 rows, generated (as Tunix's
  # learner does with micro-batches of 2 prompts) in calls of 4 rows.
  ledger = admission.StepLedger()
  sharded = admission.Admission(
      admission.AdmissionConfig(num_hosts=1, host_index=0,
                                num_generations=2), ledger=ledger,
  ).shard(_batches(4))
  ahead = cluster._Lookahead(sharded, depth)  # pylint: disable=protected-access
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
  ledger = admission.StepLedger()
  sharded = admission.Admission(
      admission.AdmissionConfig(num_hosts=1, host_index=0,
                                num_generations=2), ledger=ledger,
  ).shard(_batches(2))
  ahead = cluster._Lookahead(sharded, 1)  # pylint: disable=protected-access
  next(iter(ahead))
  ledger.take(3)
  da = _da_cluster_reading(ledger, ahead, 2)
  with pytest.raises(RuntimeError, match="rollout micro-batch must be"):
    da._upcoming(1, 3)  # pylint: disable=protected-access


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
