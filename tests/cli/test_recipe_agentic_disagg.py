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

"""Tunix's agentic disaggregated recipes, examples/rl/grpo/gsm8k/
run_qwen3_8b_disagg.sh and its MaxText twin run_qwen3_8b_disagg_maxtext.sh,
under `--backend=mcjax_da` (their default).

Runs where vLLM and MaxText import (`.venv-maxtext-vllm`,
`make test-maxtext-vllm`). One run of each script with its own lines (training_mode=agentic_grpo,
rollout_engine="vllm", a training and log-prob micro-batch of 1 beside a
rollout micro-batch of the batch, Qwen's chat parser, the recipe's system
prompt, vllm_config); the environment overrides only the model (a tiny
local Qwen3 with head_dim 32, which vLLM's CPU attention needs), the data
(4 GSM8K rows), sizes (batch 2, 2 agents a prompt, 8 response tokens, 2
steps), the CPU (2 simulated devices per host), where outputs go, the base
config (the tests' own with base_agentic_config.yaml's keys: the Tunix
wheel ships neither) and, because the random tiny model seldom says eos,
turns that also end at a digit (an episode that runs out of its budget is
not trained, docs/agentic.md). The recipe's meshes at size: train (2,1) ->
1 trainer host, rollout (1,2) -> 1 rollout host with its own vLLM engine
at tensor_parallel_size 2 (the mesh's tp axis, as in Tunix: two vLLM
worker processes).
The MaxText recipe's actor is MaxText's qwen3-8b at the tiny widths (its
base_emb_dim variable and more model_config.kwargs: MaxText settings, which
Tunix 0.1.7's CLI would drop and mcjax passes on), random weights; its
rollout host runs vLLM on Tunix's Qwen3 of those widths, into which the
trainer maps its parameters.
In agentic mode --max_staleness defaults to the config's off_policy_steps:
0 in the recipes; the MaxText run sets agentic_grpo_config.off_policy_steps=1
(the one setting beyond size), so its MaxText trainer host trains step 2
on turns its vLLM rollout host generated with the policy before.
The numbers of agentic DA jobs against colocated and stock runs are
tests/cli/test_cli_agentic.py's and tests/test_agentic_equivalence.py's
business; this test shows the recipe runs.
"""

import math
import sys

import pytest
import yaml

import cli_runs
import launch_utils
from tunix_mcjax import checkpointing
from cli import test_cli_agentic as agentic_cli

pytestmark = [pytest.mark.vllm, pytest.mark.multihost, pytest.mark.e2e]

pytest.importorskip("vllm")

REPO = launch_utils.REPO_ROOT
RECIPES = REPO / "examples" / "rl" / "grpo" / "gsm8k"
BATCH, GENERATIONS, STEPS = 2, 2, 2
# The MaxText run's staleness; the HF run's is the recipe's (0).
K1 = 1


def _staleness(out) -> int:
  return K1 if "maxtext" in out.parent.name else 0


def _run(root, recipe: str, env: dict[str, str], args: list[str]):
  """Runs `recipe` at the tests' sizes; (out, process, step records)."""
  base = root / "base" / "base_config.yaml"
  base.parent.mkdir()
  base.write_text(yaml.safe_dump(
      agentic_cli.agentic_config(base.parent / "scratch"), sort_keys=False))
  inputs = cli_runs.short_gsm8k_inputs(root, BATCH * STEPS, head_dim=32)
  stop_tokens = agentic_cli.stop_tokens(inputs["model"])
  out = root / "out"
  (out / "cwd").mkdir(parents=True)
  env = launch_utils.launcher_env({
      "PYTHON": sys.executable,
      "base_config": str(base),
      "model_dir": str(inputs["model"]),
      "data_dir": str(inputs["data"]),
      "batch_size": str(BATCH),
      "num_batches": str(STEPS),
      "mini_batch_size": str(BATCH),
      "rollout_micro_batch_size": str(BATCH),
      "num_generations": str(GENERATIONS),
      "max_response_length": "8",
      # Chat template, system prompt and question through a character
      # tokenizer: about 600 tokens.
      "max_prompt_length": "1024",
      "train_mesh": "(2,1)",
      "rollout_mesh": "(1,2)",
      # The recipe's checkpoint line: the directory gets its _<suffix>.
      "checkpoint_dir": str(out / "ckpt"),
      "checkpoint_suffix": "0000",
      "HF_DATASETS_CACHE": str(out / "hf_datasets"),
      "JAX_PLATFORMS": "cpu",
      **env,
  })
  if callable(args):
    args = args(inputs["model"])
  proc, records = cli_runs.run_recipe(
      RECIPES / recipe,
      [f"rollout_config.eos_tokens={stop_tokens}",
       "model_config.model_download_path=" + str(out / "models"),
       f"rl_training_config.metrics_logging_options.log_dir={out / 'tb'}",
       *args], env, out)
  return out, proc, records


