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


"""A host-local, data- and tensor-parallel, placement-invariant rollout engine.

`NativeEngine` runs Tunix's own sampler on a private copy of the policy on
`engine_mesh` (normally the devices of one host, `runtime.local_mesh(tp=N)`):
parameters are split over its last (tp) axis as the model's annotations say
and replicated over the others, whose devices share the rows of every
`generate` call (with engine tp 1: replicated parameters, rows over all
devices).

Placement invariance: every row samples with its own key, derived from the
row's identity and folded with the number of tokens generated so far
(`per_row_keys`, which also explains why Tunix's stock keys are not), so a
row samples the same completion whichever host, call, batch position or
device count generates it.
"""

from __future__ import annotations

from collections.abc import Sequence
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

from tunix_mcjax import transfers
from tunix_mcjax import tree_paths
from tunix_mcjax.engines import base
from tunix_mcjax.engines import per_row_keys

# Per-row sampling lives in its own module; callers read its names here too.
# pylint: disable=unused-import,g-importing-member,g-bad-import-order
from tunix_mcjax.engines.per_row_keys import PerRowKeySampler
from tunix_mcjax.engines.per_row_keys import SamplingState
from tunix_mcjax.engines.per_row_keys import row_keys
# pylint: enable=unused-import,g-importing-member,g-bad-import-order

Mesh = jax.sharding.Mesh
NamedSharding = jax.sharding.NamedSharding
PartitionSpec = jax.sharding.PartitionSpec


