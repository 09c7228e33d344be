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

"""Writes a minimal base config for Tunix's GRPO CLI, for the CLI tests.

The google-tunix 0.1.7 wheel does not ship `tunix/cli/base_config.yaml`, and
this project does not carry a copy of it, so the tests write their own: only
the keys that Tunix 0.1.7's `tunix/cli/config.py` and `tunix/cli/grpo_main.py`
need for the tiny GSM8K run, with values chosen for that run.

Why each key is there (Tunix's CLI, as installed):

* every top-level key that the recipe script or a test overrides: a
  `key=value` override of a top-level key the base config lacks is an error
  ("Key ... was passed at the command line but isn't in config"), while keys
  below a section (e.g. `model_config.mesh.shape`) may be new;
* read without a default: `model_config.{model_name, model_source, model_id,
  model_display}` and, for `model_source=huggingface`,
  `intermediate_ckpt_dir`; `tokenizer_config.{tokenizer_type,
  tokenizer_path, add_bos, add_eos}`; `data_source`, `dataset_name`,
  `apply_chat_template_to_dataset`; `verl_compatible`, `reward_functions`;
  `mesh.{shape, axis_names}` of the actor.

Mesh inheritance, as in the stock CLI: `*_model_config` sections take every
`model_config` key they lack or hold at the base value. The actor's mesh
equals `model_config`'s, so it follows `model_config.mesh` overrides; the
reference and rollout sections are empty, so each gets a mesh of its own
(disaggregated) unless a config sets `<role>_model_config.mesh=null
<role>_model_config.same_mesh_as=actor`, as the recipe does.

`rl_training_config.checkpoint_root_directory` is null, not a string: Tunix
turns a `key=null` override of a string key into "" and would then
checkpoint into the relative directory `actor/`; a null default keeps such an
override null (no checkpoints). The whole `rl_training_config` section is
replaced by any override of it (a Tunix "replace key"), so the recipe's own
values are the ones that run.
"""

from __future__ import annotations

import pathlib
from typing import Any

import yaml

MESH = {"shape": "(4,1)", "axis_names": "('fsdp','tp')"}
# Model and tokenizer of configs that are parsed and checked, never loaded:
# a hub id (a local directory would be read as a checkpoint) and an existing
# directory (the CLI refuses a missing local path; Tunix wants HF_TOKEN for a
# hub tokenizer).
MODEL_ID = "Qwen/Qwen3-0.6B"
TOKENIZER_DIR = str(pathlib.Path(__file__).resolve().parent)
# Overrides that make a colocated config (every role on the actor's mesh)
# mcjax can run: the starting point of the CLI tests' config checks.
COLOCATED = (
    "model_config.model_name=qwen3-0.6b",
    f"model_config.model_id={MODEL_ID}",
    "model_config.mesh.shape=(4,1)",
    "reference_model_config.mesh=null",
    "reference_model_config.same_mesh_as=actor",
    "rollout_model_config.mesh=null",
    "rollout_model_config.same_mesh_as=actor",
    f"tokenizer_config.tokenizer_path={TOKENIZER_DIR}",
    "batch_size=8",
)


def config(scratch_dir: pathlib.Path) -> dict[str, Any]:
  """The base config; anything it would write lands under `scratch_dir`."""
  return {
      "model_config": {
          "model_name": "qwen3-tiny",
          "model_id": "",
          "model_source": "huggingface",
          "intermediate_ckpt_dir": str(scratch_dir / "intermediate_ckpt"),
          "model_download_path": str(scratch_dir / "models"),
          "model_display": False,
          "mesh": dict(MESH),
      },
      "actor_model_config": {"mesh": dict(MESH)},
      "reference_model_config": {},
      "rollout_model_config": {},
      "tokenizer_config": {
          "tokenizer_type": "huggingface",
          "tokenizer_path": "",
          "add_bos": False,
          "add_eos": False,
      },
      "data_source": "huggingface",
      "dataset_name": "",
      "apply_chat_template_to_dataset": True,
      "batch_size": 4,
      "num_batches": 0,  # 0: every batch of the dataset.
      "num_train_epochs": 1,
      "train_fraction": 1.0,
      "num_test_batches": 0,  # Set by the recipe; unused by GRPO.
      "rl_training_config": {
          "actor_optimizer_config": {"opt_type": "sgd", "learning_rate": 0.05},
          "mini_batch_size": 4,
          "train_micro_batch_size": 4,
          "checkpoint_root_directory": None,
      },
      "grpo_config": {"num_generations": 4, "num_iterations": 1, "beta": 0.0},
      "rollout_config": {
          "total_generation_steps": 8,
          "max_prompt_length": 256,
          "temperature": 1.0,
      },
      "rollout_engine": "vanilla",
      # As Tunix's base config: the vLLM rollout's own section, which the
      # disaggregated vLLM recipe sets (vllm_config.async_scheduling).
      "vllm_config": {},
      "offload_to_cpu": False,
      "verl_compatible": False,
      "reward_functions": ["tunix.cli.reward_fn.gsm8k"],
  }


def write(path: pathlib.Path) -> pathlib.Path:
  """Writes the base config to `path` (a .yaml file); returns it."""
  path.parent.mkdir(parents=True, exist_ok=True)
  scratch = path.parent / "base_config_scratch"
  path.write_text(yaml.safe_dump(config(scratch), sort_keys=False))
  return path
