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

"""Bad flags, data and environments: one line, exit 2, nothing deleted.

Each case runs the example as a user does (a whole process) with a metrics
file left by an earlier run, which must survive: every check runs before
anything is deleted or any host starts.
"""

import json
import os
import subprocess
import sys

import pytest

import example_runs
import launch_utils
import zygote

# Whole processes (about 4 s each, nearly all of it importing Tunix before
# the refusal): the main suite runs them; the quick loop has the in-process
# checks below.
_slow = pytest.mark.slow


def _example(tmp_path, *args, env=None):
  metrics = tmp_path / "earlier.jsonl"
  metrics.write_text('{"step": 1}\n')
  flags = [f"--metrics_out={metrics}"] if not any(
      a.startswith("--metrics_out") for a in args) else []
  # CI=true as on CI, where transformers also sends its log lines to the
  # root logger (absl prints them a second time).
  proc = zygote.run(
      [sys.executable, str(example_runs.EXAMPLE), "--backend=mcjax",
       "--steps=1", *flags, *args],
      env=launch_utils.launcher_env({"CI": "true", **(env or {})}),
      capture_output=True, text=True,
      timeout=120, cwd=tmp_path)
  assert metrics.read_text() == '{"step": 1}\n', "deleted before the checks"
  return proc


def _one_error_line(proc, program="grpo_qwen3.py"):
  assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1, proc.stderr[-3000:]
  assert lines[0].startswith(f"{program}: error: "), lines
  return lines[0]


def _model_dir(tmp_path, config, tokenizer=True):
  model = tmp_path / "model"
  model.mkdir()
  (model / "config.json").write_text(config)
  if tokenizer:
    (model / "tokenizer.json").write_text("{}")
  return model


def _cases(tmp_path):
  data = tmp_path / "data"
  data.mkdir()
  (data / "null.jsonl").write_text('{"question": null, "answer": "#### 3"}\n')
  (data / "binary.jsonl").write_bytes(
      b'{"question": "q", "answer": "#### 1"}\n{"question": "\xff"}\n')
  (tmp_path / "a_dir").mkdir()
  return {
      "timeout": (["--timeout=0"], "--timeout must be > 0 seconds, got 0."),
      "da_timeout": (["--timeout=-1", "--backend=mcjax_da",
                      "--trainer_hosts=1", "--rollout_hosts=1"],
                     "--timeout must be > 0 seconds, got -1."),
      "metrics_dir": ([f"--metrics_out={tmp_path / 'a_dir'}"],
                      "is a directory; give the path of a file"),
      "num_hosts": (["--num_hosts=0"], "--num_hosts must be an integer >= 1"),
      "reward_timeout": (["--reward_timeout_s=0"],
                         "--reward_timeout_s must be > 0 seconds (the most"
                         " one reward call may take), got 0."),
      "empty_config": (
          [f"--model={_model_dir(tmp_path, '{}')}"],
          "config.json' lacks hidden_size, intermediate_size"),
      "null_question": ([f"--dataset=gsm8k:{data / 'null.jsonl'}"],
                        "null.jsonl:1: 'question' is null, not text"),
      "not_utf8": ([f"--dataset=gsm8k:{data / 'binary.jsonl'}"],
                   "binary.jsonl:2 is not UTF-8 text (byte 0xff"),
  }


CASES = ("timeout", "da_timeout", "metrics_dir", "num_hosts", "empty_config",
         "null_question", "not_utf8", "reward_timeout")


@_slow
@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_and_deletes_nothing(tmp_path, case):
  args, expected = _cases(tmp_path)[case]
  line = _one_error_line(_example(tmp_path, *args))
  assert expected in line, line


@_slow
def test_a_model_directory_without_a_tokenizer_is_refused(tmp_path):
  config = json.dumps(dict(model_type="qwen3", hidden_size=8,
                           intermediate_size=8, num_attention_heads=2,
                           num_hidden_layers=1, vocab_size=16))
  model = _model_dir(tmp_path, config, tokenizer=False)
  line = _one_error_line(_example(tmp_path, f"--model={model}"))
  assert "has no tokenizer (none of tokenizer.json" in line, line


@_slow
def test_a_broken_tokenizer_file_is_one_line(tmp_path):
  config = json.dumps(dict(model_type="qwen3", hidden_size=8,
                           intermediate_size=8, num_attention_heads=2,
                           num_hidden_layers=1, vocab_size=16))
  model = _model_dir(tmp_path, config)  # tokenizer.json holds "{}"
  line = _one_error_line(_example(tmp_path, f"--model={model}"))
  assert f"cannot load the tokenizer in '{model}' (KeyError" in line, line


@_slow
def test_a_coordinator_address_alone_is_refused(tmp_path):
  env = {"JAX_COORDINATOR_ADDRESS": "127.0.0.1:1"}
  assert not {"JAX_NUM_PROCESSES", "JAX_PROCESS_ID"} & set(os.environ)
  line = _one_error_line(_example(tmp_path, env=env))
  assert ("JAX_COORDINATOR_ADDRESS=127.0.0.1:1 is set, but JAX_NUM_PROCESSES"
          " and JAX_PROCESS_ID are not") in line, line
  # The CLI says the same.
  cli = zygote.run(
      [sys.executable, "-m", "tunix_mcjax.cli.grpo_main", "--backend=mcjax"],
      env=launch_utils.launcher_env(env), capture_output=True, text=True,
      timeout=120, cwd=tmp_path)
  assert "JAX_COORDINATOR_ADDRESS=127.0.0.1:1 is set" in _one_error_line(
      cli, program="grpo_main")


# --- the same checks in this process ------------------------------------------


