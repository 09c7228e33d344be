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

"""tunix_mcjax.packing and compat.packing on one process.

The pack/pad function's layout, the agreement's rounding and timeout, the
exact packed mask, and the GRPO loss of a packed micro-batch against the
unpacked one (token-mean, on the tiny Qwen3 with Tunix's own loss function).
The multi-host runs are in tests/test_packing_equivalence.py.
"""

import types

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tunix.rl import algo_core
from tunix.rl import common
from tunix.rl import utils as rl_utils
from tunix.rl.grpo import dapo_learner
from tunix.rl.grpo import grpo_learner

from tunix_mcjax import packing
from tunix_mcjax import rules
from tunix_mcjax import telemetry
from tunix_mcjax.compat import packing as compat_packing
from tunix_mcjax.recipes import job_config
from tunix_mcjax.recipes import models

PAD = 0
EOS = 1


def test_first_fit_fills_earlier_rows_first_and_is_deterministic():
  # 6 fits nowhere after 7+6 (13 of 16), so it opens row 2; 3 goes back to
  # row 0 (room 3); 5 to row 1 (10 + 5 = 15).
  lengths = [7, 10, 6, 3, 5, 16]
  bins = packing.first_fit(lengths, 16)
  assert bins == [[0, 2, 3], [1, 4], [5]]
  assert packing.first_fit(lengths, 16) == bins
  assert packing.first_fit([], 16) == []


def test_first_fit_refuses_a_row_longer_than_the_budget():
  with pytest.raises(ValueError, match="17 tokens .* max_seq_token_per_tpu=16"):
    packing.first_fit([3, 17], 16)


@pytest.mark.parametrize("local, multiple, expected", [
    ([3, 5], 1, 5), ([3, 5], 2, 6), ([0, 0], 2, 2), ([4, 4, 1], 4, 4),
])
def test_agreed_rows_is_the_max_rounded_up(local, multiple, expected):
  assert packing.agreed_rows(local, multiple) == expected


def _example(prompts, completions, completion_masks=None, adv=None):
  """A learner micro-batch: left-padded prompts, right-padded completions."""
  plen = max(len(p) for p in prompts)
  clen = max(len(c) for c in completions)
  p = np.full((len(prompts), plen), PAD, np.int32)
  c = np.full((len(prompts), clen), PAD, np.int32)
  for i, (pi, ci) in enumerate(zip(prompts, completions)):
    p[i, plen - len(pi):] = pi
    c[i, :len(ci)] = ci
  cm = (c != PAD).astype(np.int32) if completion_masks is None else np.asarray(
      completion_masks, np.int32)
  return common.TrainExample(
      prompt_ids=jnp.asarray(p),
      prompt_mask=jnp.asarray(p != PAD, jnp.int32),
      completion_ids=jnp.asarray(c),
      completion_mask=jnp.asarray(cm),
      advantages=jnp.asarray(
          np.arange(1, len(prompts) + 1, dtype=np.float32) if adv is None
          else adv),
      ref_per_token_logps=None,
      old_per_token_logps=None,
  )


def test_pack_micro_batch_layout_and_empty_rows():
  ex = _example(
      prompts=[[5, 6], [7, 8, 9], [4], [3, 3]],
      # Row 0 samples the pad id inside its completion (masked, kept);
      # row 3 has no completion token (left out).
      completions=[[10, PAD, 11], [12, 13], [14, 15, 16, 17], []],
  )
  agreed = []

  def agree(k):
    agreed.append(k)
    return 4

  packed, stats = packing.pack_micro_batch([ex], 8, agree=agree, pad_id=PAD)
  # Lengths 5, 5, 5 (row 3 dropped): one per packed row.
  assert agreed == [3]
  # Unpacked: 4 rows x (3 prompt + 4 completion columns).
  assert stats == packing.PackStats(local_rows=3, rows=4, real_tokens=15,
                                    slots=32, unpacked_slots=28)
  ids = np.asarray(packed.completion_ids)
  assert ids.shape == (4, 8) and packed.prompt_ids.shape == (4, 0)
  np.testing.assert_array_equal(ids[0], [5, 6, 10, PAD, 11, PAD, PAD, PAD])
  np.testing.assert_array_equal(packed.segment_ids[0], [1] * 5 + [0] * 3)
  # The pad-id token takes the position before it, as unpacked.
  np.testing.assert_array_equal(packed.segment_positions[0][:5],
                                [0, 1, 2, 2, 3])
  np.testing.assert_array_equal(packed.completion_mask[0],
                                [0, 0, 1, 0, 1, 0, 0, 0])
  np.testing.assert_array_equal(packed.advantages[1][:5], [0, 0, 0, 2, 2])
  # The agreed extra row is empty: no segment, no loss weight.
  assert not np.asarray(packed.segment_ids[3]).any()
  assert not np.asarray(packed.completion_mask[3]).any()
  assert np.asarray(packed.completion_mask).sum() == 2 + 2 + 4


