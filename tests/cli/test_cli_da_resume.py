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

"""Checkpoint and resume through Tunix's CLI under --backend=mcjax_da.

A stock-style disaggregated config (test_cli_da.py's: the actor mesh (2,1),
the reference with the actor; here the rollout mesh (2,1), so 2 devices per
host map onto 1 trainer host and 1 rollout host), `--max_staleness=0`,
batch 2 x G 2, Adam, `checkpoint_root_directory` with a checkpoint every 2
steps. The reference runs 4 steps; a second run of the same command is
SIGKILLed (the whole job: driver, Ray and its actors) once step 3 is
recorded and step 2's checkpoint is complete, and a third, the same command
again, resumes from that checkpoint. Steps 3-4 of the resumed run have the
reference's prompts, completions and rewards, and its final checkpoint the
reference's parameters and optimizer state, bit for bit (one trainer host
on the same mesh both times, at staleness 0: the same programs on the same
numbers).

At `--max_staleness=1` a resume is not exact by design (the older policy a
stale batch was sampled with is not in the checkpoint:
docs/disaggregated.md), so it is not compared here; a resume with another
staleness, or another learning rate, is refused by the driver before Ray or
any host starts, naming each difference.
"""

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import cli_runs
import launch_utils
import zygote
from tunix_mcjax import checkpointing
from cli.test_cli_da import ACTOR_MESH, REWARDS

_BATCH, _STEPS, _EVERY, _GENERATIONS = 2, 4, 2, 2
_KILL_AFTER_STEP = 3
_TIMEOUT_S = 600
# The rollout's own mesh: over 2 devices per host, 1 rollout host.
_ROLLOUT_MESH = ("rollout_model_config.mesh.shape=(2,1)",
                 "rollout_model_config.mesh.axis_names=('fsdp','tp')")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
  return cli_runs.short_gsm8k_inputs(
      tmp_path_factory.mktemp("cli_da_resume_inputs"), _BATCH * _STEPS)


def _command(inputs, base_config, out: pathlib.Path, ckpt: pathlib.Path,
             *args: str):
  """The CLI command, its env and its working directory."""
  env = cli_runs.cli_env(out, base_config)
  model = inputs["model"]
  cmd = [
      sys.executable, "-m", "tunix_mcjax.cli.grpo_main", "base_config.yaml",
      "model_config.model_name=qwen3-tiny", f"model_config.model_id={model}",
      "model_config.model_source=huggingface",
      "model_config.mesh.shape=(2,1)",
      "model_config.mesh.axis_names=('fsdp','tp')",
      f"tokenizer_config.tokenizer_path={model}",
      "data_source=huggingface", f"dataset_name={inputs['data']}",
      f"batch_size={_BATCH}", f"num_batches={_STEPS}", "train_fraction=1.0",
      "rollout_config.max_prompt_length=500",
      "rollout_config.total_generation_steps=6",
      # The whole section (a Tunix replace key): one update per batch.
      "rl_training_config.eval_every_n_steps=1000",
      "rl_training_config.actor_optimizer_config.opt_type=adamw",
      "rl_training_config.actor_optimizer_config.learning_rate=0.001",
      f"rl_training_config.mini_batch_size={_BATCH}",
      f"rl_training_config.train_micro_batch_size={_BATCH}",
      f"rl_training_config.checkpoint_root_directory={ckpt}",
      "rl_training_config.checkpointing_options.save_interval_steps="
      f"{_EVERY}",
      f"rl_training_config.metrics_logging_options.log_dir={out / 'tb'}",
      f"grpo_config.num_generations={_GENERATIONS}",
      # KL on: the reference (with the actor on the trainer host) counts.
      "grpo_config.beta=0.08",
      f"reward_functions=['{REWARDS}']",
      *ACTOR_MESH, *_ROLLOUT_MESH,
      "--backend=mcjax_da", "--devices_per_host=2", "--max_staleness=0",
      f"--metrics_out={out / 'metrics.jsonl'}",
      f"--timeout={_TIMEOUT_S - 100}", *args]
  return cmd, env, out / "cwd"


def _run(cmd, env, cwd) -> subprocess.CompletedProcess[str]:
  return cli_runs.run_ok(cmd, env, cwd, timeout=_TIMEOUT_S)


def _records(out: pathlib.Path) -> list[dict]:
  return [json.loads(l)
          for l in (out / "metrics.jsonl").read_text().splitlines()]


def _calls(out: pathlib.Path) -> list[dict]:
  """Reward calls of the one trainer host (one per step)."""
  (host,) = sorted((out / "rows").glob("rows_host*.jsonl"))
  return [json.loads(l) for l in host.read_text().splitlines()]


@pytest.fixture(scope="module")
def resume_runs(inputs, base_config, tmp_path_factory):
  launch_utils.require_markers("multihost", "e2e")
  tmp = tmp_path_factory.mktemp("cli_da_resume")
  ref_proc = _run(*_command(inputs, base_config, tmp / "ref",
                            tmp / "ref_ckpt"))
  ckpt = tmp / "ckpt"
  killed = tmp / "killed"
  cmd, env, cwd = _command(inputs, base_config, killed, ckpt)
  # Saves are asynchronous: step 3 can be recorded while step 2's
  # checkpoint is still being written.
  launch_utils.run_killed_when(
      cmd, lambda: (
          launch_utils.steps_done(killed / "metrics.jsonl")
          >= _KILL_AFTER_STEP
          and _EVERY in checkpointing.complete_steps(str(ckpt))),
      log_path=tmp / "killed.log", env=env, cwd=cwd, timeout_s=_TIMEOUT_S)
  resumed_proc = _run(*_command(inputs, base_config, tmp / "resumed", ckpt))
  return {"ref": (tmp / "ref", tmp / "ref_ckpt", ref_proc),
          "resumed": (tmp / "resumed", ckpt, resumed_proc),
          "killed": killed}