class NativeEngine(base.Engine):
  """Tunix's sampler on a private, data- (and tensor-) parallel model copy.

  Plugs into `ClusterConfig.rollout_engine` (as the class, or a
  `functools.partial` of it supplying `context=` and the other keyword-only
  extras), which Tunix calls as `engine(rollout_actor=, tokenizer=, mesh=,
  rollout_config=)`.

  The engine never shares parameter buffers with `rollout_actor`: it copies
  them onto `engine_mesh` in its layout (`param_shardings()`), and later
  trainer updates reach it only through `update_params`. The context's
  `initial_model`, when given, is taken over as the engine's model (its
  arrays are reused if they are already in that layout); the multi-host
  cluster uses it to hand over a host-local copy, since global arrays cannot
  be copied onto one host's devices here.

  Layout (`base.param_shardings`): the mesh's last axis is the engine's
  tensor parallelism (tp), the others its data parallelism (dp). Each
  parameter is split over tp where the model's annotation names that axis
  (Tunix's Qwen3: heads, MLP width, vocabulary) and replicated over dp: one
  copy per tp group, not per device. The KV cache is split over tp by KV
  head like the model's attention activations. Rows of a `generate` call
  are sharded over dp (all devices with tp 1); the batch is padded to a
  multiple of dp by repeating the last prompt (padded rows consume no row
  ids and are dropped). Tunix's Qwen3 constrains activations to batch on
  "fsdp" and features on "tp": name the mesh's axes ("fsdp", "tp"), as
  `runtime.local_mesh` does.

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
    self._tp = base.engine_tp(engine_mesh)
    # Rows are padded to a multiple of the data-parallel degree.
    self._dp = engine_mesh.size // self._tp
    rows = base.row_axes(engine_mesh)
    self._row_sharding = NamedSharding(engine_mesh, PartitionSpec(rows))
    self._seed = base.default_seed(rollout_config, context.seed)
    self._reshard_on_update = context.reshard_on_update
    # One jitted cast-and-relayout per target sharding (reshard_on_update).
    self._gather_fns: dict[NamedSharding, Any] = {}
    self._row_ids = base.row_ids_or_counter("NativeEngine", context.row_ids)
    # One jit per engine: its out_shardings names this engine's mesh.
    self._row_keys_fn = per_row_keys.row_keys_program(self._row_sharding)

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
    # Sharding objects already found equivalent to the engine's layout.
    self._layout_ok: dict[tuple[Any, ...], Any] = {}
    self._expected = {
        path: jax.ShapeDtypeStruct(x.shape, x.dtype)
        for path, x in tree_paths.flat_params(
            nnx.state(model, nnx.Param)
        ).items()
    }
    self._shardings = {
        path: x.sharding for path, x in tree_paths.flat_params(
            nnx.state(model, nnx.Param)).items()
    }
    config = getattr(model, "config", None)
    num_kv_heads = getattr(config, "num_kv_heads", 0)
    # The KV cache (B, T, kv heads, head dim) as the model's attention
    # activations are laid out (Qwen3's act_btnh: heads on "tp"), so that a
    # tp group's devices each keep their own heads' keys and values.
    cache_sharding = None
    if self._tp > 1 and num_kv_heads and num_kv_heads % self._tp == 0:
      cache_sharding = NamedSharding(
          engine_mesh,
          PartitionSpec(rows, None, engine_mesh.axis_names[-1], None))
    self._sampler = per_row_keys.PerRowKeySampler(
        model,
        tokenizer,
        sampler_lib.CacheConfig(
            cache_size=cache_size,
            num_layers=getattr(config, "num_layers", 0),
            num_kv_heads=num_kv_heads,
            head_dim=getattr(config, "head_dim", 0),
        ),
        row_sharding=self._row_sharding,
        cache_sharding=cache_sharding,
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
    # The engine's layout of every array, from the model's annotations.
    layout = base.param_shardings(state, self._engine_mesh)

    def place(path: Any, x: Any, sharding: Any) -> Any:
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
        return x if x.sharding == sharding else jax.device_put(x, sharding)
      # Never share buffers with the trainer, whose optimizer may donate
      # them. device_put alone does not guarantee that: even with
      # may_alias=False it reuses the source buffer for the shard on the
      # source's own device when the sharding changes (seen with jax 0.12).
      return jnp.copy(jax.device_put(x, sharding))

    # jax.tree.map builds new Variable objects, so the engine's module does
    # not share Variables with `source` either.
    new_state = jax.tree_util.tree_map_with_path(place, state, layout)
    return nnx.merge(graphdef, new_state)

  @property
  def engine_mesh(self) -> Mesh:
    return self._engine_mesh

  @property
  def seed(self) -> int:
    return self._seed

  def param_shardings(self) -> Any:
    return jax.tree.map(lambda x: x.sharding,
                        nnx.state(self.model(), nnx.Param))

  def publication_target(self) -> Any:
    # A LoRA model (base + adapters, as Tunix's vanilla rollout holds it)
    # receives only its adapters after the initial model: the base is frozen.
    model = self.model()
    if sft_utils.is_lora_enabled(model):
      return nnx.state(model, nnx.LoRAParam)
    return nnx.state(model, nnx.Param)

  def retiring_params(self) -> dict[Any, jax.Array] | None:
    # Published arrays are installed as they are, unless they still go
    # through a mapping or a relayout here.
    if self._source_publisher is not None or self._reshard_on_update:
      return None
    return dict(zip(self._state_paths,
                    jax.tree.leaves(self._sampler.transformer_state)))

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
    # A string is one prompt (an agent turn of Tunix's agentic learner).
    prompts = [prompts] if isinstance(prompts, str) else list(prompts)
    num_rows = len(prompts)
    if num_rows == 0:
      raise ValueError("Cannot generate from an empty list of prompts.")
    ids = base.check_row_ids(self._row_ids.take(num_rows))
    if ids.shape[0] != num_rows:
      raise ValueError(
          f"The row-id source returned {ids.shape[0]} ids for {num_rows} rows."
      )
    num_pad = -num_rows % self._dp
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
    # Rows already on this host's devices stay there (no host round trip).
    prompts = base.local_rows_2d(prompt_tokens, "prompt_tokens")
    completions = base.local_rows_2d(completion_tokens, "completion_tokens")
    num_rows = prompts.shape[0]
    if completions.shape[0] != num_rows:
      raise ValueError(
          f"prompt_tokens has {num_rows} rows but completion_tokens has"
          f" {completions.shape[0]}."
      )
    num_pad = -num_rows % self._dp
    if num_pad:
      prompts = base.pad_rows(prompts, num_pad)
      completions = base.pad_rows(completions, num_pad)
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
      return (jax.lax.slice_in_dim(logps, 0, num_rows, axis=0) if num_pad
              else logps)

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
    """Process-local array -> the engine's dtype and layout."""
    want = self._expected.get(path)
    if want is None or not isinstance(x, jax.Array):
      return x  # _check_params names the problem.
    if not x.is_fully_addressable:
      return x  # Cannot be moved from here; _check_params says so.
    sharding = self._shardings[path]
    if x.dtype == want.dtype and x.sharding.is_equivalent_to(sharding, x.ndim):
      return x
    # A jitted gather stays on the devices; device_put of a sharded array
    # would go through the host, which Tunix's sync_weights guard forbids.
    if sharding not in self._gather_fns:
      self._gather_fns[sharding] = jax.jit(
          lambda x, dtype: x.astype(dtype), static_argnums=1,
          out_shardings=sharding)
    return self._gather_fns[sharding](x, want.dtype)

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
      want = self._expected[path]
      if not isinstance(x, jax.Array):
        raise ValueError(
            f"Parameter {tree_paths.dotted(path)!r} is a {type(x).__name__}, not a jax.Array"
            " laid out as param_shardings() says."
        )
      if x.shape != want.shape or x.dtype != want.dtype:
        raise ValueError(
            f"Parameter {tree_paths.dotted(path)!r} has shape {x.shape} and dtype {x.dtype};"
            f" the engine expects shape {want.shape} and dtype {want.dtype}."
        )
      # A step publishes arrays on the same sharding objects every time:
      # compare layouts once per object.
      if self._layout_ok.get(path) is x.sharding:
        continue
      if not x.sharding.is_equivalent_to(self._shardings[path], x.ndim):
        raise ValueError(
            f"Parameter {tree_paths.dotted(path)!r} has sharding {x.sharding}; the engine"
            f" expects {self._shardings[path]} (see param_shardings())."
            " Publish parameters in that layout: update_params does not"
            " reshard."
        )
      self._layout_ok[path] = x.sharding

  def pad_id(self) -> int:
    return self._sampler.tokenizer.pad_id()

  def eos_id(self) -> int:
    return self._sampler.tokenizer.eos_id()

  def model(self) -> nnx.Module:
    return self._sampler.transformer
