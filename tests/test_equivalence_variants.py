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

"""Stock Tunix recipes beyond plain GRPO give stock numbers under mcjax.

One stock run (1 process) and one mcjax run per variant, 2 steps, small
batches; two of the three pairs are shared with other tests
(tests/conftest.py) to keep `make test` time:

* gradient accumulation: micro-batch 3 < mini-batch 6 < batch 12 prompts,
  3 hosts x 2 devices (`three_host_runs`, with LoRA; the tiny model's 64-wide
  dims do not divide over 6 fsdp devices, so the mcjax run takes the
  example's default mesh, hsdp) against stock on 1 process x 2 devices.
  Global micro-batch k must be the stock micro-batch k (admission deals
  per-host micro-batch chunks).
* DAPO (`DAPOLearner`, token-mean loss, no KL) with num_iterations=2 (old
  log-probs from each host's engine), 2 hosts x 2 devices, full weights.
* Dr.GRPO (`DrGRPOLearner`), 2 hosts x 2 devices (`lora_drgrpo_runs`, with
  LoRA).

Tolerances as tests/test_equivalence.py: completions and rewards exact;
losses within 1e-6; parameters within 1e-6, except for gradient
accumulation: its runs reduce the gradient over 6 and 2 devices, in another
float summation order, which Adam's g / sqrt(v) amplifies in near-zero
entries; that variant takes tests/test_hsdp.py's tolerance (atol 1e-4, rtol
1e-5), as the same cause does there (observed: see that module).
"""

import json
import pathlib

import numpy as np
import pytest

import example_runs

# Parameters when the two runs reduce the gradient over different device
# counts (see the module doc; tests/test_hsdp.py, same cause).
DEVICE_COUNT_PARAM_TOLERANCE = example_runs.DEVICE_COUNT_PARAM_TOLERANCE

pytestmark = [pytest.mark.multihost, pytest.mark.e2e]

VARIANTS = ("grad_acc", "dapo_mu2", "drgrpo")
# Variant -> the shared session fixture holding its runs (tests/conftest.py).
_SHARED = {"grad_acc": "three_host_runs", "drgrpo": "lora_drgrpo_runs"}
_DAPO_FLAGS = ("--learner=dapo", "--beta=0", "--num_iterations=2")
_TWO_HOSTS = ("--num_hosts=2", "--devices_per_host=2")


@pytest.fixture(scope="module", params=VARIANTS)
def variant(request, shared_runs):
  name = request.param
  if name in _SHARED:
    runs = request.getfixturevalue(_SHARED[name])
    return name, (runs["tunix"], runs["mcjax"])
  run = lambda backend: shared_runs.example(
      *example_runs.EQUIVALENCE_FLAGS, *_DAPO_FLAGS, f"--backend={backend}",
      *_TWO_HOSTS)
  return name, (run("tunix"), run("mcjax"))


def _calls(out: pathlib.Path) -> list[dict]:
  """Every reward call (one per rollout micro-batch), hosts' rows joined in
  host order: with chunked dealing, host h's k-th call holds its chunk of
  global micro-batch k."""
  return example_runs.read_rollouts(out)


def test_same_rollouts_and_rewards(variant):
  name, (stock, mcjax) = variant
  if name == "grad_acc":  # One reward call per micro-batch of 3 prompts.
    example_runs.assert_same_rollouts_and_rewards(
        stock, mcjax, calls=2 * example_runs.THREE_HOST_CALLS_PER_STEP,
        group=2)
    # Global micro-batch k is the stock micro-batch k: one prompt per host.
    for call in _calls(mcjax):
      assert len(call["prompts"]) == 3 * 2
  else:
    example_runs.assert_same_rollouts_and_rewards(stock, mcjax)


def test_same_losses_and_parameters(variant):
  name, (stock, mcjax) = variant
  ref = json.loads((stock / "records.json").read_text())
  got = json.loads((mcjax / "records.json").read_text())
  assert [r["step"] for r in got] == [r["step"] for r in ref] == [1, 2]
  for key in ("loss", "reward_mean"):
    np.testing.assert_allclose([r[key] for r in got], [r[key] for r in ref],
                               rtol=1e-6, atol=1e-6, err_msg=key)
  tol = (DEVICE_COUNT_PARAM_TOLERANCE if name == "grad_acc"
         else dict(atol=1e-6, rtol=1e-6))
  pa, pb = np.load(stock / "params.npz"), np.load(mcjax / "params.npz")
  assert sorted(pa.files) == sorted(pb.files)
  for k in pa.files:
    np.testing.assert_allclose(pb[k], pa[k], err_msg=k, **tol)
  example_runs.assert_parameters_moved(mcjax)


def test_updates_per_step(variant):
  """The runs did what their flags say: 2 steps, and the record's loss is
  a real one (the learner trained)."""
  name, (_, mcjax) = variant
  records = json.loads((mcjax / "records.json").read_text())
  assert [r["step"] for r in records] == [1, 2], name
  assert all(np.isfinite(r["loss"]) for r in records), records
