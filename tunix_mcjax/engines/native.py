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


"""A host-local, data-parallel, placement-invariant rollout engine.

`NativeEngine` runs Tunix's own sampler on a private copy of the policy whose
parameters are replicated over `engine_mesh` (normally the devices of one
host); the rows of every `generate` call are sharded over all of its devices.

Placement invariance: Tunix's stock sampler draws one key per decoding step
for the whole batch and indexes it by buffer position, so a row's noise
depends on its neighbours, on the batch size and on the padded prompt length.
Here every row gets its own key, derived from the row's identity (global
prompt index, sample index in its group) and folded with the number of
tokens generated so far. A row then samples the same completion whichever
host, call, batch position or device count generates it (up to the
floating-point differences between batch compositions, which were seen to be
~1e-7 in fp32 and not to flip a sampled token).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
import dataclasses
from typing import Any

from flax import nnx
import jax
import jax.numpy as jnp
import jaxtyping
import numpy as np
from tunix.generate import sampler as sampler_lib
from tunix.rl import common
from tunix.rl.rollout import base_rollout
from tunix.sft import utils as sft_utils

from tunix_mcjax import compat
from tunix_mcjax import transfers
from tunix_mcjax import tree_paths
from tunix_mcjax.engines import base

SamplingState = compat.SamplingState

Mesh = jax.sharding.Mesh
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
  fn = jax.jit(_row_keys_impl, out_shardings=sharding)
  return fn(jax.random.PRNGKey(seed), ids)


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
  row shards, and `seed` must be per-row keys.
  """

  def __init__(
      self,
      transformer: nnx.Module,
      tokenizer: Any,
      cache_config: sampler_lib.CacheConfig,
      *,
      row_sharding: NamedSharding | None = None,
  ):
    super().__init__(transformer, tokenizer, cache_config)
    self._row_sharding = row_sharding
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
      leaves, treedef = jax.tree.flatten(state)
      is_array = [isinstance(x, jax.Array) for x in leaves]
      skeleton["treedef"] = treedef
      skeleton["leaves"] = [hole if a else x for a, x in zip(is_array, leaves)]
      return [x for a, x in zip(is_array, leaves) if a]

    replicated = NamedSharding(self._row_sharding.mesh, PartitionSpec())
    out_shardings = [
        self._row_sharding
        if x.ndim >= 1 and x.shape[0] == batch_size
        else replicated
        for x in jax.eval_shape(build, all_input_ids, seed)
    ]
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


