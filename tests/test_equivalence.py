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

"""The core correctness test: mcjax gives stock Tunix's numbers.

Runs the GRPO example end to end (2 steps, KL on so the reference path is
exercised) as: stock Tunix single controller (1 process x 4 devices), mcjax
with 2 hosts x 2 devices, and mcjax with 1 host x 4 devices; same seed and
data. Compared: every completion and reward (exactly), per-step losses and
rewards, and the final parameters.

Tolerances (fp32): completions and rewards must match exactly; losses and
parameters within rtol = atol = 1e-6. On CPU all three runs are observed to
be bit-identical; the slack only admits a different float summation order
(other backends or device counts), which Adam can amplify in tiny gradients.
"""

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import launch_utils

EXAMPLE = launch_utils.REPO_ROOT / "examples" / "grpo_qwen3.py"
COMMON = [
    "--steps=2", "--batch_size=4", "--num_generations=4",
    "--max_new_tokens=6", "--beta=0.04", "--seed=3", "--learning_rate=1e-2",
]


def _run(tmp: pathlib.Path, name: str, *args: str) -> pathlib.Path:
  out = tmp / name
  proc = subprocess.run(
      [sys.executable, str(EXAMPLE), *COMMON, f"--dump_dir={out}",
       f"--metrics_out={out}/metrics.jsonl", "--timeout=500", *args],
      env=launch_utils.launcher_env(), capture_output=True, text=True,
      timeout=600,
  )
  assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
  return out


def _rollouts(out: pathlib.Path) -> list[dict]:
  """Per step, the global rows in global order (hosts hold contiguous blocks)."""
  hosts = sorted(out.glob("rollouts_host*.json"))
  per_host = [json.loads(h.read_text()) for h in hosts]
  steps = []
  for k in range(len(per_host[0])):
    steps.append({
        key: sum((h[k][key] for h in per_host), [])
        for key in ("prompts", "completions", "rewards")
    })
  return steps


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("equiv")
  return {
      "tunix": _run(tmp, "tunix", "--backend=tunix", "--num_hosts=2",
                    "--devices_per_host=2"),
      "mcjax2": _run(tmp, "mcjax2", "--backend=mcjax", "--num_hosts=2",
                     "--devices_per_host=2"),
      "mcjax1": _run(tmp, "mcjax1", "--backend=mcjax", "--num_hosts=1",
                     "--devices_per_host=4"),
  }


@pytest.mark.parametrize("other", ["mcjax2", "mcjax1"])
def test_same_rollouts_and_rewards(runs, other):
  ref, got = _rollouts(runs["tunix"]), _rollouts(runs[other])
  assert len(ref) == len(got) == 2
  for step, (a, b) in enumerate(zip(ref, got)):
    assert a["prompts"] == b["prompts"], step
    assert a["completions"] == b["completions"], step
    assert a["rewards"] == b["rewards"], step
  # The comparison is not vacuous: sampling produced different completions
  # within a group, so the advantages (and gradients) are non-zero.
  assert len(set(ref[0]["completions"][:4])) > 1


@pytest.mark.parametrize("other", ["mcjax2", "mcjax1"])
def test_same_losses_and_parameters(runs, other):
  ref = json.loads((runs["tunix"] / "records.json").read_text())
  got = json.loads((runs[other] / "records.json").read_text())
  assert [r["step"] for r in got] == [1, 2]
  np.testing.assert_allclose([r["loss"] for r in got],
                             [r["loss"] for r in ref], rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose([r["reward_mean"] for r in got],
                             [r["reward_mean"] for r in ref], rtol=1e-6)
  pa = np.load(runs["tunix"] / "params.npz")
  pb = np.load(runs[other] / "params.npz")
  assert sorted(pa.files) == sorted(pb.files)
  for k in pa.files:
    np.testing.assert_allclose(pb[k], pa[k], atol=1e-6, rtol=1e-6, err_msg=k)


@pytest.mark.parametrize("run", ["tunix", "mcjax2"])
def test_training_changed_the_parameters(runs, run):
  # Guards the parameter comparison above against a run that never updated.
  pa = np.load(runs[run] / "params_init.npz")
  pb = np.load(runs[run] / "params.npz")
  moved = max(float(np.abs(pa[k] - pb[k]).max()) for k in pa.files)
  assert moved > 1e-3


def test_metrics_jsonl_schema(runs):
  lines = (runs["mcjax2"] / "metrics.jsonl").read_text().splitlines()
  assert len(lines) == 2
  for line in lines:
    rec = json.loads(line)
    for key in ("step", "backend", "num_hosts", "reward_mean", "loss",
                "completion_len_mean", "step_time_s", "phases"):
      assert key in rec, key
    assert rec["backend"] == "mcjax" and rec["num_hosts"] == 2
    assert set(rec["phases"]) == {"admission", "generate", "reward", "logps",
                                  "train", "publish"}
    assert rec["step_time_s"] >= max(rec["phases"].values())
