#!/bin/bash
# Copyright 2026 Google LLC
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
#
# Agentic GSM8K GRPO launcher for Qwen3 8B using
# tunix/cli/base_agentic_config.yaml plus explicit CLI overrides.
#
# Tunix 0.1.7's examples/rl/grpo/gsm8k/run_qwen3_8b_disagg_maxtext.sh
# (run_qwen3_8b_disagg.sh beside this file with a MaxText actor:
# model_source="maxtext", MaxText settings in model_config.kwargs), adapted
# to run offline and under mcjax's disaggregated backend. Every model,
# training, rollout, vLLM, chat-parser and algorithm line is the stock
# recipe's. mcjax builds the MaxText actor as later Tunix releases do
# (MaxText's model model_name with model_config.kwargs as its settings;
# Tunix 0.1.7's CLI drops them), trains it with FSDP on MaxText's mesh, and
# its rollout hosts run vLLM on Tunix's Qwen3 of the actor's widths, into
# which the trainers map their parameters (docs/cli.md). Differences:
#   * the entry point: `python -m tunix.cli.grpo_main` becomes
#     `python -m tunix_mcjax.cli.grpo_main --backend=${BACKEND}` (the one-line
#     switch; BACKEND defaults to mcjax_da: the actor's mesh maps onto
#     trainer hosts, the rollout's onto rollout hosts, each with its own
#     engine; rollout_engine="vllm" there is the host-local vLLM of the
#     platform, tpu-inference on TPU, as it is in Tunix). In agentic mode
#     mcjax_da trains on-policy: --max_staleness defaults to 0;
#   * offline inputs: model_id and tokenizer from a local directory
#     ($model_dir, as the stock /tmp/maxtext_qwen3_8b; a MaxText parameter
#     checkpoint goes in model_config.model_path), GSM8K from local jsonl files
#     ($data_dir) through Tunix's `data_source=huggingface`, the reward
#     function by module name, and the base config a variable
#     ($base_config, by default the stock relative path, so the script runs
#     from a Tunix checkout of the pinned release as the stock one does);
#   * the stock script's TPU count check (tpu_utils.sh, not shipped here) is
#     left to mcjax, which checks the meshes against the hosts' devices
#     before any host starts;
#   * sizes are variables (the stock values are the defaults), so the same
#     script runs on TPU and, with small sizes, on CPU.
#
# Usage (checkpoint_dir=null: no checkpoints; an empty checkpoint_dir, as
# the stock usage line has it, means the default gs:// directory; a rerun
# with the same directory and checkpoint_suffix resumes from it):
#   checkpoint_dir=null model_dir=/tmp/maxtext_qwen3_8b \
#     bash examples/rl/grpo/gsm8k/run_qwen3_8b_disagg_maxtext.sh \
#     --devices_per_host=8
# Extra arguments are appended: key=value overrides (later ones win) and
# flags such as --devices_per_host, --metrics_out.

set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../.." && pwd)

BACKEND="${BACKEND:-mcjax_da}"
PYTHON="${PYTHON:-python3}"
base_config="${base_config:-tunix/cli/base_agentic_config.yaml}"

model_name="${model_name:-qwen3-8b}"
model_dir=$(realpath -m "${model_dir:-/tmp/maxtext_qwen3_8b}")
tokenizer_path="${tokenizer_path:-$model_dir}"
data_dir=$(realpath -m "${data_dir:-${repo_root}/../shared/data/gsm8k}")

base_emb_dim="${base_emb_dim:-4096}"

batch_size="${batch_size:-8}"
num_batches="${num_batches:-934}"
num_train_epochs="${num_train_epochs:-1}"
train_fraction="${train_fraction:-1.0}"
warmup_ratio="${warmup_ratio:-0.1}"

mini_batch_size="${mini_batch_size:-8}"
train_micro_batch_size="${train_micro_batch_size:-1}"
rollout_micro_batch_size="${rollout_micro_batch_size:-8}"
compute_logps_micro_batch_size="${compute_logps_micro_batch_size:-1}"

num_generations="${num_generations:-4}"
train_mesh="${train_mesh:-(8,1)}"
rollout_mesh="${rollout_mesh:-(1,8)}"
max_prompt_length="${max_prompt_length:-256}"
max_response_length="${max_response_length:-768}"

checkpoint_dir="${checkpoint_dir:-gs://tunix/rl/checkpoints/gsm8k/qwen3/01}"
checkpoint_suffix="${checkpoint_suffix:-$(printf '%04d' "$((RANDOM % 10000))")}"
if [[ -n "$checkpoint_dir" && "$checkpoint_dir" != "null" ]]; then
  checkpoint_dir="${checkpoint_dir}_${checkpoint_suffix}"
fi

max_steps=$(awk "BEGIN {
  value = $num_batches * $num_train_epochs * $train_fraction;
  if (value < 1) value = 1;
  printf \"%.0f\", value;
}")
warmup_steps=$(awk "BEGIN {
  value = $warmup_ratio * $max_steps;
  if (value < 1) value = 1;
  printf \"%.0f\", value;
}")
vllm_max_num_seqs=$(awk "BEGIN {
  value = $rollout_micro_batch_size * $num_generations;
  if (value < 1) value = 1;
  printf \"%.0f\", value;
}")

export HF_HUB_OFFLINE=1  # Everything is local; never ask a hub.

