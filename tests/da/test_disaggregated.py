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

"""The disaggregated mode end to end: Ray, 1 trainer host, 2 rollout hosts
(the GRPO example, `--backend=mcjax_da`).

DA runs shared by every check here (module fixture):
- "k0": `--max_staleness=0` with the core equivalence flags (KL on, an
  evaluation pass before every step), 4 devices per host, compared with the
  colocated mcjax run of the session's `equivalence_runs` with the same
  trainer mesh (1 host x 4 devices): completions, rewards and evaluation
  rollouts identical, losses and parameters within 1e-6. (Against another
  trainer mesh Adam turns reduction-order noise in near-zero gradients into
  parameter differences of a few 1e-6.)
- "k1": `--max_staleness=1`, 3 steps, a LoRA actor (only adapters travel
  after the first publication): every step after the first trains a batch
  exactly one policy version old, with importance weights != 1.
- "k1_lr0": the same schedule with full weights, 2 trainer hosts x 1 device
  (each owning one rollout host) and learning rate 0: the policy never
  changes, so the sampler's and the trainer's log-probs agree and every
  weight is 1.
- "killed": "k1" again, with one rollout host SIGKILLed after step 1: Ray
  restarts it (rebuilding the base model, then getting the adapters of the
  version its request needs), and the run equals "k1".
- "trainer_killed": a 6-step run whose trainer host is SIGKILLed after step
  1: the job exits non-zero within 30 s naming it.
"""

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import psutil
import pytest

import example_runs
import launch_utils
import sockets

pytestmark = [pytest.mark.multihost, pytest.mark.e2e]

DA_FLAGS = ("--backend=mcjax_da", "--trainer_hosts=1", "--rollout_hosts=2")


