#!/bin/bash
# Copyright 2025 Google LLC
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

# Tunix 0.1.7's examples/rl/grpo/gsm8k/run_qwen3.sh, adapted to run offline
# and under either cluster backend. Differences from the stock recipe:
#   * the entry point: `python3 -m tunix.cli.grpo_main` becomes
#     `python -m tunix_mcjax.cli.grpo_main --backend=${BACKEND}` (the one-line
#     switch; BACKEND=tunix runs the stock pipeline and cluster);
#   * offline inputs: the model and tokenizer come from a local Hugging Face
#     checkpoint directory ($model_dir) instead of the hub, GSM8K from local
#     jsonl files ($data_dir: train.jsonl, test.jsonl) through Tunix's
#     `data_source=huggingface` instead of a TFDS download, and the reward
#     functions by module name (the wheel has no tunix/ source tree);
#   * mesh, flash attention and the Python interpreter are variables, so the
#     same script runs on TPU (defaults as stock) and on CPU;
#   * remat_config defaults to 1 (none) instead of 3: with 3 (DECODER) Tunix
#     0.1.7's Qwen3 fails inside its own sampler's decode loop (flax
#     TraceContextError, seen with the stock vanilla engine on CPU).
#
# The base config: like the stock recipe, this passes `base_config.yaml`,
# which means Tunix's own tunix/cli/base_config.yaml. The google-tunix 0.1.7
# wheel does not ship that file and this project does not carry a copy, so
# set TUNIX_BASE_CONFIG to it, taken from a Tunix checkout of the pinned
# release, or to a base config of your own:
#   git clone --branch v0.1.7 https://github.com/google/tunix /opt/tunix
#   export TUNIX_BASE_CONFIG=/opt/tunix/tunix/cli/base_config.yaml
# (an installed Tunix that does ship the file uses its own, as the stock CLI
# does). Without either, the command fails before any host starts.
#
# Examples (with TUNIX_BASE_CONFIG exported as above):
#   model_dir=/models/Qwen3-1.7B-Base BACKEND=mcjax \
#     examples/rl/grpo/gsm8k/run_qwen3.sh
#   # CPU, 2 simulated hosts x 4 devices (mcjax re-runs itself as 2 local
#   # processes when no cluster is detected):
#   JAX_PLATFORMS=cpu use_flash_attention=false model_dir=... BACKEND=mcjax \
#     examples/rl/grpo/gsm8k/run_qwen3.sh --num_hosts=2
#   # CPU, stock backend: one process needs the 8 devices of the mesh:
#   JAX_PLATFORMS=cpu XLA_FLAGS=--xla_force_host_platform_device_count=8 \
#     use_flash_attention=false model_dir=... BACKEND=tunix \
#     examples/rl/grpo/gsm8k/run_qwen3.sh
# Extra arguments are appended: key=value overrides (later ones win) and
# flags such as --num_hosts, --devices_per_host, --metrics_out.

set -x # Enable xtrace

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../.." && pwd)

# specify at cmd line to override defaults, e.g.
BACKEND=${BACKEND:-mcjax}
PYTHON=${PYTHON:-python3}
model_name=${model_name:-"qwen3-1.7b-base"}
model_dir=$(realpath -m "${model_dir:-/models/Qwen3-1.7B-Base}")
data_dir=$(realpath -m "${data_dir:-${repo_root}/../shared/data/gsm8k}")
mesh_shape=${mesh_shape:-"(2,4)"}
use_flash_attention=${use_flash_attention:-true}
remat_config=${remat_config:-1}
batch_size=${batch_size:-8}
train_micro_batch_size=${train_micro_batch_size:-4}
total_generation_steps=${total_generation_steps:-512}
max_prompt_length=${max_prompt_length:-128}
num_train_epochs=${num_train_epochs:-1}
warmup_ratio=${warmup_ratio:-0.1}
train_fraction=${train_fraction:-0.8}
checkpoint_dir=${checkpoint_dir:-"/tmp/grpo_checkpoints/${model_name}_$RANDOM"}

