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

"""Tunix's agentic GRPO through the CLI with `rollout_engine=vllm`.

tests/cli/test_cli_agentic.py's job (GSM8K, a tiny local Qwen3, 2 steps of
8 prompts x 2 agents, KL on, one agent at a time, a turn ending at eos or a
digit) with Tunix's `rollout_engine="vllm"` (mcjax's host-local vLLM on
CPU; the model's head_dim is 32, which vLLM's CPU attention needs): stock
(`--backend=tunix --placement_invariant_sampling`, 1 process x 4 devices)
against mcjax at 2 hosts x 2 devices. vLLM seeds every row from its
identity, and an agent turn's identity is its agent's, so both sample the
same conversations.

Compared: every agent's completion and reward exactly; losses and final
parameters within 1e-6 (that module's tolerance, for the same reason: the
stock run sums over one process's 4 devices). Runs where vLLM imports
(`.venv-maxtext-vllm`, part of `make test`).
"""

import json

import numpy as np
import pytest

import cli_runs
from cli import test_cli_agentic as agentic_cli

pytestmark = [pytest.mark.vllm, pytest.mark.multihost, pytest.mark.e2e]

pytest.importorskip("vllm")

VLLM = ("rollout_engine=vllm",)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("cli_agentic_vllm")
  base = tmp / "base" / "base_config.yaml"
  base.parent.mkdir()
  import yaml  # pylint: disable=g-import-not-at-top

  base.write_text(yaml.safe_dump(agentic_cli.agentic_config(base.parent /
                                                            "scratch"),
                                 sort_keys=False))
  inputs = cli_runs.short_gsm8k_inputs(
      tmp / "inputs", agentic_cli.BATCH * agentic_cli.STEPS, head_dim=32)
  inputs["stop_tokens"] = agentic_cli.stop_tokens(inputs["model"])
  return {
      "tunix": agentic_cli.cli_run(inputs, base, tmp / "tunix",
                                   "--backend=tunix",
                                   "--placement_invariant_sampling",
                                   overrides=VLLM),
      "mcjax": agentic_cli.cli_run(inputs, base, tmp / "mcjax",
                                   "--backend=mcjax", "--num_hosts=2",
                                   "--devices_per_host=2", "--timeout=600",
                                   overrides=VLLM),
  }


def test_same_agents_losses_and_parameters(runs):
  (ref, ref_proc), (got, got_proc) = runs["tunix"], runs["mcjax"]
  del ref_proc
  # The start line names the engine rollout_engine=vllm means here.
  assert "rollout_engine=vllm: mcjax engine 'vllm'" in (got_proc.stdout +
                                                         got_proc.stderr)
  a, b = agentic_cli.groups(ref), agentic_cli.groups(got)
  assert len(a) == agentic_cli.BATCH * agentic_cli.STEPS
  assert b == a
  assert any(len({r for _, r in g}) > 1 for g in a.values())
  ra = [json.loads(l) for l in (ref / "metrics.jsonl").read_text().splitlines()]
  rb = [json.loads(l) for l in (got / "metrics.jsonl").read_text().splitlines()]
  np.testing.assert_allclose([r["loss"] for r in rb], [r["loss"] for r in ra],
                             rtol=1e-6, atol=1e-6)
  pa, pb = np.load(ref / "params.npz"), np.load(got / "params.npz")
  assert sorted(pa.files) == sorted(pb.files)
  for k in pa.files:
    np.testing.assert_allclose(pb[k], pa[k], rtol=1e-6, atol=1e-6,
                               err_msg=k)
