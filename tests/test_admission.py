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

"""Admission invariants: disjoint, complete, groups intact, equal shapes."""

import numpy as np
import pytest

from tunix_mcjax import admission


def _batches(num_batches, batch_size):
  return [
      {
          "prompts": [f"p{b * batch_size + i}" for i in range(batch_size)],
          "answer": np.arange(b * batch_size, (b + 1) * batch_size),
      }
      for b in range(num_batches)
  ]


@pytest.mark.parametrize("hosts,chunk", [(1, None), (2, None), (3, None),
                                         (2, 2), (4, 1), (2, 3)])
def test_shares_are_disjoint_complete_and_equal(hosts, chunk):
  batch_size, num_batches, g = 12, 3, 4
  data = _batches(num_batches, batch_size)
  per_host = []
  for h in range(hosts):
    adm = admission.Admission(admission.AdmissionConfig(
        num_hosts=hosts, host_index=h, num_generations=g, chunk_size=chunk))
    shards = list(adm.shard(data))
    assert len(shards) == num_batches
    assert all(len(s["prompts"]) == batch_size // hosts for s in shards)
    # One generate call per batch: a call covers rows of one batch.
    rows = np.concatenate([adm.row_ids.take(batch_size // hosts * g)
                           for _ in range(num_batches)])
    assert adm.row_ids.pending() == 0
    per_host.append((shards, rows))

  for b in range(num_batches):
    union = sorted(
        int(p[1:]) for shards, _ in per_host for p in shards[b]["prompts"]
    )
    # Complete and disjoint: every prompt of the batch exactly once.
    assert union == list(range(b * batch_size, (b + 1) * batch_size))
  for shards, rows in per_host:
    # Other fields follow their prompts.
    for s in shards:
      assert [f"p{a}" for a in s["answer"]] == list(s["prompts"])
    # Row ids: G consecutive rows per prompt, sample index 0..G-1, and the
    # prompt index names the admitted prompt.
    prompts = [int(p[1:]) for s in shards for p in s["prompts"]]
    np.testing.assert_array_equal(rows[:, 0], np.repeat(prompts, g))
    np.testing.assert_array_equal(rows[:, 1], np.tile(np.arange(g),
                                                      len(prompts)))


def test_chunked_dealing_interleaves_micro_batches():
  cfg = admission.AdmissionConfig(num_hosts=2, host_index=1,
                                  num_generations=2, chunk_size=2)
  np.testing.assert_array_equal(cfg.host_prompt_indices(8), [2, 3, 6, 7])


def test_contiguous_block_without_chunks():
  cfg = admission.AdmissionConfig(num_hosts=2, host_index=1, num_generations=2)
  np.testing.assert_array_equal(cfg.host_prompt_indices(8), [4, 5, 6, 7])


def test_indivisible_batch_is_an_error():
  cfg = admission.AdmissionConfig(num_hosts=3, host_index=0, num_generations=2)
  with pytest.raises(ValueError, match="does not divide over 3 hosts"):
    cfg.host_prompt_indices(8)


def test_chunk_must_divide_host_share():
  cfg = admission.AdmissionConfig(num_hosts=2, host_index=0,
                                  num_generations=2, chunk_size=3)
  with pytest.raises(ValueError, match="chunk size 3"):
    cfg.host_prompt_indices(8)


@pytest.mark.parametrize("g", [0, 1])
def test_single_sample_groups_are_an_error(g):
  with pytest.raises(ValueError, match="num_generations >= 2"):
    admission.AdmissionConfig(num_hosts=1, host_index=0, num_generations=g)


def test_bad_host_index():
  with pytest.raises(ValueError, match="host_index"):
    admission.AdmissionConfig(num_hosts=2, host_index=2, num_generations=2)


def test_short_last_batch_is_an_error_not_dropped():
  data = _batches(1, 8) + [{"prompts": ["x"] * 4, "answer": [0] * 4}]
  adm = admission.Admission(admission.AdmissionConfig(
      num_hosts=2, host_index=0, num_generations=2))
  it = iter(adm.shard(data))
  next(it)
  with pytest.raises(ValueError, match="same size"):
    next(it)


def test_mismatched_field_lengths():
  adm = admission.Admission(admission.AdmissionConfig(
      num_hosts=1, host_index=0, num_generations=2))
  with pytest.raises(ValueError, match="'answer' has 1 entries"):
    list(adm.shard([{"prompts": ["a", "b"], "answer": [1]}]))


def _stats(digest="d"):
  return admission.BatchStats(digest=digest, prompt_tokens=-1)


def test_engine_asking_for_unadmitted_rows_fails_clearly():
  ledger = admission.StepLedger()
  with pytest.raises(RuntimeError, match="shard_dataset"):
    ledger.take(2)


def test_ledger_rows_are_g_per_prompt_in_admission_order():
  ledger = admission.StepLedger()
  ledger.record_batch([5, 9], 3, stats=_stats(), admission_s=0.5)
  np.testing.assert_array_equal(ledger.take(4), [[5, 0], [5, 1], [5, 2],
                                                 [9, 0]])
  np.testing.assert_array_equal(ledger.take(2), [[9, 1], [9, 2]])
  closed = ledger.close_step()
  assert closed.batch.batch == 0 and closed.admission_s == 0.5
  assert closed.batch.stats == _stats()


def test_ledger_count_mismatch_names_both_sides():
  ledger = admission.StepLedger()
  ledger.record_batch([5], 2, stats=_stats(), admission_s=0.0)
  ledger.record_batch([6], 2, stats=_stats(), admission_s=0.0)
  ledger.take(1)
  # A call spanning two batches: the engine's count vs what admission left.
  with pytest.raises(RuntimeError) as e:
    ledger.take(3)
  msg = str(e.value)
  assert "asked for 3 rows" in msg
  assert "recorded 2 rows for batch 0" in msg and "1 are left" in msg
  # A step that ends before its batch was generated.
  with pytest.raises(RuntimeError) as e:
    ledger.close_step()
  msg = str(e.value)
  assert "took 1 rows of batch 0" in msg and "recorded 2 rows" in msg


def test_ledger_tolerates_prefetch():
  # The learner admits batch 1 before step 0 ends: each step still closes
  # its own batch, and the engine takes batch 0's rows first.
  ledger = admission.StepLedger()
  ledger.record_batch([0], 2, stats=_stats("a"), admission_s=0.25)
  ledger.record_batch([1], 2, stats=_stats("b"), admission_s=0.5)
  np.testing.assert_array_equal(ledger.take(2), [[0, 0], [0, 1]])
  assert ledger.pending() == 2
  first = ledger.close_step()
  assert first.batch.stats.digest == "a"
  # Admission time is charged to the step whose wall time it took.
  assert first.admission_s == 0.75
  np.testing.assert_array_equal(ledger.take(2), [[1, 0], [1, 1]])
  second = ledger.close_step()
  assert second.batch.stats.digest == "b" and second.admission_s == 0.0
  empty = ledger.close_step()
  assert empty.batch is None


def test_admission_writes_the_ledger():
  data = _batches(2, 4)
  adm = admission.Admission(
      admission.AdmissionConfig(num_hosts=2, host_index=1, num_generations=2),
      length_fn=lambda ps: [len(p) for p in ps])
  shares = list(adm.shard(data))
  entries = adm.ledger.entries
  assert [e.batch for e in entries] == [0, 1]
  for b, (entry, share) in enumerate(zip(entries, shares)):
    assert entry.stats.digest == admission.prompts_digest(data[b]["prompts"])
    assert entry.stats.prompt_tokens == sum(len(p) for p in share["prompts"])
    assert entry.admission_s > 0
    prompts = [int(p[1:]) for p in share["prompts"]]
    np.testing.assert_array_equal(entry.row_ids[:, 0], np.repeat(prompts, 2))


def test_stream_indices_continue_across_batches_and_epochs():
  data = _batches(2, 4)
  adm = admission.Admission(admission.AdmissionConfig(
      num_hosts=2, host_index=0, num_generations=2))
  ds = adm.shard(data)
  list(ds)
  list(ds)  # A second epoch draws fresh sampling keys.
  rows = np.concatenate([adm.row_ids.take(4) for _ in range(4)])
  assert adm.row_ids.pending() == 0
  np.testing.assert_array_equal(
      np.unique(rows[:, 0]), [0, 1, 4, 5, 8, 9, 12, 13]
  )
