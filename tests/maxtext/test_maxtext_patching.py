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

"""tunix_mcjax/maxtext/patches/: each applies to the pinned maxtext and works.

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
import tiny_checkpoint
from tunix_mcjax.maxtext import patching as maxtext_patching

GSM8K = (launch_utils.REPO_ROOT.parent / "shared" / "data" / "gsm8k"
         / "train.jsonl")


@pytest.fixture(scope="module")
def patched(tmp_path_factory) -> pathlib.Path:
  out = tmp_path_factory.mktemp("maxtext_patched")
  maxtext_patching.apply(out)
  return out


def _python(code: str,
            pythonpath: pathlib.Path | None) -> subprocess.CompletedProcess:
  env = launch_utils.launcher_env({"DECOUPLE_GCLOUD": "TRUE"})
  if pythonpath is not None:
    env["PYTHONPATH"] = f"{pythonpath}{os.pathsep}{env['PYTHONPATH']}"
  return subprocess.run([sys.executable, "-c", code], env=env,
                        capture_output=True, text=True, timeout=300)


def test_every_patch_applies_in_order(tmp_path):
  names = [p.name for p in maxtext_patching.patches()]
  assert names == sorted(names) and len(names) == 4
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


IMPORT_TRAIN_RL = (
    "import sys\n"
    "import maxtext.trainers.post_train.rl.train_rl as t\n"
    "print('tpu_inference' in sys.modules, t.__file__)\n"
)


@pytest.mark.slow
def test_0001_train_rl_imports_without_tpu_inference(patched):
  pristine = _python(IMPORT_TRAIN_RL, None)
  assert pristine.returncode != 0 and "tpu_inference" in pristine.stderr
  proc = _python(IMPORT_TRAIN_RL, patched)
  assert proc.returncode == 0, proc.stderr[-3000:]
  loaded, path = proc.stdout.split()[-2:]
  assert loaded == "False" and path.startswith(str(patched))


CHECK = """
import types
import maxtext.trainers.post_train.rl.train_rl as t
def cfg(**kw):
  base = dict(rl_cluster_backend="tunix", use_pathways=True,
              rl_rollout_engine="vllm")
  base.update(kw)
  return types.SimpleNamespace(**base)
for kw in {cases}:
  try:
    t.validate_rl_cluster_config(cfg(**kw))
    print("OK")
  except ValueError as e:
    print("ERR", str(e).replace("\\n", " "))
print("FACTORY", t.get_rl_cluster_factory("mcjax").__module__)
"""


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
  ]
  proc = _python(CHECK.format(cases=repr(cases)), patched)
  assert proc.returncode == 0, proc.stderr[-3000:]
  lines = [l for l in proc.stdout.splitlines()
           if l.startswith(("OK", "ERR", "FACTORY"))]
  assert lines[0] == "OK" and lines[1] == "OK"
  assert "Unknown rl_cluster_backend='slurmjax'" in lines[2]
  assert "'mcjax'" in lines[2] and "'tunix'" in lines[2]
  assert "use_pathways=true" in lines[3] and "use_pathways=false" in lines[3]
  assert "rl_rollout_engine=native needs a backend" in lines[4]
  assert "rl_rollout_engine='sglang'" in lines[5]
  assert lines[6] == "FACTORY tunix_mcjax.backends"
  rl_yml = (patched / "maxtext" / "configs" / "post_train"
            / "rl.yml").read_text()
  assert "rl_cluster_backend: 'tunix'" in rl_yml


@pytest.mark.slow
def test_0003_backend_is_read_before_jax_starts(patched, tmp_path):
  yml = tmp_path / "rl.yml"
  yml.write_text("rl_cluster_backend: 'mcjax'\n")
  code = (
      "import maxtext.trainers.post_train.rl.train_rl as t, jax\n"
      f"print(t.rl_cluster_backend_from_args(['', {str(yml)!r}]))\n"
      f"print(t.rl_cluster_backend_from_args(['', {str(yml)!r},"
      " 'rl_cluster_backend=tunix']))\n"
      "print(t.rl_cluster_backend_from_args(['', 'missing.yml'], {}))\n"
      "print(t.rl_cluster_backend_from_args([''],"
      " {'rl_cluster_backend': 'x'}))\n"
      # Reading the name must not start a JAX backend.
      "from jax._src import xla_bridge\n"
      "print(xla_bridge.backends_are_initialized())\n"
  )
  proc = _python(code, patched)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.split()[-5:] == ["mcjax", "tunix", "tunix", "x", "False"]


@pytest.fixture(scope="module")
def rl_run(patched, tmp_path_factory):
  tmp = tmp_path_factory.mktemp("train_rl")
  tok = tiny_checkpoint.write(tmp / "tok")
  rows = [json.loads(line) for line in GSM8K.read_text().splitlines()]
  rows = sorted(rows, key=lambda r: len(r["question"]))[:16]
  import datasets  # pylint: disable=g-import-not-at-top

  datasets.Dataset.from_list(
      [{"question": r["question"], "answer": r["answer"]} for r in rows]
  ).to_parquet(str(tmp / "train.parquet"))
  rl_yml = patched / "maxtext" / "configs" / "post_train" / "rl.yml"
  vocab = len(
      json.loads((tok / "tokenizer.json").read_text())["model"]["vocab"])
  args = [
      sys.executable, "-m", "maxtext.trainers.post_train.rl.train_rl",
      str(rl_yml), "rl_cluster_backend=mcjax", "use_pathways=false",
      "rl_rollout_engine=native", "model_name=qwen3-0.6b",
      "override_model_config=True", "base_emb_dim=64",
      "base_num_query_heads=4", "base_num_kv_heads=2", "head_dim=16",
      "base_mlp_dim=128", "base_num_decoder_layers=2", f"vocab_size={vocab}",
      "weight_dtype=float32", "dtype=float32", "hardware=cpu",
      "attention=dot_product", "convert_checkpoint_if_possible=false",
      f"tokenizer_path={tok}", f"hf_train_files={tmp / 'train.parquet'}",
      "dataset_name=openai/gsm8k", "num_test_batches=0", "batch_size=4",
      "num_batches=2", "rl.num_generations=2",
      "max_prefill_predict_length=512", "max_target_length=528",
      "enable_checkpointing=false", f"base_output_directory={tmp / 'out'}",
      "run_name=e2e",
  ]
  env = {"DECOUPLE_GCLOUD": "TRUE",
         "PYTHONPATH": f"{patched}{os.pathsep}{launch_utils.REPO_ROOT}"}
  return launch_utils.run_launched(args, num_hosts=2, devices_per_host=2,
                                   timeout=500, extra_env=env)


@pytest.mark.multihost
@pytest.mark.e2e
def test_patched_train_rl_runs_two_steps_on_two_hosts(rl_run):
  launch_utils.assert_ok(rl_run)
  out = rl_run.stdout
  # Real jax.distributed start-up through the backend's hook, no Pathways.
  assert "tunix_mcjax runtime (launcher): process 1 of 2" in (
      out + rl_run.stderr)
  assert "[host 0] [mcjax] step 1:" in out and "[host 0] [mcjax] step 2:" in out
  assert "[mcjax] step 3:" not in out
  logs = rl_run.stdout + rl_run.stderr
  for host in (0, 1):
    assert any("RL Training Completed Successfully" in line
               for line in launch_utils.host_lines(logs, host))
