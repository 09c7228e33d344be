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

"""Runs of examples/grpo_qwen3.py and comparisons of their dumps, for tests.

A run writes (with --dump_dir) rollouts_host<i>.json, records.json,
params.npz and params_init.npz, and (with --metrics_out) metrics.jsonl.
"""

from __future__ import annotations

import json
import pathlib
import sys

import numpy as np

import launch_utils
import zygote

EXAMPLE = launch_utils.REPO_ROOT / "examples" / "grpo_qwen3.py"
# The equivalence tests' job: 2 steps, KL on (the reference path runs),
# a learning rate large enough to move the parameters.
EQUIVALENCE_FLAGS = (
    "--steps=2", "--batch_size=4", "--num_generations=4",
    "--max_new_tokens=6", "--beta=0.04", "--seed=3", "--learning_rate=1e-2",
)
# An evaluation pass before every step (tests/test_eval_equivalence.py).
EVAL_FLAGS = ("--eval_every=1", "--eval_batches=1")
# The core equivalence runs (conftest `equivalence_runs`), by name: stock
# Tunix (1 process x 4 devices), mcjax on 2 hosts x 2 devices (under the
# transfer guard) and on 1 host x 4 devices.
EQUIVALENCE_RUNS = {
    "tunix": (*EQUIVALENCE_FLAGS, *EVAL_FLAGS, "--backend=tunix",
              "--num_hosts=2", "--devices_per_host=2"),
    "mcjax2": (*EQUIVALENCE_FLAGS, *EVAL_FLAGS, "--backend=mcjax",
               "--num_hosts=2", "--devices_per_host=2",
               "--transfer_guard=disallow"),
    "mcjax1": (*EQUIVALENCE_FLAGS, *EVAL_FLAGS, "--backend=mcjax",
               "--num_hosts=1", "--devices_per_host=4"),
}
# LoRA rank 4 on all seven projections (the example's default modules).
LORA_FLAGS = ("--lora_rank=4", "--lora_alpha=8")
# The 3-host run shared by tests/test_lora.py, tests/test_hsdp.py and
# tests/test_equivalence_variants.py (conftest `three_host_runs`): LoRA,
# gradient accumulation micro 3 < mini 6 < batch 12 prompts (one prompt per
# host per micro-batch), 2 samples each; on 3 hosts x 2 devices the tiny
# model's 64-wide embedding does not divide over 6 fsdp devices, so the
# example's --mesh=auto picks hsdp.
THREE_HOST_FLAGS = (
    *(f for f in EQUIVALENCE_FLAGS
      if not f.startswith(("--batch_size", "--num_generations"))),
    "--batch_size=12", "--mini_batch_size=6", "--micro_batch_size=3",
    "--num_generations=2", *LORA_FLAGS,
)
THREE_HOST_CALLS_PER_STEP = 12 // 3  # Reward calls: one per micro-batch.
# The 2-host LoRA run, with Tunix's Dr.GRPO learner (conftest
# `lora_drgrpo_runs`; tests/test_lora.py, tests/test_equivalence_variants.py).
LORA_DRGRPO_FLAGS = (*EQUIVALENCE_FLAGS, *LORA_FLAGS, "--learner=drgrpo")


# Final parameters of runs whose trainers span different device counts: the
# gradient sums in another order, which Adam turns into differences of a few
# 1e-6 .. 1e-5 (tests/test_equivalence_variants.py, tests/engines/test_engine_tp.py).
DEVICE_COUNT_PARAM_TOLERANCE = dict(atol=1e-4, rtol=1e-5)


def run_example(out: pathlib.Path, *args: str,
                timeout: int = 600) -> pathlib.Path:
  """Runs the example with dumps into `out`; fails the test on an error."""
  # The example re-runs itself as local hosts: a whole multi-host run.
  launch_utils.require_markers("multihost", "e2e")
  proc = zygote.run(
      [sys.executable, str(EXAMPLE), *args, f"--dump_dir={out}",
       f"--metrics_out={out}/metrics.jsonl", f"--timeout={timeout - 100}"],
      env=launch_utils.launcher_env(), capture_output=True, text=True,
      timeout=timeout,
  )
  if proc.returncode != 0:
    # The tails below are what a CI log keeps; the whole output (every
    # host's lines) stays with the run.
    out.mkdir(parents=True, exist_ok=True)
    (out / "stdout.txt").write_text(proc.stdout)
    (out / "stderr.txt").write_text(proc.stderr)
  assert proc.returncode == 0, (
      f"exit {proc.returncode}; whole output in {out}/std{{out,err}}.txt\n"
      + proc.stdout[-4000:] + proc.stderr[-4000:])
  return out


