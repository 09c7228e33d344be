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

"""Equivalence with a MaxText trainer: mcjax (2 hosts) gives stock Tunix's numbers.

The GRPO example with `--trainer=maxtext` (MaxText Qwen3 actor and reference
behind MaxText's Tunix adapter, scanned layers, FSDP with MaxText's logical
axis rules; the native engine runs Tunix's Qwen3 fed by the MaxText ->
Tunix mapping) for 2 steps with KL on, as stock Tunix (1 process x 4
devices) and as mcjax (2 hosts x 2 devices), same seed and data.

Tolerances as in test_equivalence.py: completions and rewards exactly,
losses and parameters within rtol = atol = 1e-6 (observed bit-identical on
CPU).
"""

import json

import numpy as np
import pytest

from test_equivalence import _rollouts, _run  # pylint: disable=g-importing-member

MAXTEXT = ["--trainer=maxtext"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("equiv_maxtext")
  return {
      "tunix": _run(tmp, "tunix", *MAXTEXT, "--backend=tunix",
                    "--num_hosts=2", "--devices_per_host=2"),
      "mcjax": _run(tmp, "mcjax", *MAXTEXT, "--backend=mcjax",
                    "--num_hosts=2", "--devices_per_host=2"),
  }


def test_same_rollouts_and_rewards(runs):
  ref, got = _rollouts(runs["tunix"]), _rollouts(runs["mcjax"])
  assert len(ref) == len(got) == 2
  for step, (a, b) in enumerate(zip(ref, got)):
    assert a["prompts"] == b["prompts"], step
    assert a["completions"] == b["completions"], step
    assert a["rewards"] == b["rewards"], step
  assert len(set(ref[0]["completions"][:4])) > 1


def test_same_losses_and_parameters(runs):
  ref = json.loads((runs["tunix"] / "records.json").read_text())
  got = json.loads((runs["mcjax"] / "records.json").read_text())
  assert [r["step"] for r in got] == [1, 2]
  np.testing.assert_allclose([r["loss"] for r in got],
                             [r["loss"] for r in ref], rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose([r["reward_mean"] for r in got],
                             [r["reward_mean"] for r in ref], rtol=1e-6)
  pa = np.load(runs["tunix"] / "params.npz")
  pb = np.load(runs["mcjax"] / "params.npz")
  assert sorted(pa.files) == sorted(pb.files)
  # MaxText's own (scanned) parameter names: the trainer really was MaxText.
  assert any("['decoder']['layers']['self_attention']" in k for k in pa.files)
  for k in pa.files:
    np.testing.assert_allclose(pb[k], pa[k], atol=1e-6, rtol=1e-6, err_msg=k)


@pytest.mark.parametrize("run", ["tunix", "mcjax"])
def test_training_changed_the_parameters(runs, run):
  pa = np.load(runs[run] / "params_init.npz")
  pb = np.load(runs[run] / "params.npz")
  moved = max(float(np.abs(pa[k] - pb[k]).max()) for k in pa.files)
  assert moved > 1e-3
