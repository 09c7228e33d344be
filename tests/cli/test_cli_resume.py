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

"""Checkpointing through Tunix's CLI (`checkpoint_root_directory`,
`checkpointing_options.save_interval_steps`) under --backend=mcjax.

Tunix counts `save_interval_steps` in optimizer updates; an interval that
would put a checkpoint inside a global step (which cannot be resumed
exactly) is refused by the parent process before any host starts, naming
the multiple to use.

A resumed CLI run equals the uninterrupted one (2 hosts, the recipe script
examples/rl/grpo/gsm8k/run_qwen3.sh with test_grpo_main.py's tiny model and
data, batch 4: 4 global steps, a checkpoint every 2): the reference runs 4
steps; a second run of the same command is SIGKILLed (the whole job) once
step 3 is recorded, and a third, the same command again, resumes from the
step-2 checkpoint. Steps 3-4 of the resumed run have the reference's prompts,
completions and rewards, and its final checkpoint the reference's
parameters and optimizer state, bit for bit.
"""

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import cli_runs
import hand_checkpoints
import launch_utils
import zygote
from tunix_mcjax import checkpointing
from cli.test_grpo_main import inputs  # pylint: disable=unused-import
from cli.test_grpo_main import RECIPE, REWARDS, MAX_PROMPT, TRAIN_POSITIONS
from cli.test_grpo_main import TEST_POSITIONS

# 17 prompts pass the length filter: 4 full global batches of 4.
_BATCH, _STEPS, _EVERY = 4, 4, 2
_TIMEOUT_S = 900

# Every override of rl_training_config replaces the whole section (a Tunix
# "replace key"), so each case sets all the keys the check reads; `root`
# (None: no checkpoints) is made by the check, so it is the test's tmp_path.
def _overrides(interval: int, mini_batch: int, iterations: int = 1, *,
               root: pathlib.Path | None = None):
  ckpt = (f"rl_training_config.checkpoint_root_directory={root}",)
  return (
      *(ckpt if root is not None else ()),
      f"rl_training_config.checkpointing_options.save_interval_steps={interval}",
      f"rl_training_config.mini_batch_size={mini_batch}",
      f"rl_training_config.train_micro_batch_size={mini_batch}",
      f"grpo_config.num_iterations={iterations}",
  )


@pytest.mark.parametrize("interval, mini_batch, iterations, multiple", [
    (3, 4, 1, 2),  # batch 8 / mini-batch 4: 2 updates per global step.
    (2, 8, 3, 3),  # 1 mini-batch x 3 iterations.
    (1, 2, 1, 4),
])
def test_interval_inside_a_global_step_is_refused(
    cli, pipeline, tmp_path, interval, mini_batch, iterations, multiple):
  with pytest.raises(cli.ConfigError, match="cannot run with") as e:
    cli.check_mcjax_config(
        pipeline(*_overrides(interval, mini_batch, iterations,
                             root=tmp_path / "ckpt")), num_hosts=2)
  message = str(e.value)
  assert f"save_interval_steps={interval}" in message
  assert f"Use a multiple of {multiple}" in message


@pytest.mark.parametrize("interval, mini_batch, iterations", [
    (4, 4, 1), (2, 4, 1), (6, 8, 3), (1, 8, 1),
])
def test_interval_on_global_steps_passes(cli, pipeline, tmp_path, interval,
                                         mini_batch, iterations):
  assert cli.check_mcjax_config(
      pipeline(*_overrides(interval, mini_batch, iterations,
                           root=tmp_path / "ckpt")),
      num_hosts=2) == 2


def test_interval_without_checkpoints_is_not_checked(cli, pipeline):
  assert cli.check_mcjax_config(pipeline(*_overrides(3, 4)), num_hosts=2) == 2


