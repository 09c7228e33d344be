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


"""A LoRA actor with vLLM engines under mcjax: 2 simulated hosts x 2 CPUs.

The engines receive only the adapters, merge them into their host-local
base projections and reload the touched modules; after a GRPO step every
host's vLLM log-probs equal the LoRA trainer model's (the tolerance of
test_vllm_multihost.py). Runs only where vLLM is installed (`.venv-vllm`).
"""

import pathlib

import pytest

import launch_utils

pytestmark = [pytest.mark.vllm, pytest.mark.multihost]

pytest.importorskip("vllm")

# Runs on each of 2 hosts; prints the host's RESULT record.
_PROGRAM = pathlib.Path(__file__).resolve().parents[1] / "support" / (
    "vllm_lora_host.py")


def test_vllm_engines_hold_the_merged_trained_adapters():
  out = launch_utils.run_on_hosts(_PROGRAM, timeout=400)
  assert len(out) == 2
  for host, rec in out.items():
    assert rec["steps"] == 1, rec
    # Before and after the step, vLLM's log-probs are the LoRA trainer's.
    assert rec["init_diff"] < 1e-4, rec
    assert rec["after_diff"] < 1e-4, rec
    # The step moved the adapters and the engine followed (not stale).
    assert rec["engine_change"] > 1e-3, rec
    # Only the adapters crossed hosts; each of the 2 layers reloaded its
    # q/k/v/o and gate/up/down projections (the HF tensors of those modules).
    assert rec["publish_bytes"] == rec["adapter_bytes"], rec
    assert rec["reloaded_tensors"] == 2 * 7, rec