def _tiny_maxtext(model_dir) -> list[str]:
  """MaxText settings of the tiny model's widths and vocabulary."""
  import transformers  # pylint: disable=g-import-not-at-top

  vocab = len(transformers.AutoTokenizer.from_pretrained(model_dir))
  settings = dict(override_model_config="true", base_num_query_heads=4,
                  base_num_kv_heads=2, head_dim=32, base_mlp_dim=128,
                  base_num_decoder_layers=2, vocab_size=vocab,
                  # float32 throughout (MaxText computes in bfloat16 by
                  # default), so the engine's log-probs can be held to the
                  # trainer's tightly.
                  dtype="float32", matmul_precision="highest")
  return [f"model_config.kwargs.{k}={v}" for k, v in settings.items()]


@pytest.fixture(scope="module", params=["hf", "maxtext"])
def recipe_run(request, tmp_path_factory):
  launch_utils.require_markers("multihost", "e2e")
  root = tmp_path_factory.mktemp(f"recipe_agentic_disagg_{request.param}")
  if request.param == "hf":
    return _run(root, "run_qwen3_8b_disagg.sh",
                {"model_name": "qwen3-tiny"}, [])
  # Off-policy: Tunix's own off_policy_steps (the staleness bound of
  # mcjax_da in agentic mode), the one setting beyond size.
  return _run(root, "run_qwen3_8b_disagg_maxtext.sh",
              {"base_emb_dim": "64"},
              lambda model: [*_tiny_maxtext(model),
                             f"agentic_grpo_config.off_policy_steps={K1}"])



def test_recipe_maps_meshes_and_names_the_engine(recipe_run):
  out, proc, _ = recipe_run
  assert ("[grpo_main] mcjax_da: actor mesh (2,1) -> 1 trainer host(s);"
          " rollout mesh (1,2) -> 1 rollout host(s), one engine each (engine"
          " tp 2)") in proc.stdout
  assert ("rollout_engine=vllm: mcjax engine 'vllm' (the host-local vLLM on"
          " CPU)") in proc.stdout
  # Agentic mode's staleness is the config's off_policy_steps.
  assert f"max_staleness {_staleness(out)}" in proc.stdout + proc.stderr
  assert "starting 1 rollout hosts and 1 trainer hosts" in proc.stderr
  if "maxtext" in out.parent.name:
    # The actor is MaxText's model at the settings the recipe passes.
    assert ("model_source=maxtext: MaxText's qwen3-8b (2 layers, width 64,"
            in proc.stdout + proc.stderr)
  # The recipe's vllm_config reached the rollout host's engine, which names
  # what it does not use.
  assert ("mcjax's 'vllm' engine (PyTorch vLLM) does not use:"
          " RolloutConfig.rollout_vllm_server_mode=True") in proc.stderr
  # Nothing written relative to the working directory.
  assert not list((out / "cwd").iterdir())
  # The recipe's checkpoint directory holds the last step (saved at the
  # end whatever the recipe's interval of 250 updates).
  assert checkpointing.complete_steps(str(out / "ckpt_0000"))[-1] == STEPS


def test_recipe_trains_agents_on_the_schedule(recipe_run):
  out, _, records = recipe_run
  assert [r["step"] for r in records] == list(range(1, STEPS + 1))
  assert {r["backend"] for r in records} == {"mcjax_da"}
  # On policy (HF), or step 2 on batch 2's turns generated by policy 0
  # while step 1 trained (MaxText trainer, vLLM rollout host, staleness 1).
  k = _staleness(out)
  assert [r["staleness"] for r in records] == [min(k, s)
                                               for s in range(STEPS)]
  assert [r["policy_version"] for r in records] == [
      max(0, s - k) for s in range(STEPS)]
  for r in records:
    assert math.isfinite(r["loss"]) and r["completion_tokens"] > 0, r
  # Some agent's turn ended (eos or a digit) and was scored and trained.
  assert max(r["grad_norm"] for r in records) > 0, records