@pytest.fixture(name="da_runs", scope="module")
def da_runs_fixture(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("da")
  k1_flags = (*(f for f in example_runs.EQUIVALENCE_FLAGS
                if not f.startswith("--steps")), "--steps=3", *DA_FLAGS,
              "--devices_per_host=2", "--max_staleness=1")
  lora_flags = (*k1_flags, *example_runs.LORA_FLAGS)
  killed = _run_killing(tmp / "killed", "RolloutHost", *lora_flags)
  trainer_killed = _run_killing(tmp / "trainer_killed", "TrainerHost",
                                *k1_flags, "--steps=6")
  return {
      "killed": killed,
      "trainer_killed": trainer_killed,
      "k0": example_runs.run_example(
          tmp / "k0", *example_runs.EQUIVALENCE_FLAGS,
          *example_runs.EVAL_FLAGS, *DA_FLAGS, "--devices_per_host=4",
          "--max_staleness=0"),
      "k1": example_runs.run_example(tmp / "k1", *lora_flags),
      # Two trainer hosts (one JAX program over both, a rollout host each).
      "k1_lr0": example_runs.run_example(
          tmp / "k1_lr0", *k1_flags, "--learning_rate=0",
          "--trainer_hosts=2", "--devices_per_host=1"),
  }


def _actor_pids(actor_class: str) -> list[int]:
  """Live processes of the job's Ray actors of `actor_class`."""
  pids = []
  for proc in psutil.process_iter(["pid", "cmdline"]):
    cmdline = " ".join(proc.info["cmdline"] or ())
    if cmdline.startswith(f"ray::{actor_class}"):
      pids.append(proc.info["pid"])
  return sorted(pids)


def _run_killing(out: pathlib.Path, actor_class: str, *flags: str,
                 timeout: int = 600) -> pathlib.Path:
  """The example, with one `actor_class` process SIGKILLed once step 1 is
  recorded. Writes console.txt, listening.json and result.json (exit
  status, seconds from the kill to the job's exit) into `out`."""
  launch_utils.require_markers("multihost", "e2e")
  metrics = out / "metrics.jsonl"
  proc = subprocess.Popen(
      [sys.executable, str(example_runs.EXAMPLE), *flags, f"--dump_dir={out}",
       f"--metrics_out={metrics}", f"--timeout={timeout - 100}"],
      env=launch_utils.launcher_env(), stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, text=True)
  killed, listening = [], []

  def kill_after_step_one():
    while proc.poll() is None:
      if metrics.exists() and metrics.read_text().strip():
        # Every socket the whole job (Ray head, workers, the trainers' JAX
        # coordinator) listens on while it runs.
        listening.extend(sockets.listeners(sockets.tree(proc.pid)))
        pids = _actor_pids(actor_class)
        if pids:
          os.kill(pids[0], signal.SIGKILL)
          killed.append(time.monotonic())
        return
      time.sleep(0.05)

  watcher = threading.Thread(target=kill_after_step_one, daemon=True)
  watcher.start()
  try:
    output, _ = proc.communicate(timeout=timeout)
  finally:
    if proc.poll() is None:
      proc.kill()
  ended = time.monotonic()
  watcher.join(timeout=5)
  assert killed, f"no {actor_class} process was found to kill:\n{output}"
  out.mkdir(parents=True, exist_ok=True)
  (out / "console.txt").write_text(output)
  (out / "listening.json").write_text(json.dumps(listening))
  (out / "result.json").write_text(json.dumps(
      {"returncode": proc.returncode, "exit_after_kill_s": ended - killed[0]}))
  return out


def _records(out: pathlib.Path) -> list[dict]:
  return [json.loads(line)
          for line in (out / "metrics.jsonl").read_text().splitlines()]


def _eval_calls(out: pathlib.Path) -> list[dict]:
  hosts = [json.loads(p.read_text())
           for p in sorted(out.glob("eval_rollouts_host*.json"))]
  return [{key: sum((h[k][key] for h in hosts), [])
           for key in ("prompts", "completions", "rewards")}
          for k in range(len(hosts[0]))]


def test_synchronous_equals_colocated(da_runs, equivalence_runs):
  colocated, da = equivalence_runs["mcjax1"], da_runs["k0"]
  example_runs.assert_same_rollouts_and_rewards(colocated, da)
  assert _eval_calls(da) == _eval_calls(colocated)
  example_runs.assert_same_losses_and_parameters(colocated, da)
  example_runs.assert_parameters_moved(da)


def test_synchronous_records(da_runs):
  records = _records(da_runs["k0"])
  assert [r["backend"] for r in records] == ["mcjax_da"] * 2
  # Each batch comes from the policy the previous step published.
  assert [r["policy_version"] for r in records] == [0, 1]
  assert [r["staleness"] for r in records] == [0, 0]
  for r in records:
    assert r["weights_bytes"] > 0 and r["weights_put_s"] >= 0
    assert r["rollout_wait_s"] > 0 and r["weights_wait_s"] >= 0
    # No correction on policy: the weights are not even computed.
    assert "is_weight_mean" not in r


@pytest.mark.parametrize("run", ["k1", "k1_lr0"])
def test_one_step_stale_schedule(da_runs, run):
  records = _records(da_runs[run])
  assert [r["step"] for r in records] == [1, 2, 3]
  # Batch 2 was generated with version 0 while step 1 trained, batch 3 with
  # version 1 while step 2 trained.
  assert [r["policy_version"] for r in records] == [0, 0, 1]
  assert [r["staleness"] for r in records] == [0, 1, 1]
  # The same batches as the synchronous run, each trained once, in order.
  k0 = _records(da_runs["k0"])
  assert ([r["prompts_digest"] for r in records[:2]]
          == [r["prompts_digest"] for r in k0])
  assert len({r["prompts_digest"] for r in records}) == 3


def test_lora_publishes_only_adapters(da_runs):
  # Steps publish the adapters; the full model went once, at start-up.
  lora = [r["weights_bytes"] for r in _records(da_runs["k1"])]
  full = [r["weights_bytes"] for r in _records(da_runs["k1_lr0"])]
  assert 0 < max(lora) < min(full) / 4, (lora, full)


def test_importance_weights(da_runs):
  moving, still = _records(da_runs["k1"]), _records(da_runs["k1_lr0"])
  # Where the trainer sees the sampler's context (no sampled pad token
  # before: `importance.context_aligned`), sampler and trainer compute the
  # same log-probs of the same policy in different programs (decode vs. full
  # forward): weights 1 within 1e-4 when the policy does not change.
  for r in still:
    assert r["is_weight_max_dev_aligned"] < 1e-4, r["step"]
  assert moving[0]["is_weight_max_dev_aligned"] < 1e-4  # No update yet.
  for r in moving[1:]:
    assert r["is_weight_max_dev_aligned"] > 1e-3, r["step"]
    assert r["is_weight_max"] <= 2.0  # The cap C.
  # The tiny vocabulary samples pad tokens inside completions: the weights
  # after them differ from 1 even without an update (the trainer masks the
  # pad out of the context); the runs must contain such tokens for the
  # aligned-token check above to mean something different from the whole.
  assert any(r["misaligned_tokens"] > 0 for r in still)


def test_a_killed_rollout_host_loses_no_prompt(da_runs):
  killed, clean = da_runs["killed"], da_runs["k1"]
  result = json.loads((killed / "result.json").read_text())
  assert result["returncode"] == 0, (killed / "console.txt").read_text()
  records = _records(killed)
  # Either its rows were re-issued (killed while generating) or its weights
  # installed again (killed while idle); counted either way.
  assert records[-1]["rollout_host_failures"] >= 1
  assert re.search(r"rollout host \d died",
                   (killed / "console.txt").read_text())
  # The same batches, each trained once, with the same completions: no row
  # lost, none trained twice, re-issued rows drew the same samples.
  assert ([r["prompts_digest"] for r in records]
          == [r["prompts_digest"] for r in _records(clean)])
  example_runs.assert_same_rollouts_and_rewards(clean, killed, calls=3)
  pa, pb = np.load(clean / "params.npz"), np.load(killed / "params.npz")
  for k in pa.files:
    np.testing.assert_allclose(pb[k], pa[k], atol=1e-6, rtol=1e-6, err_msg=k)


def test_a_killed_trainer_host_ends_the_job_naming_it(da_runs):
  out = da_runs["trainer_killed"]
  result = json.loads((out / "result.json").read_text())
  console = (out / "console.txt").read_text()
  assert result["returncode"] != 0, console
  assert result["exit_after_kill_s"] < 30, result
  assert "trainer host 0 failed" in console, console[-3000:]
  assert len(_records(out)) < 6  # It did not run to the end.


def test_the_job_listens_on_loopback_only(da_runs):
  listening = json.loads((da_runs["killed"] / "listening.json").read_text())
  names = {name for _, name, _, _ in listening}
  assert {"gcs_server", "raylet"} <= names, names
  assert [s for s in listening if not sockets.is_loopback(s[2])] == []


def test_no_ray_process_outlives_the_jobs(da_runs):
  del da_runs  # Every run of this module has ended.
  left = [p.info for p in psutil.process_iter(["pid", "cmdline"])
          if any(part.startswith("ray::") or "raylet" in part
                 or "gcs_server" in part
                 for part in (p.info["cmdline"] or ()))]
  assert not left, left