def test_packer_checks_once_and_yields_one_batch_per_micro_batch():
  ex = _example(prompts=[[5, 6]] * 4, completions=[[10, 11]] * 4)
  checks, seen = [], []
  packer = packing.Packer(agree=lambda k: k, check=lambda: checks.append(1),
                          on_packed=seen.append, pad_id=PAD)
  out = list(packer(iter([[ex], [ex], [ex]]), 8))
  assert len(out) == 3 and all(len(o) == 1 for o in out)
  assert checks == [1]
  assert [s.local_rows for s in seen] == [2, 2, 2]


def test_agreement_on_one_process_rounds_to_the_devices():
  agreement = packing.Agreement(telemetry.HostGather(None), multiple=2)
  assert agreement(3) == 4
  assert agreement.calls == 1


def _trainer_of(algo_config):
  """A trainer whose model-input function carries `algo_config`, as Tunix's
  GRPO-family learners set it."""
  return types.SimpleNamespace(
      gen_model_input_fn=lambda x: {"train_example": x,
                                    "algo_config": algo_config})


def test_check_learner_refuses_what_packing_would_change():
  packing.check_learner(
      _trainer_of(dapo_learner.DAPOConfig(num_generations=2)), 64)
  with pytest.raises(NotImplementedError, match="loss_agg_mode=.token-mean."):
    packing.check_learner(_trainer_of(grpo_learner.GRPOConfig()), 64)
  with pytest.raises(NotImplementedError, match="GRPO-family learner"):
    packing.check_learner(types.SimpleNamespace(), 64)


class _NeverReady:
  """A dispatched gather no other host joins."""

  def dispatch(self, row):
    del row
    return self

  @staticmethod
  def is_ready():
    return False


def test_agreement_times_out_with_a_clear_error():
  agreement = packing.Agreement(_NeverReady(), multiple=1, timeout_s=0.05)
  with pytest.raises(TimeoutError, match="no agreement on the number of"
                     " packed rows .* micro-batch 1"):
    agreement(2)


def test_install_packing_swaps_and_restores_tunix_functions():
  before = (common.process_ids, rl_utils.pack_sequences)
  outer = compat_packing.install_packing(lambda *a, **k: iter(()))
  inner = compat_packing.install_packing(packing.Packer(agree=lambda k: k))
  try:
    assert common.process_ids is compat_packing.process_ids
    assert rl_utils.pack_sequences is inner.value
    inner.undo()
    inner.undo()  # Idempotent.
    assert rl_utils.pack_sequences is outer.value
  finally:
    outer.undo()
  assert (common.process_ids, rl_utils.pack_sequences) == before
  assert before == (compat_packing.tunix_process_ids,
                    compat_packing.tunix_pack_sequences)


