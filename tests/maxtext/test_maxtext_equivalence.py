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

import pytest

import example_runs

pytestmark = [pytest.mark.multihost, pytest.mark.e2e]

MAXTEXT = (*example_runs.EQUIVALENCE_FLAGS, "--trainer=maxtext",
           "--num_hosts=2", "--devices_per_host=2")


@pytest.fixture(scope="module")
def runs(shared_runs):
  return {name: shared_runs.example(*MAXTEXT, f"--backend={name}")
          for name in ("tunix", "mcjax")}


def test_same_rollouts_and_rewards(runs):
  example_runs.assert_same_rollouts_and_rewards(runs["tunix"], runs["mcjax"])


def test_same_losses_and_parameters(runs):
  names = example_runs.assert_same_losses_and_parameters(
      runs["tunix"], runs["mcjax"])
  # MaxText's own (scanned) parameter names: the trainer really was MaxText.
  assert any("['decoder']['layers']['self_attention']" in k for k in names)


@pytest.mark.parametrize("run", ["tunix", "mcjax"])
def test_training_changed_the_parameters(runs, run):
  example_runs.assert_parameters_moved(runs[run])
