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

"""Checkpoint, resume and gradient accumulation under `--backend=mcjax_da`.

One module fixture: five DA jobs (1 trainer host, 2 rollout hosts, 2 devices
each, the tiny model) and one colocated job, all accumulating gradients over
2 micro-batches per batch (one optimizer update per batch):
- "ref": `--max_staleness=0`, 6 steps, uninterrupted; "colocated": the same
  job under `--backend=mcjax` (1 host x 2 devices, the same trainer mesh),
  which "ref" must equal;
- "k0": "ref" checkpointing every step, its trainer host SIGKILLed once
  step 3 is recorded (the job ends non-zero), then the same command again:
  it resumes from the last complete checkpoint and must reproduce "ref"
  from there (prompts, completions, rewards, losses, parameters); the kill
  itself must end the job within 30 s naming the trainer host;
- "k1_fresh", "k1": `--max_staleness=1` for 2 steps with checkpoints, then
  `--steps=4` on the same directory: the first batch after the resume is
  sampled with the restored policy (version 2, staleness 0), the next one
  is one version old again (docs/disaggregated.md).
The DA jobs join one Ray cluster started for the module (`--ray_address`),
which the killed job must leave without actors, groups or busy CPUs. "ref"
and "k1_fresh" run there at the same time ("k1_fresh" starts once "ref"'s
rollout actors are up), each in the Ray namespace of its own that every
launch gets, with the same actor names.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import example_runs
import existing_ray
import launch_utils
import zygote
from tunix_mcjax import checkpointing
from tunix_mcjax.da import options as da_options

pytestmark = [pytest.mark.multihost, pytest.mark.e2e]

# 4 prompts x 2 samples per batch, trained in 2 micro-batches of 2 prompts.
COMMON = ("--batch_size=4", "--mini_batch_size=4", "--micro_batch_size=2",
          "--num_generations=2", "--max_new_tokens=6", "--seed=3",
          "--learning_rate=1e-2", "--beta=0.04", "--devices_per_host=2")
DA = ("--backend=mcjax_da", "--trainer_hosts=1", "--rollout_hosts=2")
K0 = (*COMMON, *DA, "--max_staleness=0", "--steps=6")
COLOCATED = (*COMMON, "--backend=mcjax", "--num_hosts=1", "--steps=6")
K1 = (*COMMON, *DA, "--max_staleness=1")
# Reward calls (rollout micro-batches) per step.
CALLS = 2
_TIMEOUT_S = 600
_KILL_AFTER_STEP = 3


def _command(out: pathlib.Path, *args: str) -> list[str]:
  return [sys.executable, str(example_runs.EXAMPLE), *args,
          f"--dump_dir={out}", f"--metrics_out={out}/metrics.jsonl",
          f"--timeout={_TIMEOUT_S - 100}"]


def _run(cmd: list[str], env: dict[str, str] | None = None) -> str:
  """Runs a job to the end; its stdout and stderr."""
  launch_utils.require_markers("multihost", "e2e")
  proc = zygote.run(cmd, env=env or launch_utils.launcher_env(),
                    capture_output=True, text=True, timeout=_TIMEOUT_S)
  assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
  return proc.stdout + proc.stderr


def _run_trainer_killed(cmd: list[str], out: pathlib.Path,
                        cluster: existing_ray.ExistingRayCluster) -> dict:
  """Runs `cmd` on `cluster` and SIGKILLs its trainer host once step 3 is
  recorded."""
  launch_utils.require_markers("multihost", "e2e")
  metrics = out / "metrics.jsonl"
  log_path = out.parent / f"{out.name}_killed.log"
  with open(log_path, "w") as log:
    proc = zygote.popen(cmd, env=cluster.job_env(),
                        stdout=log, stderr=subprocess.STDOUT)
    killed_at = kill_time = None
    deadline = time.monotonic() + _TIMEOUT_S
    try:
      while proc.poll() is None and time.monotonic() < deadline:
        if launch_utils.steps_done(metrics) >= _KILL_AFTER_STEP:
          pids = cluster.worker_pids("TrainerHost")
          assert len(pids) == 1, pids
          os.kill(pids[0], signal.SIGKILL)
          kill_time = time.monotonic()
          killed_at = launch_utils.steps_done(metrics)
          break
        time.sleep(0.02)
      proc.wait(timeout=120)
      exit_after_kill_s = time.monotonic() - kill_time
    finally:
      if proc.poll() is None:
        proc.kill()
  console = log_path.read_text()
  assert killed_at is not None, f"never reached step 3:\n{console[-4000:]}"
  return {"returncode": proc.returncode, "killed_at": killed_at,
          "exit_after_kill_s": exit_after_kill_s,
          "steps_done": launch_utils.steps_done(metrics), "console": console}


def _run_together(first: list[str], second: list[str],
                  outs: tuple[pathlib.Path, pathlib.Path],
                  cluster: existing_ray.ExistingRayCluster) -> dict:
  """Runs two jobs on `cluster`: `second` starts once `first`'s rollout
  actors are alive. Their consoles and the most rollout actors seen alive
  at once."""
  launch_utils.require_markers("multihost", "e2e")
  logs = [out.parent / f"{out.name}_together.log" for out in outs]
  procs = []
  most_rollouts = 0
  deadline = time.monotonic() + _TIMEOUT_S
  try:
    with open(logs[0], "w") as log0, open(logs[1], "w") as log1:
      procs.append(zygote.popen(first, env=cluster.job_env(),
                                stdout=log0, stderr=subprocess.STDOUT))
      while any(p.poll() is None for p in procs) and (
          time.monotonic() < deadline):
        rollouts = len(cluster.worker_pids("RolloutHost"))
        most_rollouts = max(most_rollouts, rollouts)
        if len(procs) == 1 and (rollouts >= 2 or procs[0].poll() is not None):
          procs.append(zygote.popen(second, env=cluster.job_env(),
                                    stdout=log1,
                                    stderr=subprocess.STDOUT))
        time.sleep(0.2)
  finally:
    for proc in procs:
      if proc.poll() is None:
        proc.kill()
        proc.wait()
  consoles = [log.read_text() for log in logs]
  for proc, console in zip(procs, consoles):
    assert proc.returncode == 0, console[-6000:]
  assert len(procs) == 2, consoles[0][-4000:]
  return {"consoles": consoles, "most_rollouts": most_rollouts}


def _records(out: pathlib.Path) -> list[dict]:
  return [json.loads(line)
          for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(name="runs", scope="module")
def runs_fixture(tmp_path_factory):
  launch_utils.require_markers("multihost", "e2e")
  tmp = tmp_path_factory.mktemp("da_resume")
  # Every DA job here joins one Ray cluster (--ray_address) instead of
  # starting and stopping its own: a job that starts Ray is
  # tests/da/test_disaggregated.py's.
  # CPUs for two jobs' hosts at once (one bundle of CPU=1 each).
  cluster = existing_ray.ExistingRayCluster(num_cpus=6)
  try:
    names = da_options.DaOptions(trainer_hosts=1, rollout_hosts=2)
    env = cluster.job_env()

    def da(out, *args):
      return _command(out, *args, *cluster.job_flags())

    ref, colocated = tmp / "ref", tmp / "colocated"
    k1_ckpt = tmp / "k1_ckpt"
    k1_args = (*K1, f"--checkpoint_dir={k1_ckpt}")
    # Two jobs on the cluster at once, with the same actor names.
    together = _run_together(
        da(ref, *K0), da(tmp / "k1_fresh", *k1_args, "--steps=2"),
        (ref, tmp / "k1_fresh"), cluster)
    together["namespaces"] = [existing_ray.job_namespace(c)
                              for c in together["consoles"]]
    together["cluster_after"] = [
        cluster.after_job(names.rollout_actor_names(0), namespace)
        for namespace in together["namespaces"]]
    _run(_command(colocated, *COLOCATED))
    out, ckpt = tmp / "k0", tmp / "k0_ckpt"
    cmd = da(out, *K0, f"--checkpoint_dir={ckpt}", "--checkpoint_every=1")
    killed = _run_trainer_killed(cmd, out, cluster)
    killed["complete_steps"] = checkpointing.complete_steps(str(ckpt))
    # What the failed job left on the cluster the next jobs use.
    killed["cluster_after"] = cluster.after_job(
        names.rollout_actor_names(0),
        existing_ray.job_namespace(killed["console"]))
    resumed_console = _run(cmd, env)  # The same command again.
    k1_console = _run(da(tmp / "k1", *k1_args, "--steps=4"), env)
  finally:
    left = cluster.close()
  assert cluster.returncode == 0 and left == [], (cluster.returncode, left)
  return {"ref": ref, "colocated": colocated, "k0": out, "killed": killed,
          "k0_console": resumed_console, "k1_fresh": tmp / "k1_fresh",
          "k1": tmp / "k1", "k1_console": k1_console, "together": together,
          "num_cpus": cluster.num_cpus}


def _resume_line(console: str) -> str:
  lines = [line for line in console.splitlines()
           if "resuming from checkpoint" in line]
  assert len(lines) == 1, console[-3000:]
  return lines[0]


def _first_resumed_step(runs) -> int:
  return runs["killed"]["complete_steps"][-1] + 1


def test_a_killed_trainer_host_ends_the_job_naming_it(runs):
  # Was a separate 6-step run in tests/da/test_disaggregated.py (killed
  # after step 1, max_staleness 1, no checkpoints); this run's kill shows the
  # same: the launcher notices the dead actor, whatever the schedule.
  killed = runs["killed"]
  assert killed["returncode"] != 0, killed["console"][-3000:]
  assert killed["exit_after_kill_s"] < 30, killed["exit_after_kill_s"]
  assert "trainer host 0 failed" in killed["console"], killed["console"][-3000:]
  assert killed["steps_done"] < 6  # It did not run to the end.
  # The failed job's rollout hosts closed their engines before they were
  # killed (a killed vLLM engine would leave its shared memory behind).
  assert re.search(r"rollout hosts closed their engines: ([1-9]) of \1\b",
                   killed["console"]), killed["console"][-3000:]
  # On the cluster it joined it left no actor, group or busy CPU behind.
  after = killed["cluster_after"]
  assert after["free_cpus"] == runs["num_cpus"], after
  assert after["group_resources"] == [], after
  assert after["named_actors_left"] == [] and after["task_pid"] > 0, after
  assert after["named_actors_anywhere"] == [], after


def test_a_killed_trainer_host_leaves_complete_checkpoints(runs):
  killed = runs["killed"]
  # The job ended with the error naming the trainer host, before the end.
  assert killed["returncode"] != 0, killed["console"][-3000:]
  assert "trainer host 0 failed" in killed["console"]
  assert _KILL_AFTER_STEP <= killed["steps_done"] < 6
  # Saved every step, the last 3 kept; the save of the step being trained
  # may be cut short.
  steps = killed["complete_steps"]
  assert steps and steps == list(range(max(1, steps[-1] - 2),
                                       steps[-1] + 1)), steps
  assert _KILL_AFTER_STEP - 1 <= steps[-1] < 6, steps


def test_resume_starts_at_the_last_complete_checkpoint(runs):
  last = runs["killed"]["complete_steps"][-1]
  line = _resume_line(runs["k0_console"])
  assert re.search(rf"actor/{last} \(global step {last}, data position"
                   rf" {4 * last},", line), line
  records = _records(runs["k0"])
  assert [r["step"] for r in records] == list(range(last + 1, 7))
  # The policy versions number on from the checkpoint's global step.
  assert [r["policy_version"] for r in records] == list(range(last, 6))
  assert {r["staleness"] for r in records} == {0}


def _assert_same_from(ref: pathlib.Path, got: pathlib.Path, first: int,
                      exact: bool) -> None:
  """`got` trained the steps `first`..6 as `ref` did."""
  ref_rolls = example_runs.read_rollouts(ref)[CALLS * (first - 1):]
  got_rolls = example_runs.read_rollouts(got)
  assert len(got_rolls) == len(ref_rolls) == CALLS * (7 - first)
  for k, (a, b) in enumerate(zip(ref_rolls, got_rolls)):
    assert a["prompts"] == b["prompts"], k
    assert a["completions"] == b["completions"], k
    assert a["rewards"] == b["rewards"], k
  ref_recs = _records(ref)[first - 1:]
  got_recs = _records(got)
  assert [r["step"] for r in got_recs] == list(range(first, 7))
  assert ([r["prompts_digest"] for r in got_recs]
          == [r["prompts_digest"] for r in ref_recs])
  pa, pb = np.load(ref / "params.npz"), np.load(got / "params.npz")
  assert sorted(pa.files) == sorted(pb.files)
  if exact:
    assert [r["loss"] for r in got_recs] == [r["loss"] for r in ref_recs]
    for name in pa.files:
      np.testing.assert_array_equal(pb[name], pa[name], err_msg=name)
  else:
    np.testing.assert_allclose([r["loss"] for r in got_recs],
                               [r["loss"] for r in ref_recs], rtol=1e-6,
                               atol=1e-6)
    for name in pa.files:
      np.testing.assert_allclose(pb[name], pa[name], rtol=1e-6, atol=1e-6,
                                 err_msg=name)
  example_runs.assert_parameters_moved(got)


def test_two_jobs_share_one_ray_cluster(runs):
  # "ref" and "k1_fresh" ran on the cluster at the same time, both with
  # rollout actors mcjax_da_rollout_0 and _1: each in its own namespace.
  together = runs["together"]
  ref_ns, fresh_ns = together["namespaces"]
  assert ref_ns != fresh_ns, together["namespaces"]
  for namespace in together["namespaces"]:
    assert namespace.startswith(da_options.NAMESPACE_PREFIX), namespace
    da_options.check_namespace(namespace)
  assert together["most_rollouts"] == 4, together["most_rollouts"]
  # Each job's metrics and rollouts are its own: its steps, its schedule.
  ref, fresh = _records(runs["ref"]), _records(runs["k1_fresh"])
  assert [r["step"] for r in ref] == list(range(1, 7))
  assert {r["staleness"] for r in ref} == {0}
  assert [r["step"] for r in fresh] == [1, 2]
  assert [r["staleness"] for r in fresh] == [0, 1]
  assert len(example_runs.read_rollouts(runs["ref"])) == CALLS * 6
  assert len(example_runs.read_rollouts(runs["k1_fresh"])) == CALLS * 2
  # Both ended cleanly and left nothing in either namespace.
  for after in together["cluster_after"]:
    assert after["free_cpus"] == runs["num_cpus"], after
    assert after["group_resources"] == [], after
    assert after["named_actors_anywhere"] == [], after


def test_accumulating_gradients_equals_colocated(runs):
  # Two generate calls and two micro-batch updates per step, one optimizer
  # update: the colocated backend's numbers (the same trainer mesh).
  _assert_same_from(runs["colocated"], runs["ref"], 1, exact=False)
  assert [r["policy_version"] for r in _records(runs["ref"])] == list(
      range(6))


def test_synchronous_resume_equals_the_uninterrupted_run(runs):
  # Bit-identical: the same programs on the same restored state (Orbax
  # restores float32 exactly).
  _assert_same_from(runs["ref"], runs["k0"], _first_resumed_step(runs),
                    exact=True)


def test_stale_schedule_restarts_on_policy_after_a_resume(runs):
  # Fresh: batch 2 was generated (both micro-batches) while step 1 trained.
  fresh = _records(runs["k1_fresh"])
  assert [r["policy_version"] for r in fresh] == [0, 0]
  assert [r["staleness"] for r in fresh] == [0, 1]
  assert "global step 2," in _resume_line(runs["k1_console"])
  records = _records(runs["k1"])
  assert [r["step"] for r in records] == [3, 4]
  # Batch 3 is sampled with the restored policy (the checkpoint holds no
  # older one); batch 4 was generated while step 3 trained.
  assert [r["policy_version"] for r in records] == [2, 2]
  assert [r["staleness"] for r in records] == [0, 1]
  # Admission continues after the checkpoint's batches, the lookahead
  # included: the same batches as the uninterrupted synchronous run.
  assert ([r["prompts_digest"] for r in records]
          == [r["prompts_digest"] for r in _records(runs["ref"])[2:4]])