@pytest.mark.multihost
@pytest.mark.e2e
def test_resumed_cli_da_run_equals_the_uninterrupted_one(resume_runs):
  ref_out, ref_ckpt, ref_proc = resume_runs["ref"]
  got_out, got_ckpt, got_proc = resume_runs["resumed"]
  assert ("actor mesh (2,1) -> 1 trainer host(s); rollout mesh (2,1) -> 1"
          " rollout host(s)") in ref_proc.stdout
  assert launch_utils.steps_done(
      resume_runs["killed"] / "metrics.jsonl") == _KILL_AFTER_STEP
  console = got_proc.stdout + got_proc.stderr
  lines = [l for l in console.splitlines() if "resuming from checkpoint" in l]
  assert len(lines) == 1 and f"(global step {_EVERY}," in lines[0], (
      console[-3000:])
  # Step numbers continue from the checkpoint; every batch on policy.
  ref_records, got_records = _records(ref_out), _records(got_out)
  assert [r["step"] for r in ref_records] == [1, 2, 3, 4]
  assert [r["step"] for r in got_records] == [3, 4]
  assert {r["backend"] for r in got_records} == {"mcjax_da"}
  assert [r["staleness"] for r in got_records] == [0, 0]
  # The restored policy is published as version = global step.
  assert [r["policy_version"] for r in got_records] == [
      r["policy_version"] for r in ref_records[_EVERY:]] == [2, 3]
  ref_calls, got_calls = _calls(ref_out), _calls(got_out)
  assert len(ref_calls) == _STEPS and len(got_calls) == _STEPS - _EVERY
  # Prompts, completions and rewards of steps 3-4, exactly.
  assert got_calls == ref_calls[_EVERY:]
  assert len(set(got_calls[0]["completions"])) > 1
  for key in ("loss", "grad_norm", "reward_mean"):
    assert [r[key] for r in got_records] == [
        r[key] for r in ref_records[_EVERY:]], key
  last = str(_STEPS)  # One optimizer update per global step.
  ref_arrays = cli_runs.restore_step(ref_ckpt / "actor" / last)
  got_arrays = cli_runs.restore_step(got_ckpt / "actor" / last)
  assert sorted(ref_arrays) == sorted(got_arrays) and ref_arrays
  assert any(n.startswith("optimizer_state") for n in ref_arrays)
  for name, value in ref_arrays.items():
    np.testing.assert_array_equal(got_arrays[name], value, err_msg=name)
  # The parameters trained: step 2's checkpoint differs from step 4's.
  step2 = cli_runs.restore_step(ref_ckpt / "actor" / str(_EVERY))
  assert any(not np.array_equal(step2[n], v) for n, v in ref_arrays.items()
             if n.startswith("model_params"))


def test_da_fingerprint_holds_the_staleness_settings(cli, pipeline):
  """What the driver checks a resume against (no hosts)."""
  da = pipeline(options=cli.CliOptions(
      backend="mcjax_da", max_staleness=0, is_cap=3.0)).checkpoint_fingerprint()
  assert (da["max_staleness"], da["is_cap"]) == (0, 3.0)
  colocated = pipeline().checkpoint_fingerprint()
  assert "max_staleness" not in colocated and "is_cap" not in colocated
  # Only keys in both are compared: a K = 0 DA run may resume a colocated
  # run's checkpoint (the same numbers), as under the example.
  assert not checkpointing.mismatches(colocated, da)
  assert checkpointing.mismatches(
      {**da, "max_staleness": 1}, da) == ["max_staleness: checkpoint 1, now 0"]


@pytest.mark.multihost
@pytest.mark.e2e
def test_a_da_resume_with_another_config_is_refused_before_hosts_start(
    inputs, base_config, resume_runs, tmp_path):
  _, ckpt, _ = resume_runs["resumed"]
  cmd, env, cwd = _command(inputs, base_config, tmp_path / "changed", ckpt)
  # The job's own keys (a learning rate) and the DA schedule's (staleness).
  cmd = [a.replace("learning_rate=0.001", "learning_rate=0.002")
         .replace("--max_staleness=0", "--max_staleness=1") for a in cmd]
  proc = zygote.run(cmd, env=env, cwd=cwd, capture_output=True,
                    text=True, timeout=_TIMEOUT_S)
  assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
  assert "cannot run with --backend=mcjax_da" in proc.stderr, proc.stderr
  assert "was written with another configuration" in proc.stderr
  assert ("actor_optimizer_config: learning_rate: checkpoint 0.001, now 0.002"
          in proc.stderr), proc.stderr
  assert "max_staleness: checkpoint 0, now 1" in proc.stderr, proc.stderr
  assert "[da]" not in proc.stdout + proc.stderr  # No Ray session.
  assert "Traceback" not in proc.stderr
