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

"""maxtext_patches/: each applies to the pinned maxtext and works.

The patches are applied to a copy of the installed maxtext
(`tunix_mcjax.maxtext.patching`); the copy is put first on PYTHONPATH of
subprocesses, so the environment's maxtext stays pristine. The end-to-end
test runs MaxText's own RL entry point (patched) for 2 GRPO steps with a
tiny Qwen3 on 2 local hosts x 2 CPU devices under the mcjax backend.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

import launch_utils
import train_rl_runs
from tunix_mcjax.maxtext import patching as maxtext_patching


@pytest.fixture(scope="module")
def patched(tmp_path_factory) -> pathlib.Path:
  out = tmp_path_factory.mktemp("maxtext_patched")
  maxtext_patching.apply(out)
  return out


# The checks of the patched entry point: `maxtext_patch_checks.py CHECK ARG...`.
_CHECKS = (pathlib.Path(__file__).resolve().parents[1] / "support" /
           "maxtext_patch_checks.py")


def _python(check: list[str],
            pythonpath: pathlib.Path | None) -> subprocess.CompletedProcess:
  env = launch_utils.launcher_env({"DECOUPLE_GCLOUD": "TRUE"})
  if pythonpath is not None:
    env["PYTHONPATH"] = f"{pythonpath}{os.pathsep}{env['PYTHONPATH']}"
  return subprocess.run([sys.executable, str(_CHECKS), *check], env=env,
                        capture_output=True, text=True, timeout=300)


def test_every_patch_applies_in_order(tmp_path):
  names = [p.name for p in maxtext_patching.patches()]
  assert names == sorted(names) and len(names) == 5
  for k in range(1, len(names) + 1):
    dst = maxtext_patching.apply(tmp_path / str(k), upto=k)
    assert (dst / "trainers" / "post_train" / "rl" / "train_rl.py").is_file()


def test_a_patch_that_does_not_apply_is_an_error(tmp_path, monkeypatch):
  bad = tmp_path / "patches"
  bad.mkdir()
  (bad / "0001-bad.patch").write_text(
      "--- a/version.py\n+++ b/version.py\n@@ -1,1 +1,1 @@\n-no such line\n+x\n"
  )
  monkeypatch.setattr(maxtext_patching, "PATCH_DIR", bad)
  with pytest.raises(RuntimeError, match="0001-bad.patch does not apply"):
    maxtext_patching.apply(tmp_path / "out")
  assert not (tmp_path / "out" / "maxtext").exists()


# Imports train_rl; prints whether tpu_inference was loaded and its file.
IMPORT_TRAIN_RL = ["import_train_rl"]


@pytest.mark.slow
def test_0001_train_rl_imports_without_tpu_inference(patched):
  pristine = _python(IMPORT_TRAIN_RL, None)
  assert pristine.returncode != 0 and "tpu_inference" in pristine.stderr
  proc = _python(IMPORT_TRAIN_RL, patched)
  assert proc.returncode == 0, proc.stderr[-3000:]
  loaded, path = proc.stdout.split()[-2:]
  assert loaded == "False" and path.startswith(str(patched))


@pytest.mark.slow
def test_0002_backend_key_and_clear_errors(patched):
  cases = [
      {},
      dict(rl_cluster_backend="mcjax", use_pathways=False,
           rl_rollout_engine="native"),
      dict(rl_cluster_backend="slurmjax"),
      dict(rl_cluster_backend="mcjax", use_pathways=True),
      dict(rl_rollout_engine="native"),
      dict(rl_rollout_engine="sglang"),
      # 0005: an engine of the backend itself, by '<backend>:<engine>'.
      dict(rl_cluster_backend="mcjax", use_pathways=False,
           rl_rollout_engine="mcjax:vllm"),
      dict(rl_rollout_engine="mcjax:vllm"),
  ]
  proc = _python(["validate", json.dumps(cases)], patched)
  assert proc.returncode == 0, proc.stderr[-3000:]
  lines = [l for l in proc.stdout.splitlines()
           if l.startswith(("OK", "ERR", "FACTORY"))]
  assert lines[0] == "OK" and lines[1] == "OK"
  assert "Unknown rl_cluster_backend='slurmjax'" in lines[2]
  assert "'mcjax'" in lines[2] and "'tunix'" in lines[2]
  assert "use_pathways=true" in lines[3] and "use_pathways=false" in lines[3]
  assert "rl_rollout_engine=native needs a backend" in lines[4]
  assert "rl_rollout_engine='sglang'" in lines[5]
  assert "'mcjax:vllm'" in lines[5]  # names the backend-engine form
  assert lines[6] == "OK"
  assert "engine of the 'mcjax' cluster backend" in lines[7]
  assert "rl_cluster_backend='tunix'" in lines[7]
  assert lines[8] == "FACTORY tunix_mcjax.backends"
  rl_yml = (patched / "maxtext" / "configs" / "post_train"
            / "rl.yml").read_text()
  assert "rl_cluster_backend: 'tunix'" in rl_yml


@pytest.mark.slow
def test_0003_backend_is_read_before_jax_starts(patched, tmp_path):
  yml = tmp_path / "rl.yml"
  yml.write_text("rl_cluster_backend: 'mcjax'\n")
  # Reading the name must not start a JAX backend.
  proc = _python(["backend_before_jax", str(yml)], patched)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.split()[-5:] == ["mcjax", "tunix", "tunix", "x", "False"]


@pytest.fixture(scope="module")
def rl_run(patched, tmp_path_factory):
  return train_rl_runs.run(patched, tmp_path_factory.mktemp("train_rl"),
                           rollout_engine="native")


@pytest.mark.multihost
@pytest.mark.e2e
def test_patched_train_rl_runs_two_steps_on_two_hosts(rl_run):
  train_rl_runs.assert_two_steps_on_two_hosts(rl_run)