class NativeEngine(base.Engine):
  """Tunix's sampler on a private, replicated, data-parallel model copy.

  Plugs into `ClusterConfig.rollout_engine` (as the class, or a
  `functools.partial` of it supplying `context=` and the other keyword-only
  extras), which Tunix calls as `engine(rollout_actor=, tokenizer=, mesh=,
  rollout_config=)`.

  The engine never shares parameter buffers with `rollout_actor`: it copies
  them (replicated) onto `engine_mesh`, and later trainer updates reach it
  only through `update_params`. The context's `initial_model`, when given,
  is taken over as the engine's model (its arrays are reused if they are
  already replicated on `engine_mesh`); the multi-host cluster uses it to
  hand over a host-local copy, since global arrays cannot be copied onto one
  host's devices here.

  Rows of a `generate` call are sharded over all devices of `engine_mesh`;
  the batch is padded to a multiple of the device count by repeating the last
  prompt (padded rows consume no row ids and are dropped). For a purely
  data-parallel run of Tunix models whose activations carry sharding
  constraints (Qwen3: batch on "fsdp", features on "tp"), give `engine_mesh`
  all devices on "fsdp" and size 1 on "tp".

  Sampling keys come from row identities (see `base.RowIdSource`) and the
  engine's `seed`, not from `RolloutConfig.seed`; the global prompt index
  already differs between steps, so keys do too.
  """

  def __init__(
      self,
      *,
      rollout_actor: nnx.Module | None = None,
      tokenizer: Any,
      mesh: Mesh | None = None,
      rollout_config: base_rollout.RolloutConfig | None = None,
      context: base.EngineContext | None = None,
      cache_size: int | None = None,
  ):
    """Initializes the engine.

    Args:
      rollout_actor: the policy to copy (Tunix's plug point passes it).
        Ignored when `context.initial_model` is given.
      tokenizer: a tokenizer Tunix's `TokenizerAdapter` accepts.
      mesh: Tunix's ROLLOUT mesh; the default for `context.engine_mesh`.
      rollout_config: the TRAIN rollout config; supplies the default seed and
        KV-cache size.
      context: see `base.EngineContext`. Its `source_mapping` is applied
        inside the same jitted program that lays out the parameters.
      cache_size: KV-cache length. Default: the larger of
        `rollout_config.kv_cache_size` and `max_prompt_length +
        max_tokens_to_generate`.
    """
    context = context or base.EngineContext()
    engine_mesh, source = base.engine_mesh_and_source(
        "NativeEngine", context, mesh=mesh, rollout_actor=rollout_actor)
    if cache_size is None:
      if rollout_config is None:
        raise ValueError(
            "NativeEngine needs `cache_size` or `rollout_config`."
        )
      cache_size = base.default_cache_size(rollout_config)
    if cache_size <= 0:
      raise ValueError(f"cache_size must be positive; got {cache_size}.")

    self._engine_mesh = engine_mesh
    self._replicated = NamedSharding(engine_mesh, PartitionSpec())
    self._row_sharding = NamedSharding(
        engine_mesh, PartitionSpec(tuple(engine_mesh.axis_names))
    )
    self._seed = base.default_seed(rollout_config, context.seed)
    self._reshard_on_update = context.reshard_on_update
    self._gather_fn = jax.jit(
        lambda x, dtype: x.astype(dtype),
        static_argnums=1,
        out_shardings=self._replicated,
    )
    self._row_ids = base.row_ids_or_counter("NativeEngine", context.row_ids)
    # One jit per engine: its out_shardings names this engine's mesh.
    self._row_keys_fn = jax.jit(
        _row_keys_impl, out_shardings=self._row_sharding
    )

    with base.use_mesh(engine_mesh):
      model = self._local_copy(
          source, owned=context.initial_model is not None
      )
    self._source_publisher = None
    if context.source_mapping is not None:
      from tunix_mcjax import publication  # pylint: disable=g-import-not-at-top

      self._source_publisher = publication.Publisher(
          dst=nnx.state(model, nnx.Param),
          local_mesh=engine_mesh,
          mapping=context.source_mapping,
      )
    self._expected = {
        path: jax.ShapeDtypeStruct(x.shape, x.dtype)
        for path, x in tree_paths.flat_params(
            nnx.state(model, nnx.Param)
        ).items()
    }
    config = getattr(model, "config", None)
    self._sampler = PerRowKeySampler(
        model,
        tokenizer,
        sampler_lib.CacheConfig(
            cache_size=cache_size,
            num_layers=getattr(config, "num_layers", 0),
            num_kv_heads=getattr(config, "num_kv_heads", 0),
            head_dim=getattr(config, "head_dim", 0),
        ),
        row_sharding=self._row_sharding,
    )
    # The sampler's state keeps its structure: updates are unflattened into
    # it directly instead of rebuilding the module (which costs more than the
    # update itself on real models).
    state = self._sampler.transformer_state
    self._state_treedef = jax.tree.structure(state)
    self._state_paths = list(tree_paths.flat_params(state))
    if [id(x) for x in tree_paths.flat_params(state).values()] != [
        id(x) for x in jax.tree.leaves(state)
    ]:
      raise AssertionError("Unexpected leaf order of the sampler's state.")

  def _local_copy(self, source: nnx.Module, *, owned: bool) -> nnx.Module:
    graphdef, state = nnx.split(source)

    def place(path: Any, x: Any) -> Any:
      if not isinstance(x, jax.Array):
        return x
      if not x.is_fully_addressable:
        raise ValueError(
            f"Parameter {jax.tree_util.keystr(path)} of the"
            f" {'initial_model' if owned else 'rollout_actor'} is not fully"
            " addressable by this process (a multi-host global array); pass"
            " a host-local copy as `initial_model`."
        )
      if owned:
        return x if x.sharding == self._replicated else jax.device_put(
            x, self._replicated
        )
      # Never share buffers with the trainer, whose optimizer may donate
      # them. device_put alone does not guarantee that: even with
      # may_alias=False it reuses the source buffer for the shard on the
      # source's own device when the sharding changes (seen with jax 0.12).
      return jnp.copy(jax.device_put(x, self._replicated))

    # jax.tree.map builds new Variable objects, so the engine's module does
    # not share Variables with `source` either.
    new_state = jax.tree_util.tree_map_with_path(place, state)
    return nnx.merge(graphdef, new_state)

  @property
  def engine_mesh(self) -> Mesh:
    return self._engine_mesh

  @property
  def seed(self) -> int:
    return self._seed

  def param_shardings(self) -> Any:
    return jax.tree.map(
        lambda _: self._replicated, nnx.state(self.model(), nnx.Param)
    )

  def publication_target(self) -> Any:
    # A LoRA model (base + adapters, as Tunix's vanilla rollout holds it)
    # receives only its adapters after the initial model: the base is frozen.
    model = self.model()
    if sft_utils.is_lora_enabled(model):
      return nnx.state(model, nnx.LoRAParam)
    return nnx.state(model, nnx.Param)

  def generate(
      self,
      prompts: Sequence[str],
      rollout_config: base_rollout.RolloutConfig,
      **kwargs: Any,
  ) -> base_rollout.RolloutOutput:
    """Generates one completion per prompt, like `VanillaRollout.generate`.

    Args:
      prompts: the prompts, one row each (a GRPO group is G repeated rows).
      rollout_config: sampling settings; its `seed` is ignored (see class).
      **kwargs: ignored, as in `VanillaRollout`.

    Returns:
      The completions of exactly `len(prompts)` rows, in order.
    """
    del kwargs
    prompts = list(prompts)
    num_rows = len(prompts)
    if num_rows == 0:
      raise ValueError("Cannot generate from an empty list of prompts.")
    ids = base.check_row_ids(self._row_ids.take(num_rows))
    if ids.shape[0] != num_rows:
      raise ValueError(
          f"The row-id source returned {ids.shape[0]} ids for {num_rows} rows."
      )
    num_pad = -num_rows % self._engine_mesh.size
    prompts += [prompts[-1]] * num_pad
    ids = np.concatenate([ids, np.repeat(ids[-1:], num_pad, axis=0)])

    with base.use_mesh(self._engine_mesh):
      with transfers.deliberate("row_ids"):
        keys = self._row_keys_fn(jax.random.PRNGKey(self._seed),
                                 jax.device_put(ids))
      with transfers.deliberate("prompts"):
        out = self._sampler(
            input_strings=prompts,
            max_generation_steps=rollout_config.max_tokens_to_generate,
            max_prompt_length=rollout_config.max_prompt_length,
            echo=False,
            temperature=rollout_config.temperature,
            top_p=rollout_config.top_p,
            top_k=rollout_config.top_k,
            seed=keys,
            pad_output=False,
            eos_tokens=rollout_config.eos_tokens,
            return_logprobs=rollout_config.return_logprobs,
        )
    return base_rollout.RolloutOutput(
        text=out.text[:num_rows],
        logits=out.logits[:num_rows],
        tokens=out.tokens[:num_rows],
        left_padded_prompt_tokens=np.asarray(
            out.padded_prompt_tokens[:num_rows]
        ),
        logprobs=None if out.logprobs is None else out.logprobs[:num_rows],
    )

  def get_per_token_logps(
      self,
      prompt_tokens: jax.Array,
      completion_tokens: jax.Array,
  ) -> jax.Array:
    """Per-token log-probs of `completion_tokens` under the engine's model.

    Args:
      prompt_tokens: (B, P) left-padded prompt tokens of this host's rows.
      completion_tokens: (B, C) right-padded completion tokens.

    Returns:
      A (B, C) array on `engine_mesh`, like `VanillaRollout`'s.
    """
    prompts = base.host_rows(prompt_tokens, "prompt_tokens")
    completions = base.host_rows(completion_tokens, "completion_tokens")
    num_rows = prompts.shape[0]
    if completions.shape[0] != num_rows:
      raise ValueError(
          f"prompt_tokens has {num_rows} rows but completion_tokens has"
          f" {completions.shape[0]}."
      )
    num_pad = -num_rows % self._engine_mesh.size
    if num_pad:
      prompts = np.concatenate([prompts, np.repeat(prompts[-1:], num_pad, 0)])
      completions = np.concatenate(
          [completions, np.repeat(completions[-1:], num_pad, 0)]
      )
    graphdef, state = self._sampler.model_def_and_state()
    with base.use_mesh(self._engine_mesh):
      logps = common.compute_per_token_logps(
          graphdef,
          state,
          prompt_tokens=jax.device_put(prompts, self._row_sharding),
          completion_tokens=jax.device_put(completions, self._row_sharding),
          pad_id=self.pad_id(),
          eos_id=self.eos_id(),
          stop_gradient=True,
          return_logits=False,
      )
      return logps[:num_rows] if num_pad else logps

  def update_params(
      self,
      params: jaxtyping.PyTree,
      filter_types: tuple[Any, ...] | None = None,
  ) -> None:
    """Installs `params`, laid out as `param_shardings()` says, as they are.

    Args:
      params: an `nnx.State` (or nested dict) of parameters.
      filter_types: when given, `params` may cover a subset of the parameters
        (e.g. only LoRA ones); the rest are kept. The types themselves are
        not used: the tree paths say which parameters are replaced.

    Raises:
      ValueError: naming the first offending parameter, when a path is
        unknown or missing, or a leaf is not a jax.Array of the engine's
        shape, dtype and sharding.
    """
    if self._source_publisher is not None:
      params = self._source_publisher(params)
    new_flat = tree_paths.flat_params(params)
    if self._reshard_on_update:
      new_flat = {p: self._into_layout(p, x) for p, x in new_flat.items()}
    self._check_params(new_flat, partial=filter_types is not None)
    old = jax.tree.leaves(self._sampler.transformer_state)
    self._sampler.transformer_state = jax.tree.unflatten(
        self._state_treedef,
        [new_flat.get(p, x) for p, x in zip(self._state_paths, old)],
    )

  def _into_layout(self, path: tuple[Any, ...], x: Any) -> Any:
    """Process-local array -> the engine's dtype and replicated layout."""
    want = self._expected.get(path)
    if want is None or not isinstance(x, jax.Array):
      return x  # _check_params names the problem.
    if not x.is_fully_addressable:
      return x  # Cannot be moved from here; _check_params says so.
    if x.dtype == want.dtype and x.sharding.is_equivalent_to(
        self._replicated, x.ndim
    ):
      return x
    # A jitted gather stays on the devices; device_put of a sharded array
    # would go through the host, which Tunix's sync_weights guard forbids.
    return self._gather_fn(x, want.dtype)

  def _check_params(
      self, new_flat: dict[tuple[Any, ...], Any], *, partial: bool
  ) -> None:
    """Raises ValueError naming a parameter not in the engine's layout."""
    unexpected = sorted(
        tree_paths.dotted(p) for p in new_flat if p not in self._expected
    )
    if unexpected:
      raise ValueError(
          f"update_params got parameter(s) the engine does not have: "
          f"{unexpected[:5]}."
      )
    if not partial:
      missing = sorted(
          tree_paths.dotted(p) for p in self._expected if p not in new_flat
      )
      if missing:
        raise ValueError(
            f"update_params is missing parameter(s) {missing[:5]}; pass"
            " filter_types to update a subset."
        )
    for path, x in new_flat.items():
      name = tree_paths.dotted(path)
      want = self._expected[path]
      if not isinstance(x, jax.Array):
        raise ValueError(
            f"Parameter {name!r} is a {type(x).__name__}, not a jax.Array"
            " laid out as param_shardings() says."
        )
      if x.shape != want.shape or x.dtype != want.dtype:
        raise ValueError(
            f"Parameter {name!r} has shape {x.shape} and dtype {x.dtype};"
            f" the engine expects shape {want.shape} and dtype {want.dtype}."
        )
      if not x.sharding.is_equivalent_to(self._replicated, x.ndim):
        raise ValueError(
            f"Parameter {name!r} has sharding {x.sharding}; the engine"
            f" expects {self._replicated} (see param_shardings()). Publish"
            " parameters in that layout: update_params does not reshard."
        )

  def pad_id(self) -> int:
    return self._sampler.tokenizer.pad_id()

  def eos_id(self) -> int:
    return self._sampler.tokenizer.eos_id()

  def model(self) -> nnx.Module:
    return self._sampler.transformer
