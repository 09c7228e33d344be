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

"""Support rules for Tunix's learner variants, engine names and O3 with
gradient accumulation; the example's config refuses what mcjax cannot
honour, naming the setting (no hosts start)."""

import numpy as np
import pytest

from tunix_mcjax import admission
from tunix_mcjax import rules
from tunix_mcjax.recipes import grpo_job


def test_tunix_engine_names_mean_what_they_mean_in_tunix():
  names = ["native", "vllm", "vllm_tpu"]
  assert rules.rollout_engine("vanilla", names) is None
  assert rules.rollout_engine("vllm_tpu", names) is None
  # Tunix's 'vllm' is the platform's host-local vLLM: tpu-inference on TPU
  # (what Tunix runs under that name), PyTorch vLLM on GPU and CPU.
  assert rules.rollout_engine("vllm", names) is None
  assert rules.mcjax_engine_name("vllm", platform="tpu") == "vllm_tpu"
  assert rules.mcjax_engine_name("vllm", platform="gpu") == "vllm"
  assert rules.mcjax_engine_name("vllm", platform="cpu") == "vllm"
  # Without a platform: this machine's (no accelerator here).
  assert rules.tunix_vllm_engine() == "vllm"
  # The example's engine names are mcjax's own: 'vllm' stays PyTorch vLLM.
  assert rules.registered_engine("vllm") == "vllm"
  assert rules.registered_engine("vanilla") == "native"
  config = {"rollout_engine": "vllm"}
  assert rules.selected_engine(None, config, "tpu") == "vllm_tpu"
  assert rules.selected_engine("native", config, "tpu") == "native"
  problem = rules.rollout_engine("sglang_jax", names)
  assert problem is not None and "sglang" in problem.message


def test_learners():
  for name in ("grpo", "dapo", "drgrpo"):
    assert rules.learner(name) is None
  ppo = rules.learner("ppo")
  assert ppo.error is NotImplementedError
  assert "critic" in ppo.message


@pytest.mark.parametrize("mode", rules.ROW_NORMALISED_LOSS_MODES)
def test_o3_keeps_row_normalised_losses(mode):
  assert rules.balanced_micro_batches(
      balance_by_length=True, loss_agg_mode=mode, micro_batch_size=2,
      mini_batch_size=4) is None


def test_o3_refuses_token_mean_over_several_micro_batches():
  problem = rules.balanced_micro_batches(
      balance_by_length=True, loss_agg_mode="token-mean",
      micro_batch_size=2, mini_batch_size=4)
  assert "loss_agg_mode='token-mean' with balance_admission" in (
      problem.message)
  # One micro-batch per update, or O3 off: exact for every mode.
  for balance, micro in ((True, 4), (False, 2)):
    assert rules.balanced_micro_batches(
        balance_by_length=balance, loss_agg_mode="token-mean",
        micro_batch_size=micro, mini_batch_size=4) is None


def test_chunked_dealing_gives_the_single_controller_micro_batches():
  """Global micro-batch k (hosts' k-th chunks, host order) is prompts
  [k*m, (k+1)*m) of the batch, m the global micro-batch, as one process
  would take them."""
  hosts, batch, micro = 3, 12, 3
  per_host = [
      admission.AdmissionConfig(
          num_hosts=hosts, host_index=h, num_generations=2,
          chunk_size=micro // hosts, update_size=6 // hosts,
      ).host_prompt_indices(batch)
      for h in range(hosts)
  ]
  c = micro // hosts
  for k in range(batch // micro):
    got = np.concatenate([p[k * c:(k + 1) * c] for p in per_host])
    np.testing.assert_array_equal(got, np.arange(k * micro, (k + 1) * micro))


@pytest.mark.parametrize("kwargs, message", [
    (dict(learner="dapo", beta=0.04), "--learner=dapo with --beta=0.04"),
    (dict(learner="ppo"), "--learner='ppo' (a critic model)"),
    (dict(micro_batch_size=2), "set --mini_batch_size"),
    (dict(batch_size=8, mini_batch_size=3), "mini_batch_size=3 must be"),
    (dict(batch_size=8, mini_batch_size=4, micro_batch_size=2,
          learner="dapo", balance_admission=True),
     "loss_agg_mode='token-mean' with balance_admission"),
    (dict(num_iterations=0), "num_iterations must be >= 1"),
])
def test_job_refuses_what_it_cannot_honour(kwargs, message):
  with pytest.raises(ValueError) as e:
    grpo_job.GrpoJobConfig(**kwargs)
  assert message in str(e.value)


def test_job_counts_optimizer_updates():
  cfg = grpo_job.GrpoJobConfig(batch_size=12, mini_batch_size=6,
                               micro_batch_size=3, num_iterations=2)
  assert cfg.updates_per_batch() == 2
  assert cfg.loss_agg_mode() == "sequence-mean-token-mean"
  assert grpo_job.GrpoJobConfig(learner="drgrpo").loss_agg_mode() == (
      "sequence-mean-token-scale")


def test_o3_with_several_updates_per_batch_is_refused_before_hosts_start():
  """Admission refuses it on every host; the job config refuses it first."""
  problem = rules.balanced_updates(balance_by_length=True,
                                     mini_batch_size=4, batch_size=8)
  assert "mini_batch_size=4 < batch_size=8" in problem.message
  for balance, mini in ((True, 8), (False, 4), (True, None)):
    assert rules.balanced_updates(balance_by_length=balance,
                                    mini_batch_size=mini, batch_size=8) is None
  # Row-normalised loss (GRPO's default), one micro-batch per update: only
  # the several updates per batch are left to refuse.
  with pytest.raises(ValueError, match="mini_batch_size=4 < batch_size=8"):
    grpo_job.GrpoJobConfig(batch_size=8, mini_batch_size=4,
                           balance_admission=True)
  # The same run on hosts: admission's refusal, which this check anticipates.
  with pytest.raises(ValueError, match="would change which prompts share"):
    admission.AdmissionConfig(
        num_hosts=2, host_index=0, num_generations=2, balance_by_length=True,
        update_size=2).host_prompt_indices(8, lengths=list(range(8)))
  grpo_job.GrpoJobConfig(batch_size=8, balance_admission=True)  # Accepted.
