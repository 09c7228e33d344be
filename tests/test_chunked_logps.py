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

"""Chunked log-probs (compat.chunked_logps) against Tunix's own function.

Tolerance: every log-prob is the same dot products, cast, temperature and
log-sum-exp as upstream, element by element; only XLA's blocking of the
head matmul and of the vocabulary reduction may differ with the chunk's
shape, which moves float32 results by a few ulps. So forward values are
compared at rtol 1e-5 / atol 1e-5 (float32 log-probs of a 1,000-token
vocabulary are ~-7, an ulp there is ~5e-7), and gradients (summed over
positions in another order) at rtol/atol 1e-4.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from tunix.rl import algo_core
from tunix.rl import common

from tunix_mcjax.compat import chunked_logps
from tunix_mcjax.recipes import models

VOCAB = 1000


def _model(tied: bool = True):
  cfg = models.tiny_qwen3_config(vocab_size=VOCAB, use_tied_embedding=tied)
  return models.create_tiny_model(cfg, seed=3)


def _batch(b: int = 4, p: int = 5, c: int = 11):
  rng = np.random.default_rng(0)
  prompt = rng.integers(3, VOCAB, (b, p)).astype(np.int32)
  prompt[0, :2] = 0  # Left padding, as the sampler pads prompts.
  completion = rng.integers(3, VOCAB, (b, c)).astype(np.int32)
  completion[1, 7:] = 0  # Right padding after a short completion.
  return jnp.asarray(prompt), jnp.asarray(completion)


def _call(fn, model, prompt, completion, **kw):
  graphdef, state = nnx.split(model)
  return fn(graphdef, state, prompt, completion, pad_id=0, eos_id=1, **kw)


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("chunk", [1, 4, 11, 64])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_forward_equals_tunix(tied, chunk, temperature):
  model = _model(tied)
  prompt, completion = _batch()
  chunked = chunked_logps.make_compute_per_token_logps(chunk)
  want, logits = _call(chunked_logps.tunix_compute_per_token_logps, model,
                       prompt, completion, return_logits=True,
                       temperature=temperature)
  got, entropy = _call(chunked, model, prompt, completion,
                       return_logits=True, temperature=temperature)
  assert got.shape == want.shape == completion.shape
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(
      entropy, algo_core.compute_entropy_from_logits(logits),
      rtol=1e-5, atol=1e-5)


def test_gradients_equal_tunix():
  model = _model()
  prompt, completion = _batch()
  weights = jnp.linspace(-1.0, 1.0, completion.size).reshape(
      completion.shape)

  def loss(fn):
    def f(state):
      graphdef = nnx.graphdef(model)
      logps, ent = fn(graphdef, state, prompt, completion, pad_id=0,
                      eos_id=1, stop_gradient=False, return_logits=True)
      # Entropy through the patched name, as Tunix's GRPO loss reads it.
      ent = chunked_logps.compute_entropy_from_logits(ent)
      return jnp.sum(logps * weights) + 0.1 * jnp.sum(ent)
    return jax.value_and_grad(f)(nnx.state(model))

  want_v, want_g = loss(chunked_logps.tunix_compute_per_token_logps)
  got_v, got_g = loss(chunked_logps.make_compute_per_token_logps(3))
  np.testing.assert_allclose(got_v, want_v, rtol=1e-5)
  flat_want = jax.tree.leaves(want_g)
  flat_got = jax.tree.leaves(got_g)
  assert len(flat_want) == len(flat_got)
  for w, g in zip(flat_want, flat_got):
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_install_and_undo_restore_tunix():
  handle = chunked_logps.install_chunked_logps(8)
  try:
    assert common.compute_per_token_logps.chunk_size == 8
    inner = chunked_logps.install_chunked_logps(2)
    assert common.compute_per_token_logps.chunk_size == 2
    inner.undo()
    assert common.compute_per_token_logps.chunk_size == 8
    x = jnp.ones((2, 3, 5))
    np.testing.assert_allclose(
        algo_core.compute_entropy_from_logits(x), np.log(5.0), rtol=1e-6)
    assert algo_core.compute_entropy_from_logits(x[..., 0]) is not None
  finally:
    handle.undo()
  handle.undo()  # Idempotent.
  assert (common.compute_per_token_logps
          is chunked_logps.tunix_compute_per_token_logps)
  assert (algo_core.compute_entropy_from_logits
          is chunked_logps.tunix_compute_entropy_from_logits)


def test_chunk_must_be_positive():
  with pytest.raises(ValueError, match="chunk size"):
    chunked_logps.make_compute_per_token_logps(0)


def test_peak_memory_is_smaller():
  """XLA's temporary bytes of the chunked loss's gradient vs upstream's."""
  model = _model()
  prompt, completion = _batch(b=4, p=8, c=64)

  def temp_bytes(fn):
    def f(state):
      logps, ent = fn(nnx.graphdef(model), state, prompt, completion,
                      pad_id=0, eos_id=1, stop_gradient=False,
                      return_logits=True)
      return jnp.sum(logps) + jnp.sum(
          chunked_logps.compute_entropy_from_logits(ent))
    compiled = jax.jit(jax.grad(f)).lower(nnx.state(model)).compile()
    return compiled.memory_analysis().temp_size_in_bytes

  full = temp_bytes(chunked_logps.tunix_compute_per_token_logps)
  chunked = temp_bytes(chunked_logps.make_compute_per_token_logps(8))
  logits_bytes = 4 * 64 * VOCAB * 4
  assert full - chunked > logits_bytes, (full, chunked)


@pytest.mark.parametrize("changes", [
    dict(logps_chunk_size=0),
    dict(logps_chunk_size=16, backend="mcjax_da"),
    dict(logps_chunk_size=16, trainer="maxtext"),
])
def test_the_flag_is_refused_where_it_would_not_apply(changes):
  # pylint: disable-next=g-import-not-at-top
  from tunix_mcjax.recipes import job_config

  with pytest.raises(ValueError, match="logps_chunk_size"):
    job_config.GrpoJobConfig(**changes)