def test_check_job_names_a_bad_model_directory_and_metrics_path(tmp_path):
  from tunix_mcjax.recipes import job_checks  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.recipes import job_config  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.recipes import validation  # pylint: disable=g-import-not-at-top

  def problems(**kw):
    cfg = job_config.GrpoJobConfig(**kw)
    try:
      job_checks.check_job(cfg, num_hosts=1, devices_per_host=2)
    except validation.InputError as e:
      return str(e)
    return None

  assert problems() is None
  assert "is a directory; give the path of a file" in problems(
      metrics_out=str(tmp_path))
  broken = tmp_path / "broken"
  broken.mkdir()
  (broken / "config.json").write_text("{not json")
  assert "cannot read" in problems(model=str(broken))
  listed = _model_dir(tmp_path, "[]")
  assert "is not a JSON object" in problems(model=str(listed))


def test_a_reward_timeout_not_above_0_is_refused_by_both_entry_points():
  from tunix_mcjax.cli import options  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.recipes import job_config  # pylint: disable=g-import-not-at-top

  want = (r"^--reward_timeout_s must be > 0 seconds \(the most one reward"
          r" call may take\), got {}\.$")
  for value in (0, -1.5):
    with pytest.raises(ValueError, match=want.format(f"{value:g}")):
      job_config.GrpoJobConfig(reward_timeout_s=value)
    with pytest.raises(options.ConfigError, match=want.format(f"{value:g}")):
      options.CliOptions(reward_timeout_s=value)
  assert job_config.GrpoJobConfig(reward_timeout_s=0.25).reward_timeout_s == (
      0.25)


def test_a_heartbeat_limit_is_checked_by_both_entry_points():
  from tunix_mcjax.cli import options  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.recipes import job_config  # pylint: disable=g-import-not-at-top

  for kwargs, want in (({"heartbeat_timeout_s": 0}, "integer >= 1"),
                       ({"heartbeat_timeout_s": 30, "backend": "tunix"},
                        "--backend=tunix does not take it")):
    with pytest.raises(ValueError, match=want):
      job_config.GrpoJobConfig(**kwargs)
    with pytest.raises(options.ConfigError, match=want):
      options.CliOptions(**kwargs)
  assert job_config.GrpoJobConfig(
      heartbeat_timeout_s=30).heartbeat_timeout_s == 30
  assert options.CliOptions(backend="mcjax",
                            heartbeat_timeout_s=30).heartbeat_timeout_s == 30


def test_relaunch_refuses_before_deleting_the_metrics_file(tmp_path):
  from tunix_mcjax import launch  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import platforms  # pylint: disable=g-import-not-at-top

  metrics = tmp_path / "m.jsonl"
  metrics.write_text("kept\n")
  plan = platforms.simulated(2, 1)
  with pytest.raises(launch.LaunchError, match="--timeout must be > 0"):
    launch.relaunch_as_local_hosts([], plan=plan, timeout_s=0,
                                   fresh_files=[str(metrics)])
  with pytest.raises(launch.LaunchError, match="is a directory"):
    launch.relaunch_as_local_hosts([], plan=plan, timeout_s=10,
                                   fresh_files=[str(metrics), str(tmp_path)])
  assert metrics.read_text() == "kept\n"


# Another running job: holds the paths (job_files.claim) until killed.
_HOLDER = launch_utils.REPO_ROOT / "tests" / "support" / "job_files_holder.py"


@_slow
def test_a_second_job_on_the_same_paths_is_refused(tmp_path):
  ckpt, first_metrics = tmp_path / "ckpt", tmp_path / "first.jsonl"
  holder = zygote.popen(
      [sys.executable, str(_HOLDER), "hold", "first-job", str(ckpt),
       str(first_metrics)],
      env=launch_utils.launcher_env(), stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline() == "held\n"
    first_metrics.write_text('{"step": 1}\n')
    line = _one_error_line(_example(tmp_path, f"--checkpoint_dir={ckpt}"))
    assert (f"--checkpoint_dir={str(ckpt)!r} is in use by another job"
            f" (first-job, pid {holder.pid} on ") in line, line
    # Under the DA backend the driver claims the same way.
    line = _one_error_line(_example(
        tmp_path, f"--metrics_out={first_metrics}", "--backend=mcjax_da",
        "--trainer_hosts=1", "--rollout_hosts=1"))
    assert "is being written by another running job" in line, line
    assert first_metrics.read_text() == '{"step": 1}\n'
    # The CLI (its tunix backend claims before building anything).
    cli = zygote.run(
        [sys.executable, "-m", "tunix_mcjax.cli.grpo_main", "--backend=tunix",
         f"--metrics_out={first_metrics}"],
        env=launch_utils.launcher_env({"CI": "true"}), capture_output=True,
        text=True, timeout=120, cwd=tmp_path)
    assert "is being written by another running job" in _one_error_line(
        cli, program="grpo_main")
    assert first_metrics.read_text() == '{"step": 1}\n'
  finally:
    holder.kill()
    holder.wait()


@_slow
def test_the_cli_refuses_a_bad_timeout_before_touching_the_metrics(tmp_path):
  metrics = tmp_path / "m.jsonl"
  metrics.write_text('{"step": 1}\n')
  cli = zygote.run(
      [sys.executable, "-m", "tunix_mcjax.cli.grpo_main",
       "--backend=mcjax_da", "--timeout=0", f"--metrics_out={metrics}"],
      env=launch_utils.launcher_env({"CI": "true"}), capture_output=True,
      text=True, timeout=120, cwd=tmp_path)
  assert "--timeout must be > 0 seconds, got 0." in _one_error_line(
      cli, program="grpo_main")
  assert metrics.read_text() == '{"step": 1}\n'