def test_corrupt_checkpoint_and_resume_step_are_checked_before_hosts_start(
    cli, pipeline, tmp_path):
  """The launching process's checks of a hand-made checkpoint directory
  (steps 2 and 4, step 4's largest array file cut in half)."""
  root = tmp_path / "ckpt"
  hand_checkpoints.write(str(root))
  latest = hand_checkpoints.step_dir(str(root), 4)
  cut = hand_checkpoints.largest_array_file(latest)
  hand_checkpoints.truncate(cut)
  overrides = _overrides(2, 4, root=root)
  with pytest.raises(cli.ConfigError) as e:
    cli.check_mcjax_config(pipeline(*overrides), num_hosts=2,
                           sets_aside_later=True)
  assert f"Checkpoint {latest} is corrupt: {cut} is truncated" in str(e.value)
  assert "--resume_step 2 resumes from the previous complete" in str(e.value)
  with pytest.raises(cli.ConfigError,
                     match="its complete checkpoints are steps 2, 4"):
    cli.check_mcjax_config(pipeline(*overrides, resume_step=3), num_hosts=2,
                           sets_aside_later=True)
  # The launching process sets step 4 aside; a host finds it gone.
  assert cli.check_mcjax_config(pipeline(*overrides, resume_step=2),
                                num_hosts=2, sets_aside_later=True) == 2
  with pytest.raises(cli.ConfigError, match=r"still holds later steps \(4\)"):
    cli.check_mcjax_config(pipeline(*overrides, resume_step=2), num_hosts=2)
  assert checkpointing.complete_steps(str(root)) == [2, 4]  # Nothing moved.
  # The mcjax cluster resumes from the step the flag names.
  assert pipeline(*overrides, resume_step=2).mcjax_options().resume_step == 2
  without = [o for o in overrides if "checkpoint_root_directory" not in o]
  with pytest.raises(cli.ConfigError, match="--resume_step=2 needs"
                     " rl_training_config.checkpoint_root_directory"):
    cli.check_mcjax_config(pipeline(*without, resume_step=2), num_hosts=2)
  with pytest.raises(cli.ConfigError, match="--resume_step=2 applies to"):
    cli.CliOptions(backend="tunix", resume_step=2)


# --- a resumed CLI run equals the uninterrupted one ----------------------------


def _command(inputs, out: pathlib.Path, ckpt: pathlib.Path):
  """The recipe as a command, its env, and its working directory."""
  out.mkdir()
  (out / "rows").mkdir()
  (out / "cwd").mkdir()
  env = launch_utils.launcher_env({
      "TUNIX_BASE_CONFIG": str(inputs["base_config"]),
      "BACKEND": "mcjax",
      "PYTHON": sys.executable,
      "model_name": "qwen3-tiny",
      "model_dir": str(inputs["model"]),
      "data_dir": str(inputs["data"]),
      "mesh_shape": "(4,1)",
      "use_flash_attention": "false",
      "batch_size": str(_BATCH),
      "train_micro_batch_size": str(_BATCH),
      "total_generation_steps": "8",
      "max_prompt_length": str(MAX_PROMPT),
      "train_fraction": str(TRAIN_POSITIONS / (TRAIN_POSITIONS +
                                               TEST_POSITIONS)),
      "checkpoint_dir": str(ckpt),
      "HF_DATASETS_CACHE": str(out / "hf_datasets"),
      "HF_HUB_OFFLINE": "1",
      "CLI_TEST_RECORD_DIR": str(out / "rows"),
      "JAX_PLATFORMS": "cpu",
  })
  positions = TRAIN_POSITIONS + TEST_POSITIONS
  args = [
      f"num_batches={positions // _BATCH}",  # The whole file.
      "rl_training_config.actor_optimizer_config.peak_value=0.05",
      "rl_training_config.actor_optimizer_config.init_value=0.05",
      f"rl_training_config.checkpointing_options.save_interval_steps={_EVERY}",
      f"rl_training_config.metrics_logging_options.log_dir={out / 'tb'}",
      f"reward_functions=['tunix.cli.reward_fn.gsm8k', '{REWARDS}']",
      f"--metrics_out={out / 'metrics.jsonl'}",
      "--num_hosts=2",
      f"--timeout={_TIMEOUT_S - 100}",
  ]
  return ["bash", str(RECIPE), *args], env, out / "cwd"


def _run(cmd, env, cwd) -> subprocess.CompletedProcess[str]:
  return cli_runs.run_ok(cmd, env, cwd, timeout=_TIMEOUT_S)


def _run_killed_after(cmd, env, cwd, out: pathlib.Path, ckpt: pathlib.Path,
                      step: int, saved: int) -> None:
  """Runs `cmd` and SIGKILLs the whole job once step `step` is recorded and
  checkpoint `saved` is complete (saves are asynchronous: step `saved + 1`
  can finish while `saved` is still being written)."""
  launch_utils.run_killed_when(
      cmd, lambda: (launch_utils.steps_done(out / "metrics.jsonl") >= step
                    and saved in checkpointing.complete_steps(str(ckpt))),
      log_path=out.parent / f"{out.name}.log", env=env, cwd=cwd,
      timeout_s=_TIMEOUT_S)


