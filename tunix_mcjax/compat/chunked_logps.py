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

"""Per-token log-probs over sequence chunks: no full [B, T, V] logits.

Tunix 0.1.7's `tunix.rl.common.compute_per_token_logps` runs the model to
float32 logits of every kept position, [B, T, V] (151,936 wide for Qwen3:
8 rows x 512 tokens are 2.5 GB), and its GRPO/PPO losses take those logits
back (`return_logits=True`) for `algo_core.compute_entropy_from_logits`.
Newer Tunix versions have a knob for chunking; 0.1.7 has none, so
`install_chunked_logps(chunk)` replaces both names while its handle lives:

- `compute_per_token_logps`: for Tunix's Qwen3 it runs the model's trunk
  (embedder, layers, final norm: `Qwen3.__call__` without the head), then
  the head, log-softmax and entropy over `chunk` positions at a time in a
  `lax.map` whose body is rematerialised (`jax.checkpoint`), so neither the
  forward nor the backward pass holds more than [B, chunk, V] logits. With
  `return_logits=True` it returns the per-token entropy, [B, T], in the
  logits' place. Other models: Tunix's own function.
- `algo_core.compute_entropy_from_logits`: a [B, T] argument is that
  entropy already and is returned as is; anything else goes to Tunix's.

Each element is computed by the same operations as upstream (one dot over
the hidden width, the float32 cast, the temperature, log-sum-exp over the
vocabulary), so values agree to float rounding (tests/test_chunked_logps.py).
Upstream: a chunk size on `compute_per_token_logps` and an entropy output.
"""

from __future__ import annotations

import functools
from typing import Any

from flax import nnx
import jax
import jax.numpy as jnp
from tunix.models.qwen3 import model as _qwen3
from tunix.rl import algo_core as _algo_core
from tunix.rl import common as _common

from tunix_mcjax.compat import patch_stack

_compute_per_token_logps = _common.compute_per_token_logps
_compute_entropy_from_logits = _algo_core.compute_entropy_from_logits

_STATIC = ("pad_id", "eos_id", "stop_gradient", "return_logits",
           "temperature")


def _head(model: Any, x: jax.Array) -> jax.Array:
  """Qwen3's output head on hidden states `x`, float32 as Qwen3 returns."""
  if model.config.use_tied_embedding:
    logits = model.embedder.decode(x)
  else:
    logits = model.lm_head(x)
  return jnp.astype(logits, jnp.float32)


def _trunk(model: Any, tokens: jax.Array, positions: jax.Array,
           mask: jax.Array, segment_ids: jax.Array | None) -> jax.Array:
  """Qwen3.__call__ without cache and head: the final-norm hidden states."""
  x = model.embedder.encode(tokens)
  for layer in model.layers:
    _, x = layer(x, positions, None, mask, segment_ids=segment_ids)
  return model.final_norm(x)