def read_rollouts(out: pathlib.Path) -> list[dict]:
  """Per reward call (one per step, or per rollout micro-batch), all hosts'
  rows in global order: hosts hold contiguous blocks of a call, and with
  chunked dealing host h's k-th call holds its chunk of global micro-batch
  k."""
  hosts = sorted(out.glob("rollouts_host*.json"))
  per_host = [json.loads(h.read_text()) for h in hosts]
  steps = []
  for k in range(len(per_host[0])):
    steps.append({
        key: sum((h[k][key] for h in per_host), [])
        for key in ("prompts", "completions", "rewards")
    })
  return steps


def assert_same_rollouts_and_rewards(ref_dir: pathlib.Path,
                                     got_dir: pathlib.Path, *,
                                     calls: int = 2,
                                     group: int = 4) -> None:
  """Every reward call's prompts, completions and rewards are identical.

  Args:
    ref_dir, got_dir: the two runs' dump directories.
    calls: reward calls expected (2 steps x rollout micro-batches per step).
    group: samples per prompt (--num_generations).
  """
  ref, got = read_rollouts(ref_dir), read_rollouts(got_dir)
  assert len(ref) == len(got) == calls
  for k, (a, b) in enumerate(zip(ref, got)):
    assert a["prompts"] == b["prompts"], k
    assert a["completions"] == b["completions"], k
    assert a["rewards"] == b["rewards"], k
  # The comparison is not vacuous: sampling produced different completions
  # within a group, so the advantages (and gradients) are non-zero.
  assert any(len(set(c["completions"][i:i + group])) > 1
             for c in ref for i in range(0, len(c["completions"]), group))


def assert_same_losses_and_parameters(ref_dir: pathlib.Path,
                                      got_dir: pathlib.Path, *,
                                      rtol: float = 1e-6,
                                      atol: float = 1e-6) -> set[str]:
  """Losses, rewards and final parameters agree (default 1e-6, the fp32
  tolerance); returns the names."""
  ref = json.loads((ref_dir / "records.json").read_text())
  got = json.loads((got_dir / "records.json").read_text())
  assert [r["step"] for r in got] == [1, 2]
  np.testing.assert_allclose([r["loss"] for r in got],
                             [r["loss"] for r in ref], rtol=rtol, atol=atol)
  np.testing.assert_allclose([r["reward_mean"] for r in got],
                             [r["reward_mean"] for r in ref], rtol=1e-6)
  pa = np.load(ref_dir / "params.npz")
  pb = np.load(got_dir / "params.npz")
  assert sorted(pa.files) == sorted(pb.files)
  for k in pa.files:
    np.testing.assert_allclose(pb[k], pa[k], atol=atol, rtol=rtol, err_msg=k)
  return set(pa.files)


def assert_parameters_moved(run_dir: pathlib.Path) -> float:
  """Training changed the parameters (guards comparisons of final values)."""
  pa = np.load(run_dir / "params_init.npz")
  pb = np.load(run_dir / "params.npz")
  assert sorted(pa.files) == sorted(pb.files)
  moved = max(float(np.abs(pa[k] - pb[k]).max()) for k in pa.files)
  assert moved > 1e-3, moved
  return moved


def assert_resumed_equal(ref: pathlib.Path, got: pathlib.Path, *,
                         first_step: int, steps: int, exact: bool) -> None:
  """`got` (a resumed run of `steps` steps) reproduces `ref` from step
  `first_step` on: batches, completions, rewards, losses, and the final
  parameters bit for bit (`exact`) or within rtol = atol = 1e-6."""
  ref_rolls = read_rollouts(ref)[first_step - 1:]
  got_rolls = read_rollouts(got)
  assert len(got_rolls) == len(ref_rolls) == steps + 1 - first_step
  for k, (a, b) in enumerate(zip(ref_rolls, got_rolls), start=first_step):
    assert a["prompts"] == b["prompts"], k
    assert a["completions"] == b["completions"], k
    np.testing.assert_allclose(b["rewards"], a["rewards"], rtol=1e-6,
                               err_msg=str(k))
  ref_recs = json.loads((ref / "records.json").read_text())[first_step - 1:]
  got_recs = json.loads((got / "records.json").read_text())
  # Step numbers continue; each step's batch is the reference's.
  assert [r["step"] for r in got_recs] == list(range(first_step, steps + 1))
  assert ([r["prompts_digest"] for r in got_recs]
          == [r["prompts_digest"] for r in ref_recs])
  np.testing.assert_allclose([r["loss"] for r in got_recs],
                             [r["loss"] for r in ref_recs], rtol=1e-6,
                             atol=1e-6)
  pa, pb = np.load(ref / "params.npz"), np.load(got / "params.npz")
  assert sorted(pa.files) == sorted(pb.files)
  for name in pa.files:
    if exact:
      np.testing.assert_array_equal(pb[name], pa[name], err_msg=name)
    else:
      np.testing.assert_allclose(pb[name], pa[name], rtol=1e-6, atol=1e-6,
                                 err_msg=name)
  assert_parameters_moved(got)

