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

"""MaxText's patched `train_rl` on local hosts, for end-to-end tests.

`run(patched, tmp, rollout_engine=...)` runs 2 GRPO steps of a tiny Qwen3
(local tokenizer, 16 short GSM8K questions as a local parquet file) on 2
local hosts x 2 CPU devices under the mcjax backend, with the given
`rl_rollout_engine` ('native', or 'mcjax:vllm' where vLLM is installed).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import launch_utils
import tiny_checkpoint

GSM8K = (launch_utils.REPO_ROOT.parent / "shared" / "data" / "gsm8k"
         / "train.jsonl")


def run(patched: pathlib.Path, tmp: pathlib.Path, *, rollout_engine: str,
        head_dim: int = 16,
        timeout: float = 500) -> subprocess.CompletedProcess[str]:
  """Runs train_rl (patched maxtext under `patched`) on 2 local hosts."""
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
      f"rl_rollout_engine={rollout_engine}", "model_name=qwen3-0.6b",
      "override_model_config=True", "base_emb_dim=64",
      "base_num_query_heads=4", "base_num_kv_heads=2", f"head_dim={head_dim}",
      "base_mlp_dim=128", "base_num_decoder_layers=2", f"vocab_size={vocab}",
      "weight_dtype=float32", "dtype=float32", "hardware=cpu",
      "attention=dot_product", "convert_checkpoint_if_possible=false",
      f"tokenizer_path={tok}", f"hf_train_files={tmp / 'train.parquet'}",
      "dataset_name=openai/gsm8k", "num_test_batches=0", "batch_size=4",
      "num_batches=2", "rl.num_generations=2",
      "max_prefill_predict_length=512", "max_target_length=528",
      "enable_checkpointing=false", f"base_output_directory={tmp / 'out'}",
      "run_name=e2e",
      # MaxText dumps the train step's HLO when XLA_FLAGS is unset (its
      # default dump_hlo_xla_flags): here, not in /tmp/xla_dump.
      f"dump_hlo_local_dir={tmp / 'xla_dump'}/",
  ]
  env = {"DECOUPLE_GCLOUD": "TRUE",
         "PYTHONPATH": f"{patched}{os.pathsep}{launch_utils.REPO_ROOT}"}
  return launch_utils.run_launched(args, num_hosts=2, devices_per_host=2,
                                   timeout=timeout, extra_env=env)


def assert_two_steps_on_two_hosts(result: subprocess.CompletedProcess[str]
                                  ) -> None:
  """Both hosts started under the launcher and completed exactly 2 steps."""
  launch_utils.assert_ok(result)
  out = result.stdout
  # Real jax.distributed start-up through the backend's hook, no Pathways.
  assert "tunix_mcjax runtime (launcher): process 1 of 2" in (
      out + result.stderr)
  assert "[host 0] [mcjax] step 1:" in out and "[host 0] [mcjax] step 2:" in out
  assert "[mcjax] step 3:" not in out
  logs = result.stdout + result.stderr
  for host in (0, 1):
    assert any("RL Training Completed Successfully" in line
               for line in launch_utils.host_lines(logs, host))
