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

"""The example on a local Hugging Face checkpoint and local GSM8K rows.

`examples/grpo_qwen3.py --model=DIR --dataset=gsm8k:PATH` under mcjax with 2
simulated hosts: a tiny checkpoint the test writes (config.json, safetensors
and a character-level tokenizer), a slice of the shared GSM8K file, nothing
downloaded. Checks that both hosts ran, the step metrics are sane and the
GSM8K reward saw real completions.
"""

import json

import example_runs
import launch_utils
import pytest

import tiny_checkpoint

pytestmark = [pytest.mark.multihost, pytest.mark.e2e, pytest.mark.smoke]

GSM8K = launch_utils.REPO_ROOT.parent / "shared" / "data" / "gsm8k" / "train.jsonl"


@pytest.mark.skipif(not GSM8K.is_file(), reason=f"{GSM8K} not present")
def test_example_runs_on_local_checkpoint_and_gsm8k(tmp_path):
  ckpt = tiny_checkpoint.write(tmp_path / "ckpt")
  rows = GSM8K.read_text().splitlines()[:8]
  data = tmp_path / "gsm8k.jsonl"
  data.write_text("\n".join(rows) + "\n")
  out = tmp_path / "run"
  example_runs.run_example(
      out, "--backend=mcjax", "--num_hosts=2", "--devices_per_host=1",
      f"--model={ckpt}", f"--dataset=gsm8k:{data}", "--steps=1",
      "--batch_size=2", "--num_generations=2", "--max_new_tokens=4",
      # One of the 8 prompts is longer than 512 characters (= tokens):
      # dropped from the global rows, the same on both hosts.
      "--max_prompt_length=512", "--skip_long_prompts", timeout=500,
  )
  (record,) = [json.loads(l) for l in
               (out / "metrics.jsonl").read_text().splitlines()]
  assert record["num_hosts"] == 2 and record["step"] == 1
  assert 0.0 <= record["reward_mean"] <= 1.2
  assert record["completion_len_mean"] > 0
  for host in (0, 1):
    (call,) = json.loads((out / f"rollouts_host{host}.json").read_text())
    assert len(call["completions"]) == 2  # 1 prompt x G=2 on each host.
    assert "Question" in call["prompts"][0] or "?" in call["prompts"][0]