def _train_calls(out: pathlib.Path) -> list[dict]:
  """Reward calls, hosts' k-th calls joined in host order."""
  hosts = sorted((out / "rows").glob("rows_host*.jsonl"))
  per_host = [[json.loads(l) for l in h.read_text().splitlines()]
              for h in hosts]
  assert len(per_host) == 2
  assert len({len(h) for h in per_host}) == 1, [len(h) for h in per_host]
  return [{k: sum((h[i][k] for h in per_host), []) for k in per_host[0][0]}
          for i in range(len(per_host[0]))]


@pytest.fixture(scope="module")
def resume_runs(inputs, tmp_path_factory):
  launch_utils.require_markers("multihost", "e2e")
  tmp = tmp_path_factory.mktemp("cli_resume")
  ref = _command(inputs, tmp / "ref", tmp / "ref_ckpt")
  ref_proc = _run(*ref)
  ckpt = tmp / "ckpt"
  _run_killed_after(*_command(inputs, tmp / "killed", ckpt), tmp / "killed",
                    ckpt, step=3, saved=_EVERY)
  resumed_proc = _run(*_command(inputs, tmp / "resumed", ckpt))
  return {"ref": (tmp / "ref", tmp / "ref_ckpt", ref_proc),
          "resumed": (tmp / "resumed", ckpt, resumed_proc),
          "killed": tmp / "killed"}


@pytest.mark.multihost
@pytest.mark.e2e
def test_resumed_cli_run_equals_the_uninterrupted_one(resume_runs):
  ref_out, ref_ckpt, _ = resume_runs["ref"]
  got_out, got_ckpt, got_proc = resume_runs["resumed"]
  assert launch_utils.steps_done(resume_runs["killed"] / "metrics.jsonl") == 3
  lines = [l for l in got_proc.stdout.splitlines()
           if "resuming from checkpoint" in l]
  assert len(lines) == 1 and "(global step 2," in lines[0], (
      got_proc.stdout[-3000:])
  # Step numbers continue from the checkpoint.
  assert [json.loads(l)["step"] for l in
          (ref_out / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3, 4]
  assert [json.loads(l)["step"] for l in
          (got_out / "metrics.jsonl").read_text().splitlines()] == [3, 4]
  ref_calls, got_calls = _train_calls(ref_out), _train_calls(got_out)
  assert len(ref_calls) == 2 * len(got_calls) > 0
  for k, (a, b) in enumerate(zip(ref_calls[len(got_calls):], got_calls)):
    assert a["prompts"] == b["prompts"], k
    assert a["completions"] == b["completions"], k
    np.testing.assert_allclose(b["rewards"], a["rewards"], rtol=1e-6,
                               err_msg=str(k))
  last = str(_STEPS)  # One optimizer update per global step.
  ref_arrays = cli_runs.restore_step(ref_ckpt / "actor" / last)
  got_arrays = cli_runs.restore_step(got_ckpt / "actor" / last)
  assert sorted(ref_arrays) == sorted(got_arrays) and ref_arrays
  for name, value in ref_arrays.items():
    np.testing.assert_array_equal(got_arrays[name], value, err_msg=name)
  # The parameters trained: step 2's checkpoint differs from step 4's.
  step2 = cli_runs.restore_step(ref_ckpt / "actor" / str(_EVERY))
  assert any(not np.array_equal(step2[n], v) for n, v in ref_arrays.items())


@pytest.mark.multihost
@pytest.mark.e2e
def test_a_resume_with_another_config_is_refused_before_hosts_start(
    inputs, resume_runs, tmp_path):
  _, ckpt, _ = resume_runs["resumed"]
  cmd, env, cwd = _command(inputs, tmp_path / "changed", ckpt)
  # The job's own keys: a learning rate, and the group size G.
  cmd = [a.replace("peak_value=0.05", "peak_value=0.07") for a in cmd]
  cmd.append("grpo_config.num_generations=2")
  proc = zygote.run(cmd, env=env, cwd=cwd, capture_output=True,
                    text=True, timeout=_TIMEOUT_S)
  assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
  assert "was written with another configuration" in proc.stderr, proc.stderr
  assert "actor_optimizer_config: peak_value: checkpoint 0.05, now 0.07" in (
      proc.stderr), proc.stderr
  assert "grpo_config: num_generations: checkpoint" in proc.stderr
  assert "on this machine" not in proc.stdout  # No host was started.
  assert "Traceback" not in proc.stderr
