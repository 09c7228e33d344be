# Copyright 2026 The tunix_mcjax Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""mcjax gives stock Tunix's numbers in bfloat16 (`--param_dtype=bfloat16`).

The GRPO example, 2 steps with KL on, parameters and activations in
bfloat16 (optimizer moments follow the parameters, as in Tunix), as stock
Tunix and as mcjax at 2 hosts x 2 devices (fsdp) and 3 hosts x 2 devices
(hsdp: the tiny model's widths do not divide over 6 devices).

Tolerances, measured on CPU on 2026-12-03 (jax 0.12.0.1):
- completions and rewards: identical in both layouts (exact);
- 2 x 2 (fsdp over 4 devices, as stock's 1 x 4): losses and parameters
  bit-identical; checked at the fp32 tolerance, rtol = atol = 1e-6;
- 3 x 2 (hsdp) against stock's 1 x 2 (fsdp): the gradient is reduced over
  other groups of devices in another order, and bfloat16 rounds each
  partial sum, so the runs differ after the first update. Measured: step-2
  loss 1.3357e-3 vs 1.3436e-3 (7.9e-6 apart, 0.6 %); 40 % of the
  parameters differ, by at most 0.0201; the difference's norm is 4.3 % of
  the training movement's (final - initial). Stated: |loss difference| <=
  1e-5 + 1e-2 |loss|; every parameter within 2 * lr * steps = 0.04 (Adam
  moves a coordinate by about lr per step whatever the gradient's size, so
  a coordinate whose gradient is near zero can move the other way in one
  run: at most 2 lr apart per step); and the difference's norm at most 10 %
  of the movement's, which a wrong step (another batch, a lost update)
  would exceed.
"""

import json

import numpy as np
import pytest

import example_runs

pytestmark = [pytest.mark.multihost, pytest.mark.e2e]

BF16 = ("--param_dtype=bfloat16",)
# 3 hosts: 6 prompts (2 per host) x 2 samples.
THREE = (*(f for f in example_runs.EQUIVALENCE_FLAGS
           if not f.startswith(("--batch_size", "--num_generations"))),
         "--batch_size=6", "--num_generations=2")
LR, STEPS = 1e-2, 2  # example_runs.EQUIVALENCE_FLAGS

@pytest.fixture(name="runs", scope="module")
def runs_fixture(shared_runs):
  eq = example_runs.EQUIVALENCE_FLAGS
  return {
      "2x2": (shared_runs.example(*eq, *BF16, "--backend=tunix",
                                  "--num_hosts=2", "--devices_per_host=2"),
              shared_runs.example(*eq, *BF16, "--backend=mcjax",
                                  "--num_hosts=2", "--devices_per_host=2")),
      "3x2": (shared_runs.example(*THREE, *BF16, "--backend=tunix",
                                  "--num_hosts=1", "--devices_per_host=2"),
              shared_runs.example(*THREE, *BF16, "--backend=mcjax",
                                  "--num_hosts=3", "--devices_per_host=2")),
  }


@pytest.mark.parametrize("layout, group", [("2x2", 4), ("3x2", 2)])
def test_same_rollouts_and_rewards_in_bfloat16(runs, layout, group):
  stock, mcjax = runs[layout]
  example_runs.assert_same_rollouts_and_rewards(stock, mcjax, group=group)


def test_same_losses_and_parameters_in_bfloat16_fsdp(runs):
  stock, mcjax = runs["2x2"]
  example_runs.assert_same_losses_and_parameters(stock, mcjax)
  example_runs.assert_parameters_moved(mcjax)


def test_losses_and_parameters_in_bfloat16_hsdp_within_stated_bounds(runs):
  stock, mcjax = runs["3x2"]
  ref = json.loads((stock / "records.json").read_text())
  got = json.loads((mcjax / "records.json").read_text())
  assert [r["step"] for r in got] == [1, 2]
  np.testing.assert_allclose([r["loss"] for r in got],
                             [r["loss"] for r in ref], rtol=1e-2, atol=1e-5)
  np.testing.assert_allclose([r["reward_mean"] for r in got],
                             [r["reward_mean"] for r in ref], rtol=1e-6)
  init = np.load(stock / "params_init.npz")
  pa, pb = np.load(stock / "params.npz"), np.load(mcjax / "params.npz")
  assert sorted(pa.files) == sorted(pb.files) == sorted(init.files)
  for k in pa.files:
    np.testing.assert_allclose(pb[k], pa[k], rtol=0, atol=2 * LR * STEPS,
                               err_msg=k)
  apart = sum(float(np.sum((pb[k] - pa[k]) ** 2)) for k in pa.files)
  moved = sum(float(np.sum((pa[k] - init[k]) ** 2)) for k in pa.files)
  assert moved > 0
  assert np.sqrt(apart / moved) <= 0.1, np.sqrt(apart / moved)
  example_runs.assert_parameters_moved(mcjax)


def test_publication_moves_bfloat16(runs, equivalence_runs):
  """The engine gets bfloat16 weights: half the bytes of the float32 run of
  the same model and hosts (no float32 upcast on the way)."""
  def publish_bytes(run):
    records = json.loads((run / "records.json").read_text())
    return {r["publish_bytes"] for r in records}

  (bf16,) = publish_bytes(runs["2x2"][1])
  (fp32,) = publish_bytes(equivalence_runs["mcjax2"])
  assert bf16 * 2 == fp32, (bf16, fp32)
  params = np.load(runs["2x2"][1] / "params.npz")
  # bfloat16 values, stored as float32 (exact): the low 16 bits are zero.
  for name in params.files:
    bits = params[name].astype(np.float32).view(np.uint32)
    assert not np.any(bits & 0xFFFF), name
