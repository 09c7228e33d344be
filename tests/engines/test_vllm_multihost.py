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

"""vLLM engines under the mcjax cluster: 2 simulated hosts x 2 CPU devices.

Real multi-process JAX (gloo) with one in-process vLLM (CPU) engine per
host. Runs only where vLLM is installed (`.venv-vllm`, `make test-vllm`).

1. After a GRPO training step and its publication, every host's vLLM engine
   computes from the new weights: its log-probs of fixed tokens equal the
   trainer model's (global FSDP arrays) and differ from before the step.
2. One GRPO example run with `--engine vllm` on 2 hosts x 2 devices at
   engine tp 2 (`--engine_tp=2`: each host's vLLM at tensor_parallel_size
   2, two worker processes over its two devices), the equivalence tests'
   job (2 steps):
   - it completes with a learning signal: rewards vary within groups and
     the parameters move;
   - it equals stock Tunix with vLLM (one process x 4 devices, tp 1): the
     same rollouts and rewards, losses and parameters within 1e-6. GRPO
     trains against the trainer's log-probs, not the rollout's, so vLLM's
     tp 2 log-probs (within 1e-5 of tp 1: tests/engines/test_vllm.py) do
     not enter the update;
   - the hosts closed their engines when the job ended: nothing of the
     runs is left in /dev/shm (vLLM's tp workers' all-reduce segments).
"""

import json
import pathlib

import pytest

import example_runs
import launch_utils

pytestmark = [pytest.mark.vllm, pytest.mark.multihost]

pytest.importorskip("vllm")


# Runs on each of 2 hosts; prints the host's RESULT record.
_PROGRAM = pathlib.Path(__file__).resolve().parents[1] / "support" / (
    "vllm_publication_host.py")


def test_engines_generate_from_the_published_weights():
  out = launch_utils.run_on_hosts(_PROGRAM, timeout=400)
  for host, rec in out.items():
    assert rec["steps"] == 1, rec
    # Before and after the step, the engine's log-probs are the trainer's.
    assert rec["init_diff"] < 1e-4, rec
    assert rec["after_diff"] < 1e-4, rec
    # The step moved the model, and the engine followed (not stale).
    assert rec["trainer_change"] > 1e-3, rec
    assert rec["engine_change"] > 1e-3, rec
    # Publication reports bytes and seconds, JAX side and engine side.
    assert rec["publication"]["bytes"] > 0, rec
    assert rec["publication"]["seconds"] > 0, rec
    assert rec["engine_update"]["bytes"] == rec["publication"]["bytes"], rec
    assert 0 < rec["engine_update"]["reload_seconds"] <= (
        rec["engine_update"]["seconds"]), rec
    assert rec["engine_update"]["num_tensors"] == 24, rec
    assert "['layers'][0]['attn']['v_proj']['w']" in rec["errors"]["missing"]
    assert "['final_norm']['w']" in rec["errors"]["shape"], rec["errors"]


@pytest.fixture(name="tp_runs", scope="module")
def tp_runs_fixture(shared_runs):
  flags = (*example_runs.EQUIVALENCE_FLAGS, "--engine=vllm", "--num_hosts=2",
           "--devices_per_host=2")
  shm_before = launch_utils.vllm_shared_memory()
  started = shared_runs.started
  runs = {
      "tunix": shared_runs.example(*flags, "--backend=tunix"),
      "tp2": shared_runs.example(*flags, "--backend=mcjax", "--engine_tp=2",
                                 "--transfer_guard=disallow"),
  }
  runs["shm_left"] = launch_utils.vllm_shared_memory() - shm_before
  runs["launched"] = shared_runs.started - started
  return runs


@pytest.mark.e2e
def test_grpo_with_vllm_engines_completes_with_learning_signal(tp_runs):
  grpo_run = tp_runs["tp2"]
  records = json.loads((grpo_run / "records.json").read_text())
  assert [r["step"] for r in records] == [1, 2]
  for r in records:
    assert r["publish_bytes"] > 0 and r["phases"]["publish"] > 0, r
  metrics = (grpo_run / "metrics.jsonl").read_text().splitlines()
  assert len(metrics) == 2

  hosts = [json.loads(p.read_text())
           for p in sorted(grpo_run.glob("rollouts_host*.json"))]
  assert len(hosts) == 2
  for calls in hosts:
    assert len(calls) == 2
  # Each host generated its own prompts.
  assert hosts[0][0]["prompts"] != hosts[1][0]["prompts"]
  # Rewards vary within at least one group (else every advantage is 0), and
  # samples of a group differ.
  varied = 0
  for calls in hosts:
    for call in calls:
      for g in range(0, len(call["rewards"]), 4):
        varied += len(set(call["rewards"][g:g + 4])) > 1
        assert len(set(call["completions"][g:g + 4])) > 1
  assert varied >= 1

  # The parameters moved away from the initial model (as the run saved it).
  example_runs.assert_parameters_moved(grpo_run)


@pytest.mark.e2e
def test_engine_tp2_equals_stock(tp_runs):
  example_runs.assert_same_rollouts_and_rewards(tp_runs["tunix"],
                                                tp_runs["tp2"])
  example_runs.assert_same_losses_and_parameters(tp_runs["tunix"],
                                                 tp_runs["tp2"])
  example_runs.assert_parameters_moved(tp_runs["tp2"])
  # Each host's vLLM ran on an engine mesh with tp 2, vLLM's
  # tensor_parallel_size (tests/engines/test_vllm.py: two worker processes).
  for host in (0, 1):
    layout = json.loads(
        (tp_runs["tp2"] / f"engine_layout_host{host}.json").read_text())
    assert layout["mesh"] == {"fsdp": 1, "tp": 2}, layout["mesh"]


@pytest.mark.e2e
def test_the_hosts_closed_their_engines(tp_runs):
  assert tp_runs["launched"] == 2  # Both runs started here, watched.
  assert not tp_runs["shm_left"], sorted(tp_runs["shm_left"])
