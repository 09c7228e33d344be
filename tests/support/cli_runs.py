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

"""What the CLI tests' end-to-end runs share: a tiny model with a few short
GSM8K rows, a run (or recipe script) that must succeed, and a checkpoint
step's arrays."""

from __future__ import annotations

import glob
import json
import os
import pathlib
import subprocess
import tempfile
from typing import Any

import numpy as np
import pytest

import launch_utils
import tiny_checkpoint
import zygote

GSM8K_TRAIN = (launch_utils.REPO_ROOT.parent / "shared" / "data" / "gsm8k"
               / "train.jsonl")


def short_gsm8k_inputs(root: pathlib.Path, rows: int, *,
                       head_dim: int = 16) -> dict[str, pathlib.Path]:
  """{"model": a tiny local Qwen3 checkpoint, "data": a directory whose
  train.jsonl holds the first `rows` GSM8K questions of <= 160 characters};
  skips the test where the shipped data is missing."""
  if not GSM8K_TRAIN.is_file():
    pytest.skip(f"GSM8K not found at {GSM8K_TRAIN}")
  data = root / "gsm8k"
  data.mkdir(parents=True)
  with open(GSM8K_TRAIN) as f:
    first = [json.loads(line) for line, _ in zip(f, range(200))]
  short = [r for r in first if len(r["question"]) <= 160][:rows]
  assert len(short) == rows, (len(short), rows)
  (data / "train.jsonl").write_text(
      "".join(json.dumps(r) + "\n" for r in short))
  return {"model": tiny_checkpoint.write(root / "qwen3_tiny",
                                         head_dim=head_dim),
          "data": data}


def run_ok(cmd: list[str], env: dict[str, str], cwd: pathlib.Path, *,
           timeout: float) -> subprocess.CompletedProcess[str]:
  """Runs a whole job (a multihost, e2e test's); fails the test unless it
  exits 0, with the output's tails."""
  launch_utils.require_markers("multihost", "e2e")
  proc = zygote.run(cmd, env=env, cwd=cwd, capture_output=True,
                    text=True, timeout=timeout)
  assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]
  return proc


def restore_step(step_dir: pathlib.Path) -> dict[str, np.ndarray]:
  """Every array of a checkpoint step (parameters and optimizer state)."""
  import jax  # pylint: disable=g-import-not-at-top
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top

  out: dict[str, Any] = {}
  for item in ("model_params", "optimizer_state"):
    checkpointer = ocp.PyTreeCheckpointer()
    tree = checkpointer.metadata(step_dir / item).item_metadata.tree
    restored = checkpointer.restore(
        step_dir / item, restore_args=jax.tree_util.tree_map(
            lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree))
    for path, leaf in jax.tree_util.tree_flatten_with_path(restored)[0]:
      out[item + jax.tree_util.keystr(path)] = np.asarray(leaf)
  return out


def cli_env(out: pathlib.Path, base_config: pathlib.Path) -> dict[str, str]:
  """Creates `out` with rows/ (the reward recorder's) and cwd/, and returns
  the offline CPU environment of a CLI run writing there."""
  out.mkdir()
  (out / "rows").mkdir()
  (out / "cwd").mkdir()
  return launch_utils.launcher_env({
      "TUNIX_BASE_CONFIG": str(base_config),
      "HF_DATASETS_CACHE": str(out / "hf_datasets"),
      "HF_HUB_OFFLINE": "1",
      "CLI_TEST_RECORD_DIR": str(out / "rows"),
      "JAX_PLATFORMS": "cpu",
  })


def run_recipe(recipe: pathlib.Path, args: list[str], env: dict[str, str],
               out: pathlib.Path) -> tuple[Any, list[dict]]:
  """Runs a recipe script (in `out`/cwd, its step records in
  `out`/metrics.jsonl, its console in `out`/console.txt) and fails the test
  unless it exits 0 and its rollout hosts removed their vLLM engines'
  temporary directories; returns (the process, the step records)."""
  pattern = os.path.join(tempfile.gettempdir(), "tunix_mcjax_vllm_*")
  engine_dirs = set(glob.glob(pattern))
  proc = zygote.run(
      ["bash", str(recipe), *args, "--devices_per_host=2",
       f"--metrics_out={out / 'metrics.jsonl'}", "--timeout=600"],
      env=env, cwd=out / "cwd", capture_output=True, text=True, timeout=900)
  (out / "console.txt").write_text(proc.stdout + proc.stderr)
  assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]
  records = [json.loads(l)
             for l in (out / "metrics.jsonl").read_text().splitlines()]
  # The rollout host freed its vLLM engine (and its temporary directory)
  # before the job ended it.
  left = set(glob.glob(pattern)) - engine_dirs
  assert not left, left
  return proc, records

