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

# Tunix 0.1.7's examples/rl/grpo/gsm8k/run_qwen3_vllm_disagg.sh (GRPO with
# the actor and the rollout on meshes of their own, rollout_engine="vllm"),
# adapted to run offline and under mcjax's disaggregated backend. Every
# training, rollout and vLLM line is the stock recipe's. Differences:
#   * the entry point: `python3 -m tunix.cli.grpo_main` becomes
#     `python -m tunix_mcjax.cli.grpo_main --backend=${BACKEND}` (the one-line
#     switch; BACKEND defaults to mcjax_da: the actor's mesh maps onto
#     trainer hosts, the rollout's onto rollout hosts, each with its own
#     engine; rollout_engine="vllm" there is the host-local vLLM of the
#     platform, tpu-inference on TPU, as it is in Tunix);
#   * offline inputs, as in run_qwen3.sh beside this file: model and
#     tokenizer from a local Hugging Face checkpoint directory ($model_dir),
#     GSM8K from local jsonl files ($data_dir) through Tunix's
#     `data_source=huggingface`, and the reward function by module name;
#   * meshes, flash attention, sizes and the Python interpreter are
#     variables (the stock values are the defaults), so the same script runs
#     on TPU and, with small sizes, on CPU.
# Like the stock recipe it passes `base_config.yaml`: set TUNIX_BASE_CONFIG
# as run_qwen3.sh explains when the installed Tunix does not ship it.
#
# Example (a TPU VM, or a Ray cluster of hosts with 4 chips each):
#   model_dir=/models/Qwen3-1.7B-Base \
#     examples/rl/grpo/gsm8k/run_qwen3_vllm_disagg.sh --devices_per_host=4
# Extra arguments are appended: key=value overrides (later ones win) and
# flags such as --devices_per_host, --max_staleness, --metrics_out.

set -x # Enable xtrace

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../.." && pwd)

# specify at cmd line to override defaults, e.g.
BACKEND=${BACKEND:-mcjax_da}
PYTHON=${PYTHON:-python3}
model_name=${model_name:-"qwen3-1.7b-base"}
model_dir=$(realpath -m "${model_dir:-/models/Qwen3-1.7B-Base}")
data_dir=$(realpath -m "${data_dir:-${repo_root}/../shared/data/gsm8k}")
use_flash_attention=${use_flash_attention:-true}
remat_config=${remat_config:-3}
batch_size=${batch_size:-8}
total_generation_steps=${total_generation_steps:-768}
max_prompt_length=${max_prompt_length:-256}
num_generations=${num_generations:-4}
num_train_epochs=${num_train_epochs:-1}
warmup_ratio=${warmup_ratio:-0.1}
train_fraction=${train_fraction:-0.8}
TPUS=$("${PYTHON}" -c "import jax; print(len(jax.devices()))" 2>/dev/null || echo 16)
if [ "$TPUS" -le 8 ]; then
  actor_mesh_shape=${actor_mesh_shape:-"(2,2)"}
  rollout_mesh_shape=${rollout_mesh_shape:-"(2,2)"}
else
  actor_mesh_shape=${actor_mesh_shape:-"(2,4)"}
  rollout_mesh_shape=${rollout_mesh_shape:-"(2,4)"}
fi
checkpoint_dir=${checkpoint_dir:-"/tmp/grpo_checkpoints/${model_name}_$RANDOM"}

echo "Using parameters:"
echo "  Backend: $BACKEND"
echo "  Model Directory: $model_dir"
echo "  Data Directory: $data_dir"
echo "  Batch Size: $batch_size"
echo "  Num Epochs: $num_train_epochs"
echo "  Warmup Ratio: $warmup_ratio"
echo "  Train Fraction: $train_fraction"
echo "  Actor Mesh Shape: $actor_mesh_shape"
echo "  Rollout Mesh Shape: $rollout_mesh_shape"
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
  model_config.rng_seed=42 \
  model_config.remat_config=${remat_config} \
  actor_model_config.mesh.shape="${actor_mesh_shape}" \
  actor_model_config.mesh.axis_names="('fsdp','tp')" \
  reference_model_config.mesh=null \
  reference_model_config.same_mesh_as="actor" \
  rollout_model_config.mesh.shape="${rollout_mesh_shape}" \
  rollout_model_config.mesh.axis_names="('fsdp','tp')" \
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
  rollout_config.total_generation_steps=$total_generation_steps \
  rollout_config.max_prompt_length=$max_prompt_length \
  rollout_config.temperature=0.9 \
  rollout_config.top_p=1.0 \
  rollout_config.top_k=50 \
  rollout_engine="vllm" \
  vllm_config.async_scheduling=false \
  offload_to_cpu=false \
  grpo_config.num_generations=$num_generations \
  grpo_config.num_iterations=1 \
  grpo_config.beta=0.08 \
  grpo_config.epsilon=0.2 \
  reward_functions="['tunix.cli.reward_fn.gsm8k']" \
  "$@"
