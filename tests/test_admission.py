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
    rows = adm.row_ids.take(num_batches * batch_size // hosts * g)
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


def test_engine_asking_for_unadmitted_rows_fails_clearly():
  tracker = admission.RowIdTracker()
  tracker.push_prompts([5], 2)
  with pytest.raises(RuntimeError, match="shard_dataset"):
    tracker.take(3)


def test_stream_indices_continue_across_batches_and_epochs():
  data = _batches(2, 4)
  adm = admission.Admission(admission.AdmissionConfig(
      num_hosts=2, host_index=0, num_generations=2))
  ds = adm.shard(data)
  list(ds)
  list(ds)  # A second epoch draws fresh sampling keys.
  rows = adm.row_ids.take(adm.row_ids.pending())
  np.testing.assert_array_equal(
      np.unique(rows[:, 0]), [0, 1, 4, 5, 8, 9, 12, 13]
  )
