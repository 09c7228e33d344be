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

"""Tunix's sequence-packing path, made exact for the lifetime of a cluster.

Two upstream names are replaced while an mcjax cluster with packing lives
(`install_packing`, undone by its handle):

- `tunix.rl.common.process_ids`: for packed rows (segment ids given) Tunix
  0.1.7 returns no attention mask and relies on the model reading
  `segment_ids`, which its Qwen3 does only in the TPU splash-attention
  branch; elsewhere a packed token attends to every token of the row. The
  replacement returns the causal, same-segment mask built from the segment
  ids (`segment_attention_mask`); for unpacked rows it is Tunix's own.
  Upstream: build this mask in `process_ids` (the flash branch ignores it).
- `tunix.rl.utils.pack_sequences`: the learner packs its micro-batches
  through it (`RLLearner._run_all_micro_batch_steps`) and makes each packed
  row its own `update_actor` call (one optimizer update each). mcjax puts
  its own packer there (`tunix_mcjax.packing`): one packed batch per
  micro-batch, so the updates are the unpacked run's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from tunix.rl import common as _common
from tunix.rl import utils as _rl_utils

from tunix_mcjax.compat import patch_stack

_process_ids = _common.process_ids
_pack_sequences = _rl_utils.pack_sequences
# Jitted Tunix functions that call `process_ids` by its module name: their
# traces of packed rows must not outlive a swap of it.
_CALLERS = ("compute_per_token_logps", "compute_score")


def segment_attention_mask(
    segment_ids: jax.Array, is_key: jax.Array | None = None
) -> jax.Array:
  """[B, L, L] mask: query i sees key j iff j <= i, both share a segment,
  and j is a key (`is_key`, default all).

  Tunix's unpacked mask is causal over the tokens that are not the pad id
  (`make_causal_attn_mask`); with `is_key = ids != pad_id` the packed mask
  is that mask within each sequence. A query with no key (padding) gets
  Qwen3's finite mask value everywhere: a uniform softmax, no NaN.
  """
  length = segment_ids.shape[1]
  causal = jnp.tril(jnp.ones((length, length), dtype=jnp.bool_))
  mask = (segment_ids[:, :, None] == segment_ids[:, None, :]) & causal[None]
  if is_key is not None:
    mask = mask & is_key[:, None, :]
  return mask


def process_ids(
    prompt_tokens: jax.Array,
    completion_tokens: jax.Array,
    pad_id: int,
    eos_id: int,
    segment_ids: jax.Array | None = None,
    segment_positions: jax.Array | None = None,
):
  """Tunix's `process_ids`, with the causal same-segment mask when packed."""
  ids, positions, mask, seg = _process_ids(
      prompt_tokens, completion_tokens, pad_id, eos_id, segment_ids,
      segment_positions,
  )
  if segment_ids is not None and mask is None:
    mask = segment_attention_mask(segment_ids, ids != pad_id)
  return ids, positions, mask, seg


def _clear_caller_traces() -> None:
  for name in _CALLERS:
    fn = getattr(_common, name, None)
    clear = getattr(fn, "clear_cache", None)
    if clear is not None:
      clear()


def _apply(pack_fn: Callable[..., Any], first: bool) -> None:
  if first:
    _common.process_ids = process_ids
    # A trace of packed rows made before (with Tunix's mask-less path)
    # would otherwise be reused.
    _clear_caller_traces()
  _rl_utils.pack_sequences = pack_fn


def _restore() -> None:
  _rl_utils.pack_sequences = _pack_sequences
  _common.process_ids = _process_ids
  _clear_caller_traces()


_installs = patch_stack.PatchStack(apply=_apply, restore=_restore)
# Undoes one `install_packing` call (idempotent); `.value` is its pack_fn.
PackingHandle = patch_stack.PatchHandle


def install_packing(pack_fn: Callable[..., Any]) -> PackingHandle:
  """Installs the exact packed path until the returned handle is undone.

  Args:
    pack_fn: replaces `tunix.rl.utils.pack_sequences` (same signature:
      `(item_iterator, max_token_budget, pad_id=0)`, yielding the lists of
      examples the learner hands to `update_actor`). Calls nest: the latest
      live one is in place.

  Returns:
    The handle that undoes this call.
  """
  return _installs.push(pack_fn)


# Tunix's own functions, whatever `install_packing` did to the modules since.
tunix_process_ids = _process_ids
tunix_pack_sequences = _pack_sequences


def learner_algo_config(trainer: Any) -> Any | None:
  """The algorithm config (loss_agg_mode, ...) of the learner that trains
  with `trainer`, or None when it cannot be read.

  Tunix's GRPO-family learners hand it to their loss through the trainer's
  model-input function (`{"train_example": x, "algo_config": ...}`); the
  cluster has no other reference to its learner.
  """
  fn = getattr(trainer, "gen_model_input_fn", None)
  if fn is None:
    return None
  try:
    inputs = fn(None)
  except Exception:  # pylint: disable=broad-exception-caught
    return None
  return inputs.get("algo_config") if isinstance(inputs, dict) else None
