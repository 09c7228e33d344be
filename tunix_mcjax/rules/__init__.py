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

"""What the mcjax backend can run: its rules, each stated once.

The rules are checked in two places, from two views of the same job
(`checks`):

* `check_cluster` / `per_host_training_config`: `McJaxRLCluster` at
  construction, on the objects (actor, meshes, Tunix's `ClusterConfig`).
* `check_job`: the CLI, on Tunix's parsed GRPO config, before any host
  starts; it uses no JAX device.

Each rule is one function that returns a `Problem` (message and the
exception type the cluster raises) or None; both views call the same
function, so a rule and its message live in one place. The cluster raises
the first problem; the CLI lists them all.

The rules by topic, one module each (callers read every name as
`rules.<name>`, re-exported here):

* `agentic`: Tunix's agentic GRPO mode through the CLI (what of it runs).
* `batches`: global batch knobs over hosts, batch axes, O3's dealing,
  checkpoint intervals; `per_host_training_config`.
* `engines`: `rollout_engine` names, MaxText trainers' engines.
* `learners`: training mode, learner, roles and placement, packing's loss.
* `lora`: LoRA settings and the engines that take a LoRA actor.
* `meshes`: the mesh choice (fsdp or hsdp from the model's widths), the
  actor mesh's layout by host, device order (topology) and host blocks.
* `problem`: `Problem`.
* `vllm_keys`: Tunix's `rollout_vllm_*` keys under the 'vllm' engine,
  honoured or refused, and vLLM's share of the GPU beside JAX's.

This package imports no JAX at module level: `check_job` runs in the process
that launches the hosts.
"""

from tunix_mcjax.rules.agentic import AGENTIC_MODE
from tunix_mcjax.rules.agentic import TRAINING_MODES
from tunix_mcjax.rules.agentic import agentic_job
from tunix_mcjax.rules.agentic import learner_section
from tunix_mcjax.rules.batches import GLOBAL_BATCH_KNOBS
from tunix_mcjax.rules.batches import ROW_NORMALISED_LOSS_MODES
from tunix_mcjax.rules.batches import balanced_micro_batches
from tunix_mcjax.rules.batches import balanced_updates
from tunix_mcjax.rules.batches import batch_axes
from tunix_mcjax.rules.batches import checkpoint_interval
from tunix_mcjax.rules.batches import data_sharding_axes
from tunix_mcjax.rules.batches import global_batch
from tunix_mcjax.rules.batches import per_host_training_config
from tunix_mcjax.rules.checks import JobCheck
from tunix_mcjax.rules.checks import check_cluster
from tunix_mcjax.rules.checks import check_job
from tunix_mcjax.rules.checks import same_mesh
from tunix_mcjax.rules.engines import ENGINE_TP_ENGINES
from tunix_mcjax.rules.engines import MAXTEXT_ENGINES
from tunix_mcjax.rules.engines import MCJAX_ENGINE_PREFIX
from tunix_mcjax.rules.engines import TUNIX_ENGINES
from tunix_mcjax.rules.engines import TUNIX_VLLM_ENGINE
from tunix_mcjax.rules.engines import VANILLA_ENGINE
from tunix_mcjax.rules.engines import engine_tp
from tunix_mcjax.rules.engines import mcjax_engine_name
from tunix_mcjax.rules.engines import registered_engine
from tunix_mcjax.rules.engines import missing_modules
from tunix_mcjax.rules.engines import rollout_engine
from tunix_mcjax.rules.engines import selected_engine
from tunix_mcjax.rules.engines import tunix_vllm_engine
from tunix_mcjax.rules.engines import trainer_engine
from tunix_mcjax.rules.learners import LEARNERS
from tunix_mcjax.rules.learners import PACKING_LOSS_MODE
from tunix_mcjax.rules.learners import UNSUPPORTED_ROLES
from tunix_mcjax.rules.learners import disjoint_role
from tunix_mcjax.rules.learners import learner
from tunix_mcjax.rules.learners import offload_to_cpu
from tunix_mcjax.rules.learners import sequence_packing
from tunix_mcjax.rules.learners import training_mode
from tunix_mcjax.rules.learners import unsupported_role
from tunix_mcjax.rules.lora import DEFAULT_LORA_MODULES
from tunix_mcjax.rules.lora import LORA_ENGINES
from tunix_mcjax.rules.lora import QWEN3_LORA_TARGETS
from tunix_mcjax.rules.lora import lora_engine
from tunix_mcjax.rules.lora import lora_module_paths
from tunix_mcjax.rules.lora import lora_settings
from tunix_mcjax.rules.meshes import BATCH_AXES
from tunix_mcjax.rules.meshes import DATA_AXIS
from tunix_mcjax.rules.meshes import FSDP_DIMS
from tunix_mcjax.rules.meshes import MESH_AXIS_NAMES
from tunix_mcjax.rules.meshes import MESH_KINDS
from tunix_mcjax.rules.meshes import MeshChoice
from tunix_mcjax.rules.meshes import TP_DIMS
from tunix_mcjax.rules.meshes import choose_mesh
from tunix_mcjax.rules.meshes import config_mesh
from tunix_mcjax.rules.meshes import hf_model_dims
from tunix_mcjax.rules.meshes import host_blocks
from tunix_mcjax.rules.meshes import mesh_layout
from tunix_mcjax.rules.meshes import topology_order
from tunix_mcjax.rules.problem import Problem
from tunix_mcjax.rules.problem import raise_first
from tunix_mcjax.rules.vllm_keys import vllm_engine

__all__ = [
    # agentic
    "AGENTIC_MODE",
    "TRAINING_MODES",
    "agentic_job",
    "learner_section",
    # batches
    "GLOBAL_BATCH_KNOBS",
    "ROW_NORMALISED_LOSS_MODES",
    "balanced_micro_batches",
    "balanced_updates",
    "batch_axes",
    "checkpoint_interval",
    "data_sharding_axes",
    "global_batch",
    "per_host_training_config",
    # checks
    "JobCheck",
    "check_cluster",
    "check_job",
    "same_mesh",
    # engines
    "ENGINE_TP_ENGINES",
    "MAXTEXT_ENGINES",
    "MCJAX_ENGINE_PREFIX",
    "TUNIX_ENGINES",
    "TUNIX_VLLM_ENGINE",
    "VANILLA_ENGINE",
    "engine_tp",
    "mcjax_engine_name",
    "registered_engine",
    "missing_modules",
    "rollout_engine",
    "selected_engine",
    "tunix_vllm_engine",
    "trainer_engine",
    # learners
    "LEARNERS",
    "PACKING_LOSS_MODE",
    "UNSUPPORTED_ROLES",
    "disjoint_role",
    "learner",
    "offload_to_cpu",
    "sequence_packing",
    "training_mode",
    "unsupported_role",
    # lora
    "DEFAULT_LORA_MODULES",
    "LORA_ENGINES",
    "QWEN3_LORA_TARGETS",
    "lora_engine",
    "lora_module_paths",
    "lora_settings",
    # meshes
    "BATCH_AXES",
    "DATA_AXIS",
    "FSDP_DIMS",
    "MESH_AXIS_NAMES",
    "MESH_KINDS",
    "MeshChoice",
    "TP_DIMS",
    "choose_mesh",
    "config_mesh",
    "hf_model_dims",
    "host_blocks",
    "mesh_layout",
    "topology_order",
    # problem
    "Problem",
    "raise_first",
    # vllm_keys
    "vllm_engine",
]