"${PYTHON}" -m tunix_mcjax.cli.grpo_main --backend="${BACKEND}" \
  "$base_config" \
  \
  `# -- Model ------------------------------------------------------------` \
  model_config.model_name="$model_name" \
  model_config.model_id="$model_dir" \
  model_config.model_source="maxtext" \
  model_config.rng_seed=42 \
  model_config.model_display=false \
  model_config.remat_config=3 \
  model_config.model_download_path="/tmp/models/${model_name}" \
  `# -- Maxtext specific configs mapping ---------------------------------` \
  model_config.kwargs.base_emb_dim="$base_emb_dim" \
  model_config.kwargs.sparse_matmul=true \
  model_config.kwargs.remat_policy="minimal" \
  `# -- Mesh configurations ----------------------------------------------` \
  actor_model_config.mesh.shape="$train_mesh" \
  actor_model_config.mesh.axis_names="('fsdp','tp')" \
  reference_model_config.mesh=null \
  reference_model_config.same_mesh_as="actor" \
  rollout_model_config.mesh.shape="$rollout_mesh" \
  rollout_model_config.mesh.axis_names="('fsdp','tp')" \
  \
  `# -- Data -------------------------------------------------------------` \
  data_source="huggingface" \
  dataset_name="$data_dir" \
  prompt_key="question" \
  \
  `# -- Training loop ----------------------------------------------------` \
  training_mode="agentic_grpo" \
  batch_size="$batch_size" \
  num_batches="$num_batches" \
  num_test_batches=100 \
  num_train_epochs="$num_train_epochs" \
  train_fraction="$train_fraction" \
  reward_functions="['tunix.cli.reward_fn.gsm8k']" \
  verl_compatible=false \
  \
  `# -- Rollout engine (vanilla | vllm | sglang_jax) ---------------------` \
  rollout_engine="vllm" \
  offload_to_cpu=false \
  \
  `# -- Rollout config ---------------------------------------------------` \
  rollout_config.max_prompt_length="$max_prompt_length" \
  rollout_config.total_generation_steps="$max_response_length" \
  rollout_config.max_tokens_to_generate="$max_response_length" \
  rollout_config.temperature=0.9 \
  rollout_config.top_p=1.0 \
  rollout_config.top_k=50 \
  rollout_config.return_logprobs=true \
  \
  `# -- vLLM (used when rollout_engine=vllm) -----------------------------` \
  vllm_config.hbm_utilization=0.4 \
  vllm_config.tpu_backend_type="jax" \
  vllm_config.server_mode=true \
  vllm_config.async_scheduling=true \
  vllm_config.max_num_seqs="$vllm_max_num_seqs" \
  vllm_config.kwargs.kv_cache_metrics=true \
  vllm_config.kwargs.disable_log_stats=false \
  vllm_config.kwargs.enable_prefix_caching=true \
  \
  `# -- Tokenizer / chat parsing ----------------------------------------` \
  chat_parser_config.type="qwen" \
  tokenizer_config.tokenizer_type="huggingface" \
  tokenizer_config.tokenizer_path="$tokenizer_path" \
  tokenizer_config.add_bos=false \
  tokenizer_config.add_eos=false \
  \
  `# -- GRPO algorithm ---------------------------------------------------` \
  agentic_grpo_config.num_generations="$num_generations" \
  agentic_grpo_config.num_iterations=1 \
  agentic_grpo_config.beta=0.08 \
  agentic_grpo_config.epsilon=0.2 \
  agentic_grpo_config.system_prompt="You are given a grade school math problem. Think step by step and respond using <reasoning>...</reasoning> followed by <answer>...</answer> with only the final numeric answer inside <answer>." \
  agentic_grpo_config.max_concurrency=128 \
  agentic_grpo_config.max_response_length="$max_response_length" \
  agentic_grpo_config.max_turns=1 \
  \
  `# -- Optimizer --------------------------------------------------------` \
  rl_training_config.actor_optimizer_config.opt_type="adamw" \
  rl_training_config.actor_optimizer_config.learning_rate=3e-6 \
  rl_training_config.actor_optimizer_config.schedule_type="warmup_cosine_decay_schedule" \
  rl_training_config.actor_optimizer_config.init_value=0.0 \
  rl_training_config.actor_optimizer_config.peak_value=3e-6 \
  rl_training_config.actor_optimizer_config.end_value=0.0 \
  rl_training_config.actor_optimizer_config.warmup_ratio="$warmup_ratio" \
  rl_training_config.actor_optimizer_config.warmup_steps="$warmup_steps" \
  rl_training_config.actor_optimizer_config.decay_steps="$max_steps" \
  rl_training_config.actor_optimizer_config.b1=0.9 \
  rl_training_config.actor_optimizer_config.b2=0.99 \
  rl_training_config.actor_optimizer_config.weight_decay=0.1 \
  rl_training_config.actor_optimizer_config.max_grad_norm=0.1 \
  \
  `# -- RL training ------------------------------------------------------` \
  rl_training_config.eval_every_n_steps=10 \
  rl_training_config.max_steps="$max_steps" \
  rl_training_config.mini_batch_size="$mini_batch_size" \
  rl_training_config.train_micro_batch_size="$train_micro_batch_size" \
  rl_training_config.rollout_micro_batch_size="$rollout_micro_batch_size" \
  rl_training_config.compute_logps_micro_batch_size="$compute_logps_micro_batch_size" \
  rl_training_config.checkpoint_root_directory="$checkpoint_dir" \
  rl_training_config.checkpointing_options.save_interval_steps=250 \
  rl_training_config.checkpointing_options.max_to_keep=4 \
  rl_training_config.metrics_logging_options.log_dir="/tmp/tensorboard/gsm8k_qwen3_8b_maxtext" \
  rl_training_config.metrics_logging_options.flush_every_n_steps=20 \
  \
  "$@"