def chunked_logps_and_entropy(
    model: Any, hidden: jax.Array, targets: jax.Array, *, chunk: int,
    temperature: float = 1.0, with_entropy: bool = True,
) -> tuple[jax.Array, jax.Array | None]:
  """Log-prob of `targets` and entropy per position, `chunk` positions at a
  time.

  Args:
    model: Tunix Qwen3 (its head is applied).
    hidden: [B, T, D] final-norm hidden states of the predicting positions.
    targets: [B, T] token ids they predict.
    chunk: positions per chunk (T is padded up to a multiple).
    temperature: logits are divided by it unless it is 0 or 1 (as Tunix).
    with_entropy: also return the per-position entropy.

  Returns:
    ([B, T] float32 log-probs, [B, T] entropy or None).
  """
  b, t, d = hidden.shape
  n = -(-t // chunk)
  pad = n * chunk - t
  if pad:
    hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
    targets = jnp.pad(targets, ((0, 0), (0, pad)))
  xs = jnp.moveaxis(hidden.reshape(b, n, chunk, d), 1, 0)
  ts = jnp.moveaxis(targets.reshape(b, n, chunk), 1, 0)

  # Rematerialised: the backward pass recomputes a chunk's logits instead
  # of the scan saving all of them (which would be the full tensor again).
  @jax.checkpoint
  def one(args):
    x, tok = args
    logits = _head(model, x)
    if temperature != 0.0 and temperature != 1.0:
      logits = logits / temperature
    logp = _common.selective_log_softmax(logits, tok)
    if not with_entropy:
      return logp, jnp.zeros_like(logp)
    return logp, _compute_entropy_from_logits(logits)

  logp, ent = jax.lax.map(one, (xs, ts))
  logp = jnp.moveaxis(logp, 0, 1).reshape(b, n * chunk)[:, :t]
  ent = jnp.moveaxis(ent, 0, 1).reshape(b, n * chunk)[:, :t]
  return logp, (ent if with_entropy else None)


def make_compute_per_token_logps(chunk: int):
  """`compute_per_token_logps` with Tunix's signature, chunked for Qwen3."""
  if chunk < 1:
    raise ValueError(f"logps chunk size must be >= 1, got {chunk}.")

  @functools.partial(jax.jit, static_argnames=_STATIC)
  def compute(graphdef, state, prompt_tokens, completion_tokens, pad_id,
              eos_id, images=None, stop_gradient=True, return_logits=False,
              segment_ids=None, segment_positions=None, temperature=1.0):
    model = nnx.merge(graphdef, state)
    if not isinstance(model, _qwen3.Qwen3) or images is not None:
      return _compute_per_token_logps(
          graphdef, state, prompt_tokens, completion_tokens, pad_id, eos_id,
          images=images, stop_gradient=stop_gradient,
          return_logits=return_logits, segment_ids=segment_ids,
          segment_positions=segment_positions, temperature=temperature)
    # By module name: compat.packing may have replaced it.
    tokens, positions, mask, seg = _common.process_ids(
        prompt_tokens, completion_tokens, pad_id, eos_id, segment_ids,
        segment_positions)
    # As upstream: caller's packing ids first, else the non-pad mask.
    seg = segment_ids if segment_ids is not None else seg
    hidden = _trunk(model, tokens, positions, mask, seg)
    keep = (tokens.shape[1] - 1 if segment_ids is not None
            else completion_tokens.shape[1])
    logps, ent = chunked_logps_and_entropy(
        model, hidden[:, -keep - 1:-1, :], tokens[:, -keep:], chunk=chunk,
        temperature=temperature, with_entropy=return_logits)
    if segment_ids is not None:
      logps = jnp.pad(logps, ((0, 0), (1, 0)))
      if ent is not None:
        ent = jnp.pad(ent, ((0, 0), (1, 0)))
    if stop_gradient:
      logps = jax.lax.stop_gradient(logps)
      ent = None if ent is None else jax.lax.stop_gradient(ent)
    return (logps, ent) if return_logits else logps

  compute.chunk_size = chunk
  return compute


def compute_entropy_from_logits(logits: jax.Array) -> jax.Array:
  """Tunix's entropy; a [B, T] argument is the chunked path's entropy."""
  if logits.ndim == 2:
    return logits
  return _compute_entropy_from_logits(logits)


def _apply(fn: Any, first: bool) -> None:
  del first  # Both names are replaced whichever install is in place.
  _common.compute_per_token_logps = fn
  _algo_core.compute_entropy_from_logits = compute_entropy_from_logits


def _restore() -> None:
  _common.compute_per_token_logps = _compute_per_token_logps
  _algo_core.compute_entropy_from_logits = _compute_entropy_from_logits


_installs = patch_stack.PatchStack(apply=_apply, restore=_restore)


def install_chunked_logps(chunk: int) -> patch_stack.PatchHandle:
  """Computes log-probs `chunk` positions at a time until undone.

  Calls nest: the latest live one is in place.
  """
  return _installs.push(make_compute_per_token_logps(chunk))


# Tunix's own functions, whatever `install_chunked_logps` did since.
tunix_compute_per_token_logps = _compute_per_token_logps
tunix_compute_entropy_from_logits = _compute_entropy_from_logits