echo "Using parameters:"
echo "  Backend: $BACKEND"
echo "  Base Config: ${TUNIX_BASE_CONFIG:-base_config.yaml (shipped by Tunix)}"
echo "  Model Directory: $model_dir"
echo "  Data Directory: $data_dir"
echo "  Mesh Shape: $mesh_shape"
echo "  Batch Size: $batch_size"
echo "  Train Micro Batch Size: $train_micro_batch_size"
echo "  Total Generation Steps: $total_generation_steps"
echo "  Max Prompt Length: $max_prompt_length"
echo "  Num Epochs: $num_train_epochs"
echo "  Warmup Ratio: $warmup_ratio"
echo "  Train Fraction: $train_fraction"
echo "  Checkpoint Directory: $checkpoint_dir"

export HF_HUB_OFFLINE=1  # Everything is local; never ask a hub.

"${PYTHON}" -m tunix_mcjax.cli.grpo_main --backend="${BACKEND}" \
  base_config.yaml \
  model_config.model_name=${model_name} \
  model_config.model_id="${model_dir}" \
  model_config.model_source=huggingface \
  model_config.use_flash_attention=${use_flash_attention} \
  model_config.flash_attention_block_size=256 \
  model_config.intermediate_ckpt_dir="/tmp/intermediate_ckpt/${model_name}" \
  model_config.model_download_path="/tmp/models/${model_name}" \
  model_config.mesh.shape="${mesh_shape}" \
  model_config.mesh.axis_names="('fsdp','tp')" \
  model_config.rng_seed=42 \
  model_config.remat_config=${remat_config} \
  actor_model_config.lora_config.rank=64 \
  actor_model_config.lora_config.alpha=64.0 \
  actor_model_config.lora_config.module_path=".*q_proj|.*k_proj|.*v_proj|.*o_proj|.*gate_proj|.*down_proj|.*up_proj" \
  actor_model_config.mesh.shape="${mesh_shape}" \
  actor_model_config.mesh.axis_names="('fsdp','tp')" \
  reference_model_config.mesh=null \
  reference_model_config.same_mesh_as="actor" \
  rollout_model_config.mesh=null \
  rollout_model_config.same_mesh_as="actor" \
  tokenizer_config.tokenizer_path="${model_dir}" \
  tokenizer_config.tokenizer_type=huggingface \
  tokenizer_config.add_bos=false \
  data_source=huggingface \
  dataset_name="${data_dir}" \
  batch_size=$batch_size \
  num_test_batches=100 \
  num_train_epochs=$num_train_epochs \
  train_fraction=$train_fraction \
  rl_training_config.actor_optimizer_config.opt_type="adamw" \
  rl_training_config.actor_optimizer_config.peak_value=3e-6 \
  rl_training_config.actor_optimizer_config.schedule_type="warmup_cosine_decay_schedule" \
  rl_training_config.actor_optimizer_config.init_value=0.0 \
  rl_training_config.actor_optimizer_config.end_value=0.0 \
  rl_training_config.actor_optimizer_config.warmup_ratio=$warmup_ratio \
  rl_training_config.actor_optimizer_config.b1=0.9 \
  rl_training_config.actor_optimizer_config.b2=0.99 \
  rl_training_config.actor_optimizer_config.weight_decay=0.1 \
  rl_training_config.actor_optimizer_config.max_grad_norm=0.1 \
  rl_training_config.eval_every_n_steps=10 \
  rl_training_config.metrics_logging_options.log_dir="/tmp/tensorboard/${model_name}" \
  rl_training_config.metrics_logging_options.flush_every_n_steps=20 \
  rl_training_config.checkpoint_root_directory="$checkpoint_dir" \
  rl_training_config.checkpointing_options.save_interval_steps=500 \
  rl_training_config.checkpointing_options.max_to_keep=4 \
  rl_training_config.profiler_options={} \
  rl_training_config.mini_batch_size=$batch_size \
  rl_training_config.train_micro_batch_size=$train_micro_batch_size \
  rollout_config.total_generation_steps=$total_generation_steps \
  rollout_config.max_prompt_length=$max_prompt_length \
  rollout_config.temperature=0.9 \
  rollout_config.top_p=1.0 \
  rollout_config.top_k=50 \
  rollout_engine="vanilla" \
  offload_to_cpu=false \
  grpo_config.num_generations=4 \
  grpo_config.num_iterations=1 \
  grpo_config.beta=0.08 \
  grpo_config.epsilon=0.2 \
  reward_functions="['tunix.cli.reward_fn.gsm8k']" \
  "$@"