@pytest.fixture(name="losses", scope="module")
def losses_fixture():
  """Tunix's GRPO loss (token-mean) of one micro-batch, unpacked and packed.

  The micro-batch has prompts and completions of different lengths, a pad-id
  token sampled inside a completion, and a row without completion tokens.
  """
  cfg = models.tiny_qwen3_config(num_layers=1, embed_dim=32, hidden_dim=64)
  model = models.create_tiny_model(cfg, seed=0)
  rng = np.random.default_rng(1)
  prompts = [list(rng.integers(3, cfg.vocab_size, n)) for n in (2, 4, 3, 1)]
  completions = [list(rng.integers(3, cfg.vocab_size, n)) for n in (5, 2, 6, 0)]
  completions[0][2] = PAD
  ex = _example(prompts, completions, adv=np.array([0.5, -1.0, 1.5, 2.0]))
  algo = dapo_learner.DAPOConfig(num_generations=2)
  algo.temperature = 1.0  # Set by the learner from its rollout config.

  def loss_and_grads(example):
    # With no old log-probs the ratio is 1 and the loss value is the
    # token-mean of -advantage: only the gradients see the attention.
    loss_aux, grads = nnx.value_and_grad(
        lambda m: algo_core.grpo_loss_fn(m, example, algo, PAD, EOS),
        has_aux=True,
    )(model)
    return (loss_aux,
            np.concatenate([np.ravel(g) for g in jax.tree.leaves(grads)]))

  out = {"unpacked": loss_and_grads(ex)}
  with_mask = compat_packing.install_packing(compat_packing.tunix_pack_sequences)
  try:
    packed, stats = packing.pack_micro_batch([ex], 12, agree=lambda k: k + 1,
                                             pad_id=PAD)
    out["packed"] = loss_and_grads(packed)
  finally:
    with_mask.undo()
  out["stats"] = stats
  return out


def test_packed_token_mean_loss_equals_unpacked(losses):
  ((lu, au), gu), ((lp, ap), gp) = losses["unpacked"], losses["packed"]
  assert losses["stats"].rows > losses["stats"].local_rows  # An empty row.
  # fp32: the same sums in another order (measured ~1e-7 relative).
  np.testing.assert_allclose(float(lp), float(lu), rtol=1e-5, atol=1e-7)
  for key in ("entropy", "advantage/nonzero_frac", "advantage/abs_mean"):
    np.testing.assert_allclose(float(ap[key]), float(au[key]), rtol=1e-5,
                               err_msg=key)
  # Without the causal same-segment mask the gradients differ by more than
  # their size (measured 1.2x); float order alone: ~2e-9 of it.
  scale = np.abs(gu).max()
  assert scale > 0
  assert np.abs(gp - gu).max() < 1e-5 * scale, np.abs(gp - gu).max() / scale


def test_support_allows_token_mean_only():
  assert rules.sequence_packing(64, loss_agg_mode="token-mean") is None
  assert rules.sequence_packing(64) is None  # Mode checked later.
  for mode in ("sequence-mean-token-mean", "sequence-mean-token-scale",
               "seq-mean-token-sum", "sequence-mean-token-sum-norm"):
    problem = rules.sequence_packing(64, loss_agg_mode=mode)
    assert problem.error is NotImplementedError
    assert "per-row (sequence-*) reduction" in problem.message
  problem = rules.sequence_packing(64, loss_agg_mode="token-mean",
                                     num_iterations=2)
  assert "num_iterations=2" in problem.message
  assert "positive number" in rules.sequence_packing(0).message
  # GRPO's own default would be refused.
  assert grpo_learner.GRPOConfig().loss_agg_mode != rules.PACKING_LOSS_MODE


@pytest.mark.parametrize("overrides, message", [
    (dict(learner="grpo"), "loss_agg_mode='sequence-mean-token-mean'"),
    (dict(backend="tunix"), "Tunix 0.1.7's own packing is wrong off TPU"),
    (dict(max_seq_token_per_tpu=9), "set it to at least 10"),
    (dict(num_iterations=2), "num_iterations=2"),
])
def test_job_config_refuses_inexact_packing(overrides, message):
  kw = dict(learner="dapo", beta=0.0, max_seq_token_per_tpu=16,
            max_new_tokens=6)
  kw.update(overrides)
  with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(
      ")", r"\)").replace("*", r"\*")):
    job_config.GrpoJobConfig(**kw)
  del kw["max_seq_token_per_tpu"]
  if overrides.get("max_seq_token_per_tpu") is None:
    job_config.GrpoJobConfig(**kw)  # The same job unpacked is fine.
