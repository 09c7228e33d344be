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

"""Why mcjax refuses sequence packing: Tunix 0.1.7's packed log-probs.

`support.sequence_packing` refuses `max_seq_token_per_tpu` because Tunix
0.1.7's packed path is wrong for its Qwen3 model off TPU: `process_ids`
(tunix/rl/common.py) hands packed rows to the model with no attention mask
(`attn_mask = None`, relying on `segment_ids`), and Qwen3's attention
(tunix/models/qwen3/model.py, `Attention.block`) reads `segment_ids` only in
its splash flash-attention branch, a TPU Pallas kernel; the einsum branch
used everywhere else applies no mask at all: neither causal nor per
sequence.

These tests pin that upstream behaviour on Tunix's own functions
(`utils.pack_sequences`, `common.compute_per_token_logps`): packed rows do
not give the unpacked log-probs, and a token of a later sequence in the
packed row changes an earlier sequence's log-probs. mcjax packs with its
own packer and replaces `process_ids` while a cluster with packing lives
(`tunix_mcjax.compat.packing`); the last two tests show that replacement
makes the same packed row exact. If an upstream test fails after a Tunix
upgrade, the packed path may have become exact upstream: the replacement
(and its TouchPoint rows) may then go (docs/cli.md, "Tunix 0.1.7 CLI
behaviours worth knowing"). Stock Tunix with packing stays wrong off TPU;
the reference for packing is the unpacked run.
"""

from __future__ import annotations

from flax import nnx
import jax.numpy as jnp
import numpy as np
import pytest
from tunix.rl import common
from tunix.rl import utils as rl_utils

from tunix_mcjax.compat import packing as compat_packing
from tunix_mcjax.recipes import models

PAD = 0
EOS = 1
PROMPT_LEN = 6
COMPLETION_LEN = 8
# Real (unpadded) lengths of the two rows: left-padded prompts,
# right-padded completions, as the learner hands them to the trainer.
PROMPT_LENS = (4, 6)
COMPLETION_LENS = (5, 8)
BUDGET = 32  # One packed row holds both sequences (23 tokens) + padding.


@pytest.fixture(name="logps", scope="module")
def logps_fixture():
  """Stock Tunix: unpacked and packed log-probs of the same two rows."""
  assert common.process_ids is compat_packing.tunix_process_ids
  return _logps()


@pytest.fixture(name="mcjax_logps", scope="module")
def mcjax_logps_fixture(logps):
  """The same, with mcjax's packed mask installed (as under a cluster)."""
  del logps  # Stock first: the swap must also drop Tunix's cached traces.
  handle = compat_packing.install_packing(compat_packing.tunix_pack_sequences)
  try:
    return _logps()
  finally:
    handle.undo()


def _logps():
  """Unpacked and packed log-probs of the same two rows (one tiny model)."""
  # One small layer is enough to show the missing mask (and compiles fast).
  cfg = models.tiny_qwen3_config(num_layers=1, embed_dim=32, hidden_dim=64)
  graphdef, state = nnx.split(models.create_tiny_model(cfg, seed=0))
  rng = np.random.default_rng(0)
  prompts = np.full((2, PROMPT_LEN), PAD, np.int32)
  completions = np.full((2, COMPLETION_LEN), PAD, np.int32)
  for i, (p, c) in enumerate(zip(PROMPT_LENS, COMPLETION_LENS)):
    prompts[i, PROMPT_LEN - p:] = rng.integers(3, cfg.vocab_size, p)
    completions[i, :c] = rng.integers(3, cfg.vocab_size, c)
  unpacked = np.asarray(common.compute_per_token_logps(
      graphdef, state, jnp.asarray(prompts), jnp.asarray(completions),
      PAD, EOS))
  example = common.TrainExample(
      prompt_ids=jnp.asarray(prompts),
      prompt_mask=jnp.asarray(prompts != PAD, jnp.int32),
      completion_ids=jnp.asarray(completions),
      completion_mask=jnp.asarray(completions != PAD, jnp.int32),
      advantages=jnp.ones((2,), jnp.float32),
      ref_per_token_logps=None,
      old_per_token_logps=None,
  )
  packed_rows = list(rl_utils.pack_sequences(iter([[example]]), BUDGET))
  assert [len(r) for r in packed_rows] == [1], "expected one packed row"
  row = packed_rows[0][0]
  assert row.completion_ids.shape == (1, BUDGET)

  def packed_logps(ids):
    return np.asarray(common.compute_per_token_logps(
        graphdef, state, row.prompt_ids, jnp.asarray(ids), PAD, EOS,
        segment_ids=row.segment_ids,
        segment_positions=row.segment_positions))[0]

  ids = np.asarray(row.completion_ids)
  segments = np.asarray(row.segment_ids)[0]
  # The same packed row with the last real token (of the second sequence)
  # changed: under a causal, per-sequence mask no log-prob of the first
  # sequence may move.
  changed = ids.copy()
  last = int(np.nonzero(segments)[0][-1])
  changed[0, last] = 3 if changed[0, last] != 3 else 4
  return dict(
      unpacked=np.concatenate(
          [unpacked[i, :c] for i, c in enumerate(COMPLETION_LENS)]),
      packed=packed_logps(ids),
      packed_changed=packed_logps(changed),
      completion_mask=np.asarray(row.completion_mask)[0].astype(bool),
      segments=segments,
  )


def test_packing_layout_is_what_tunix_documents(logps):
  """Guards the two tests below: the packed row holds both sequences."""
  segments = logps["segments"]
  assert np.count_nonzero(segments == 1) == PROMPT_LENS[0] + COMPLETION_LENS[0]
  assert np.count_nonzero(segments == 2) == PROMPT_LENS[1] + COMPLETION_LENS[1]
  assert logps["completion_mask"].sum() == sum(COMPLETION_LENS)


def test_tunix_packed_logps_differ_from_unpacked(logps):
  diff = np.abs(logps["packed"][logps["completion_mask"]] - logps["unpacked"])
  # Measured: ~0.09 nats on this model; float noise alone stays < 1e-5
  # (0.0 with a causal per-sequence mask in Tunix's process_ids).
  assert diff.max() > 1e-2, (
      "Tunix's packed log-probs now equal the unpacked ones: its packed path"
      " may have become exact; see this module's docstring.")


def test_tunix_packed_attention_is_not_causal_per_sequence(logps):
  first = logps["segments"] == 1
  moved = np.abs(logps["packed_changed"][first] - logps["packed"][first])
  # Measured: ~0.01; exactly 0.0 under a causal per-sequence mask.
  assert moved.max() > 1e-4, (
      "A later sequence's token no longer changes an earlier sequence's"
      " log-probs in a packed row: Tunix's packed attention may now be"
      " masked; see this module's docstring.")


def test_mcjax_packed_logps_equal_unpacked(mcjax_logps):
  d = mcjax_logps
  diff = np.abs(d["packed"][d["completion_mask"]] - d["unpacked"])
  # Measured ~2e-7 (float summation order over the longer packed row).
  assert diff.max() < 1e-5, diff.max()


def test_mcjax_packed_attention_is_causal_per_sequence(mcjax_logps):
  first = mcjax_logps["segments"] == 1
  moved = np.abs(mcjax_logps["packed_changed"][first]
                 - mcjax_logps["packed"][first])
  assert moved.max() == 0.0
