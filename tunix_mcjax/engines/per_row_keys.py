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


"""Per-row PRNG keys, and Tunix's sampler drawing each row's noise from its own.

Tunix's stock sampler draws one key per decoding step for the whole batch
and indexes it by buffer position, so a row's noise depends on its
neighbours, on the batch size and on the padded prompt length. Here every
row gets its own key (`row_keys`: from the row's identity, global prompt
index and sample index in its group), folded with the number of tokens
generated so far (`PerRowKeySampler`). A row then samples the same
completion whichever host, call, batch position or device count generates
it (up to the floating-point differences between batch compositions, which
were seen to be ~1e-7 in fp32 and not to flip a sampled token). The native
engine (`engines.native`) samples with them.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
from typing import Any

from flax import nnx
import jax
import jax.numpy as jnp
import jaxtyping
import numpy as np
from tunix.generate import sampler as sampler_lib

from tunix_mcjax import compat
from tunix_mcjax.engines import base

SamplingState = compat.SamplingState

NamedSharding = jax.sharding.NamedSharding
PartitionSpec = jax.sharding.PartitionSpec


def _row_keys_impl(base_key: jax.Array, ids: jax.Array) -> jax.Array:
  def one(row: jax.Array) -> jax.Array:
    return jax.random.fold_in(jax.random.fold_in(base_key, row[0]), row[1])

  return jax.vmap(one)(ids)


def row_keys(
    seed: int,
    row_ids: np.ndarray,
    sharding: jax.sharding.Sharding | None = None,
) -> jax.Array:
  """Per-row PRNG keys: fold_in(fold_in(PRNGKey(seed), prompt), sample).

  Args:
    seed: the engine's base seed.
    row_ids: int array (B, 2) of (global prompt index, sample index).
    sharding: where to put the keys (rows along dimension 0); default: JAX's
      default placement.

  Returns:
    A uint32 array (B, 2) of raw PRNG keys, one per row.
  """
  ids = base.check_row_ids(row_ids)
  return row_keys_program(sharding)(jax.random.PRNGKey(seed), ids)


def row_keys_program(
    sharding: jax.sharding.Sharding | None = None,
) -> Callable[[jax.Array, jax.Array], jax.Array]:
  """`row_keys` as one jitted function of (base key, row ids).

  An engine builds it once: its out_shardings name that engine's mesh.
  """
  return jax.jit(_row_keys_impl, out_shardings=sharding)


def _is_per_row_key(seed: jax.Array, batch_size: int) -> bool:
  if jax.dtypes.issubdtype(seed.dtype, jax.dtypes.prng_key):
    return seed.ndim == 1 and seed.shape[0] == batch_size
  return seed.ndim == 2 and seed.shape[0] == batch_size


class PerRowKeySampler(compat.HookedSampler):
  """Tunix's `Sampler` with one PRNG key per row in top-p mode.

  Pass `seed=` a (B,) array of keys (raw uint32 (B, 2) or typed (B,)). The
  t-th generated token of a row is sampled with `fold_in(row_key, t)` by the
  stock `sample_top_p`, vmapped over rows, so a row's noise depends neither
  on the other rows nor on the padded prompt length. With a scalar seed, and
  in greedy and beam-search modes, behaviour is the stock one.

  If `row_sharding` is given, the sampling state (token buffer, KV cache,
  keys, ...) is created sharded along its batch dimension with it, which
  makes the jitted prefill and decode loops data-parallel over that
  sharding's devices. The batch size must then be a multiple of the number of
  row shards, and `seed` must be per-row keys. `cache_sharding`, when given,
  lays out the KV cache's keys and values (B, T, kv heads, head dim) instead
  (an engine with tensor parallelism splits them by head).
  """

  def __init__(
      self,
      transformer: nnx.Module,
      tokenizer: Any,
      cache_config: sampler_lib.CacheConfig,
      *,
      row_sharding: NamedSharding | None = None,
      cache_sharding: NamedSharding | None = None,
  ):
    super().__init__(transformer, tokenizer, cache_config)
    if cache_sharding is not None and row_sharding is None:
      raise ValueError("cache_sharding needs row_sharding.")
    self._row_sharding = row_sharding
    self._cache_sharding = cache_sharding
    self._init_fns: dict[Any, Callable[..., SamplingState]] = {}

  def init_sample_state(
      self, all_input_ids: jax.Array, **kwargs: Any
  ) -> SamplingState:
    if self._row_sharding is None:
      state = super().init_sample_state(all_input_ids, **kwargs)
      return dataclasses.replace(
          state, num_input_tokens=int(state.num_input_tokens)
      )
    seed = kwargs.pop("seed")
    key = (
        all_input_ids.shape,
        str(all_input_ids.dtype),
        seed.shape,
        str(seed.dtype),
        tuple(sorted(kwargs.items())),
    )
    if key not in self._init_fns:
      self._init_fns[key] = self._sharded_init(all_input_ids, seed, kwargs)
    return self._init_fns[key](all_input_ids, seed)

  def _sharded_init(
      self, all_input_ids: jax.Array, seed: jax.Array, kwargs: dict[str, Any]
  ) -> Callable[[jax.Array, jax.Array], SamplingState]:
    """Builds the sampling state directly in its row-sharded layout.

    Run eagerly, Tunix's init_sample_state would allocate the whole batch's
    KV cache on every device of the mesh before it could be sharded. Jitted
    with row-sharded outputs, each device only allocates its own rows.

    Args:
      all_input_ids: the (B, num_input_tokens) padded prompt tokens.
      seed: the (B,) per-row keys.
      kwargs: the other (static) arguments of `Sampler.init_sample_state`.

    Returns:
      A function of (all_input_ids, seed) returning the sampling state.
    """
    batch_size, num_input_tokens = all_input_ids.shape
    # The state's non-array leaves (decoding_step, total_sampling_steps,
    # forbidden_token_ids) must stay Python values, as in the stock sampler;
    # only array leaves go through jit. They are fixed per cache key.
    skeleton = {}
    hole = object()

    def build(ids: jax.Array, keys: jax.Array) -> list[jax.Array]:
      state = sampler_lib.Sampler.init_sample_state(
          self, ids, seed=keys, **kwargs
      )
      # Tunix stores num_input_tokens, a static (treedef) field, as a jnp
      # array; jit compares treedefs with ==, which fails for arrays of
      # different engines' meshes ("incompatible devices"). Use an int.
      state = dataclasses.replace(state, num_input_tokens=num_input_tokens)
      with_paths, treedef = jax.tree_util.tree_flatten_with_path(state)
      leaves = [x for _, x in with_paths]
      is_array = [isinstance(x, jax.Array) for x in leaves]
      skeleton["treedef"] = treedef
      skeleton["leaves"] = [hole if a else x for a, x in zip(is_array, leaves)]
      skeleton["paths"] = [p for (p, _), a in zip(with_paths, is_array) if a]
      return [x for a, x in zip(is_array, leaves) if a]

    replicated = NamedSharding(self._row_sharding.mesh, PartitionSpec())

    def layout(path: Any, x: jax.ShapeDtypeStruct) -> NamedSharding:
      if x.ndim == 0 or x.shape[0] != batch_size:
        return replicated
      names = {getattr(k, "name", getattr(k, "key", None)) for k in path}
      if (self._cache_sharding is not None and x.ndim == 4
          and "cache" in names and names & {"k", "v"}):
        return self._cache_sharding
      return self._row_sharding

    shapes = jax.eval_shape(build, all_input_ids, seed)
    out_shardings = [layout(p, x) for p, x in zip(skeleton["paths"], shapes)]
    build_jit = jax.jit(build, out_shardings=out_shardings)

    def init(ids: jax.Array, keys: jax.Array) -> SamplingState:
      arrays = iter(build_jit(ids, keys))
      leaves = [next(arrays) if x is hole else x for x in skeleton["leaves"]]
      return jax.tree.unflatten(skeleton["treedef"], leaves)

    return init

  def sample_step(
      self,
      logits: jnp.ndarray,
      eos: jax.Array,
      cache: dict[str, dict[str, jaxtyping.Array]],
      sampler_state: SamplingState,
  ) -> SamplingState:
    batch_size = sampler_state.token_buffer.shape[0]
    if sampler_state.sampling_mode != "top_p" or not _is_per_row_key(
        sampler_state.seed, batch_size
    ):
      return super().sample_step(logits, eos, cache, sampler_state)

    logits = logits[:, -1][:, None, :]  # [B, 1, V]
    if sampler_state.forbidden_token_ids:
      logits = logits.at[:, :, sampler_state.forbidden_token_ids].set(-jnp.inf)
    decoding_step = sampler_state.decoding_step
    # decoding_step is a buffer position (prompt padded to num_input_tokens);
    # the number of tokens generated so far does not depend on that padding.
    num_generated = decoding_step - (int(sampler_state.num_input_tokens) - 1)
    step_keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(
        sampler_state.seed, num_generated
    )
    want_logprobs = sampler_state.logprobs_buffer is not None
    temperature = sampler_state.temperature
    top_p = sampler_state.sampling_parameters["top_p"]
    top_k = sampler_state.sampling_parameters["top_k"]

    def sample_row(row_logits: jax.Array, key: jax.Array):
      # The stock sampler on a batch of one: the same noise for a row
      # whatever batch it is part of.
      token, logp = sampler_lib.sample_top_p(
          row_logits[None],
          key,
          temperature,
          top_p,
          top_k,
          return_logprobs=want_logprobs,
      )
      return token[0], (None if logp is None else logp[0])

    next_token, logp = jax.vmap(sample_row)(logits, step_keys)
    token_buffer = sampler_state.token_buffer.at[:, decoding_step + 1].set(
        next_token
    )
    logprobs_buffer = sampler_state.logprobs_buffer
    if logprobs_buffer is not None:
      logprobs_buffer = logprobs_buffer.at[:, decoding_step + 1].set(logp)
    done = sampler_state.done | jnp.isin(
        token_buffer[:, decoding_step + 1], eos
    )
    return dataclasses.replace(
        sampler_state,
        decoding_step=decoding_step + 1,
        token_buffer=token_buffer,
        logprobs_buffer=logprobs_buffer,
        cache=cache,
        done=done,
    )
