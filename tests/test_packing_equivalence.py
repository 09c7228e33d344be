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

"""Sequence packing under mcjax gives the unpacked run's numbers.

One module-scoped set of runs of the GRPO example (DAPO, token-mean loss,
2 steps, 6 prompts x 2 samples): stock Tunix unpacked (1 process x 2
devices, the reference), and mcjax with `--max_seq_token_per_tpu=16` on
2 hosts x 2 devices and on 3 hosts x 2 devices. Rows are 3 prompt tokens
plus up to 6 completion tokens, so a packed row holds one or two rows and
the hosts need different numbers of packed rows K before they agree (the
test checks that they did).

Tolerances (fp32): rollouts and rewards exactly; losses rtol 1e-5,
atol 1e-6; parameters atol 1e-4 (they move by ~2e-2; measured difference
~2e-5). Not bit-identical because a packed row is a longer sequence: the
attention softmax and the matmuls sum over other lengths (masked keys add
exact zeros, but in another order and blocking), and Adam divides each
gradient by its own running size, which turns a 1e-7 relative difference in
a near-zero gradient entry into a visible parameter difference.
"""

import json

import numpy as np
import pytest

import example_runs

pytestmark = [pytest.mark.multihost, pytest.mark.e2e]

FLAGS = (
    "--steps=2", "--batch_size=6", "--num_generations=2",
    "--max_new_tokens=6", "--seed=3", "--learning_rate=1e-2",
    "--learner=dapo", "--beta=0",
)
BUDGET = "--max_seq_token_per_tpu=16"


@pytest.fixture(name="runs", scope="module")
def runs_fixture(shared_runs):
  return {
      "unpacked": shared_runs.example(
          *FLAGS, "--backend=tunix", "--num_hosts=1", "--devices_per_host=2"),
      "packed2": shared_runs.example(
          *FLAGS, BUDGET, "--backend=mcjax", "--num_hosts=2",
          "--devices_per_host=2"),
      "packed3": shared_runs.example(
          *FLAGS, BUDGET, "--backend=mcjax", "--num_hosts=3",
          "--devices_per_host=2"),
  }


def _records(run_dir):
  return [json.loads(line)
          for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("packed", ["packed2", "packed3"])
def test_packed_equals_unpacked(runs, packed):
  ref, got = runs["unpacked"], runs[packed]
  example_runs.assert_same_rollouts_and_rewards(ref, got, group=2)
  ref_recs, got_recs = _records(ref), _records(got)
  assert len(got_recs) == len(ref_recs) == 2
  np.testing.assert_allclose([r["loss"] for r in got_recs],
                             [r["loss"] for r in ref_recs],
                             rtol=1e-5, atol=1e-6)
  pa, pb = np.load(ref / "params.npz"), np.load(got / "params.npz")
  assert sorted(pa) == sorted(pb)
  for k in pa:
    np.testing.assert_allclose(pb[k], pa[k], rtol=0, atol=1e-4, err_msg=k)
  # The tolerance is far below what training moved.
  assert example_runs.assert_parameters_moved(got) > 1e-3


@pytest.mark.parametrize("packed, hosts", [("packed2", 2), ("packed3", 3)])
def test_hosts_needed_different_k_and_padding_is_reported(runs, packed,
                                                          hosts):
  recs = _records(runs[packed])
  per_host = [r["host_packed_rows"] for r in recs]
  assert all(len(k) == hosts for k in per_host), per_host
  # Unequal row lengths per host: some step's hosts needed different K, so
  # the agreement (max, padded with empty rows) was exercised.
  assert any(len(set(k)) > 1 for k in per_host), per_host
  for r in recs:
    # Some slots are padding (budget 16 never fits rows of 9 tokens twice),
    # never all of them.
    assert 0.0 < r["padded_token_share"] < 1.0, r


def test_unpacked_record_has_no_packing_fields(runs):
  for r in _records(runs["unpacked"]):
    assert r["padded_token_share"] is None
    assert r["host_packed_rows"] is None
