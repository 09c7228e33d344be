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

"""Tunix's disaggregated vLLM recipe, examples/rl/grpo/gsm8k/
run_qwen3_vllm_disagg.sh, under `--backend=mcjax_da` (its default).

Runs where vLLM imports (`.venv-maxtext-vllm`, `make test-maxtext-vllm`).
One run of the script with its own lines; the environment overrides only
the model (a tiny local Qwen3 with head_dim 32, which vLLM's CPU attention
needs), the data (8 GSM8K rows), sizes (batch 4, 2 generations, 8 new
tokens, 2 steps), the CPU (no flash attention, 2 simulated devices per
host) and where outputs go. The recipe's meshes at size: actor (2,1) ->
1 trainer host, rollout (2,1) -> 1 rollout host with its own vLLM engine;
Tunix's `rollout_engine="vllm"` is that host-local vLLM, which the start
line says; the recipe's vllm_config reaches the engine (Tunix's CLI maps it
onto rollout_vllm_* keys; the engine names the ones it does not use). The
default max_staleness 1: step 2 trains rows generated with the step-0
policy, with importance weights. The DA job's numbers against colocated
runs are tests/cli/test_cli_da.py's (native engine) and
tests/da/test_da_vllm.py's (vLLM) business; this test shows the recipe runs.
"""

import math
import sys

import pytest

import cli_runs
import launch_utils

pytestmark = [pytest.mark.vllm]

pytest.importorskip("vllm")

REPO = launch_utils.REPO_ROOT
RECIPE = REPO / "examples" / "rl" / "grpo" / "gsm8k" / (
    "run_qwen3_vllm_disagg.sh")
BATCH, STEPS = 4, 2


@pytest.fixture(scope="module")
def recipe_run(base_config, tmp_path_factory):
  root = tmp_path_factory.mktemp("recipe_vllm_disagg")
  # head_dim 32: vLLM's CPU attention has no kernel for 16.
  inputs = cli_runs.short_gsm8k_inputs(root, BATCH * STEPS, head_dim=32)
  out = root / "out"
  (out / "cwd").mkdir(parents=True)
  env = launch_utils.launcher_env({
      # The recipe passes `base_config.yaml`, which resolves to this file.
      "TUNIX_BASE_CONFIG": str(base_config),
      "PYTHON": sys.executable,
      "model_name": "qwen3-tiny",
      "model_dir": str(inputs["model"]),
      "data_dir": str(inputs["data"]),
      "use_flash_attention": "false",  # A TPU kernel.
      "batch_size": str(BATCH),
      "num_generations": "2",
      "total_generation_steps": "8",
      # Chat template + character tokenizer: 200-odd tokens a prompt.
      "max_prompt_length": "500",
      "actor_mesh_shape": "(2,1)",
      "rollout_mesh_shape": "(2,1)",
      "checkpoint_dir": str(out / "checkpoints"),
      "HF_DATASETS_CACHE": str(out / "hf_datasets"),
      "JAX_PLATFORMS": "cpu",
  })
  proc, records = cli_runs.run_recipe(
      RECIPE,
      [f"num_batches={STEPS}", "train_fraction=1.0",
       f"rl_training_config.metrics_logging_options.log_dir={out / 'tb'}"],
      env, out)
  return out, proc, records


def test_recipe_maps_meshes_and_names_the_engine_rollout_engine_means(
    recipe_run):
  out, proc, _ = recipe_run
  assert ("[grpo_main] mcjax_da: actor mesh (2,1) -> 1 trainer host(s);"
          " rollout mesh (2,1) -> 1 rollout host(s)") in proc.stdout
  assert ("rollout_engine=vllm: mcjax engine 'vllm' (the host-local vLLM on"
          " CPU)") in proc.stdout
  assert "starting 1 rollout hosts and 1 trainer hosts" in proc.stderr
  # The recipe's vllm_config (through Tunix's mapping) reached the rollout
  # host's vLLM engine, which names what it does not use.
  assert ("mcjax's 'vllm' engine (PyTorch vLLM) does not use:"
          " RolloutConfig.rollout_vllm_server_mode=True") in proc.stderr
  assert "rollout_vllm_tpu_backend_type='jax'" in proc.stderr
  # Nothing written relative to the working directory.
  assert not list((out / "cwd").iterdir())


def test_recipe_trains_at_staleness_one_with_importance_weights(recipe_run):
  _, _, records = recipe_run
  assert [r["step"] for r in records] == list(range(1, STEPS + 1))
  assert {r["backend"] for r in records} == {"mcjax_da"}
  # Step 1's rows come from the initial policy; step 2's were generated
  # while step 1 trained, one version behind.
  assert [r["staleness"] for r in records] == [0, 1]
  for r in records:
    assert math.isfinite(r["loss"]) and r["grad_norm"] > 0, r
    assert r["completion_tokens"] > 0
  # Step 2 trained rows of policy version 0 (generated before step 1's
  # update reached the rollout host), weighted by importance ratios: near
  # 1, since the recipe's learning rate (3e-6, warming up) barely moves the
  # policy, and vLLM's log-probs differ from the trainer's in the last
  # digits (the ratio is not exactly 1 at staleness 0 either).
  assert [r["policy_version"] for r in records] == [0, 0]
  stale = records[1]
  assert 0 < stale["is_weight_min"] <= stale["is_weight_mean"]
  assert stale["is_weight_mean"] <= stale["is_weight_max"]
  assert abs(stale["is_weight_mean"] - 1) < 1e-2, stale
