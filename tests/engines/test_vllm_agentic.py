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

"""Tunix's agentic GRPO learner with vLLM engines (vLLM on CPU).

The example's calc task (`--learner=agentic_grpo --dataset=calc`) with
`--engine=vllm`, 2 steps of 4 prompts x 2 agents, KL on, one agent at a
time: stock Tunix's RLCluster (1 process x 4 devices, the mcjax vLLM engine
keyed by the rows' identities, as every stock comparison run) against mcjax
at 2 hosts x 2 devices, one in-process vLLM engine per host. vLLM seeds
each row from its identity, and an agent turn's identity is its agent's
(prompt, sample, turn), so both runs sample the same conversations.

Compared: every episode (both turns and the reward) exactly; losses and
final parameters within 1e-6 (the colocated agentic module's 2 x 2
tolerance: the stock run sums over one process's 4 devices, mcjax over 2
processes; observed bit-identical, 2026-12-06). Runs only where vLLM is
installed (`.venv-maxtext-vllm`, part of `make test`).
"""

import json

import pytest

import example_runs

pytestmark = [pytest.mark.vllm, pytest.mark.multihost, pytest.mark.e2e]

pytest.importorskip("vllm")

_FLAGS = ("--learner=agentic_grpo", "--dataset=calc", "--engine=vllm",
          "--steps=2", "--batch_size=4", "--num_generations=2",
          "--max_new_tokens=24", "--max_prompt_length=40", "--beta=0.04",
          "--seed=3", "--learning_rate=1e-2", "--max_concurrency=1")


@pytest.fixture(name="runs", scope="module")
def runs_fixture(shared_runs):
  return {
      "tunix": shared_runs.example(*_FLAGS, "--backend=tunix",
                                   "--num_hosts=2", "--devices_per_host=2"),
      "mcjax": shared_runs.example(*_FLAGS, "--backend=mcjax",
                                   "--num_hosts=2", "--devices_per_host=2",
                                   "--transfer_guard=disallow"),
  }


def _episodes(run_dir):
  rows = []
  for path in sorted(run_dir.glob("agent_rows_host*.json")):
    rows += json.loads(path.read_text())
  return sorted(rows, key=lambda r: (r["prompt_index"], r["pair"]))


def test_same_episodes_losses_and_parameters(runs):
  ref, got = _episodes(runs["tunix"]), _episodes(runs["mcjax"])
  assert [(r["prompt_index"], r["pair"]) for r in ref] == [
      (p, s) for p in range(8) for s in range(2)]
  assert got == ref
  # Both hosts ran agents; not vacuous: rewards differ within some group.
  assert len(list(runs["mcjax"].glob("agent_rows_host*.json"))) == 2
  assert any(ref[i]["reward"] != ref[i + 1]["reward"]
             for i in range(0, len(ref), 2))
  example_runs.assert_same_losses_and_parameters(runs["tunix"], runs["mcjax"])
  example_runs.assert_parameters_moved(runs["mcjax"])
