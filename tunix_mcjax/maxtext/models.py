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

"""MaxText Qwen3 trainers and their publication into Tunix-layout engines.

The actor and reference are MaxText `Transformer`s wrapped in MaxText's own
`TunixMaxTextAdapter`, so Tunix's trainer and the stock GRPO learner drive
them unchanged; they are FSDP-sharded over every host with MaxText's logical
axis rules. Rollout engines keep Tunix's Qwen3 layout (the native engine
runs Tunix's Qwen3; the vLLM and tpu-inference engines map from it), so a
MaxText trainer only adds one step in front of publication:
`qwen3_param_mapping`, a renaming plus an unstack of the scanned layer axis
(`param_scan_axis`). It runs inside the publisher's one jitted program, so
the unstack is not one dispatch per layer.

Only the Qwen3 dense family is mapped (MaxText `decoder_block: qwen3`).
MaxText must be imported with `DECOUPLE_GCLOUD=TRUE` off Google Cloud; this
module sets it (if unset) before its first MaxText import.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
import os
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh
import numpy as np

# Tiny Qwen3 for CPU runs: the widths of `models.tiny_qwen3_config`, so the
# engine side is the same tiny model the Tunix trainer uses.
TINY_QWEN3_OVERRIDES: Mapping[str, Any] = {
    "model_name": "qwen3-0.6b",
    "override_model_config": True,
    "base_emb_dim": 64,
    "base_num_query_heads": 4,
    "base_num_kv_heads": 2,
    "head_dim": 16,
    "base_mlp_dim": 128,
    "base_num_decoder_layers": 2,
    "attention": "dot_product",
    "weight_dtype": "float32",
    "dtype": "float32",
    # Untied output layer: with tied embeddings MaxText rounds the table to
    # bfloat16 for the logits (`embeddings.attend_on_embedding`), so trainer
    # and engine logits could agree only to bf16 precision.
    "logits_via_embedding": False,
    # fp32 matmuls everywhere, so trainer and engine logits can be compared
    # tightly.
    "matmul_precision": "highest",
}

# Settings that only make sense on one controller (Pathways) or would reach
# out to a model hub; refused under a multi-controller run.
_SINGLE_CONTROLLER_ONLY = ("use_pathways",)

# MaxText decoder-layer parameter -> Tunix Qwen3 layer parameter.
_LAYER_RENAMES: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("pre_self_attention_layer_norm", "scale"), ("input_layernorm", "w")),
    (("post_self_attention_layer_norm", "scale"),
     ("post_attention_layernorm", "w")),
    (("self_attention", "query", "kernel"), ("attn", "q_proj", "w")),
    (("self_attention", "key", "kernel"), ("attn", "k_proj", "w")),
    (("self_attention", "value", "kernel"), ("attn", "v_proj", "w")),
    (("self_attention", "out", "kernel"), ("attn", "o_proj", "w")),
    (("self_attention", "query_norm", "scale"), ("attn", "q_norm", "w")),
    (("self_attention", "key_norm", "scale"), ("attn", "k_norm", "w")),
    (("mlp", "wi_0", "kernel"), ("mlp", "gate_proj", "kernel")),
    (("mlp", "wi_1", "kernel"), ("mlp", "up_proj", "kernel")),
    (("mlp", "wo", "kernel"), ("mlp", "down_proj", "kernel")),
)
_GLOBAL_RENAMES: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("token_embedder", "embedding"), ("embedder", "input_embedding")),
    (("decoder", "decoder_norm", "scale"), ("final_norm", "w")),
    (("decoder", "logits_dense", "kernel"), ("lm_head", "w")),
)


def import_maxtext() -> Any:
  """Imports `maxtext` for use off Google Cloud (sets DECOUPLE_GCLOUD)."""
  os.environ.setdefault("DECOUPLE_GCLOUD", "TRUE")
  import maxtext  # pylint: disable=g-import-not-at-top

  return maxtext


def _format_override(key: str, value: Any) -> str:
  if isinstance(value, bool):
    value = str(value)
  return f"{key}={value}"


def maxtext_config(
    *,
    base_config: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    load_parameters_path: str | None = None,
    scan_layers: bool = True,
    vocab_size: int | None = None,
) -> Any:
  """A MaxText config for a GRPO actor under tunix_mcjax.

  Args:
    base_config: MaxText YAML to start from; default: MaxText's `base.yml`.
    overrides: `key=value` settings on top (MaxText command-line style);
      default: `TINY_QWEN3_OVERRIDES`.
    load_parameters_path: a MaxText (Orbax) parameter checkpoint to load;
      None initialises randomly from `init_weights_seed`.
    scan_layers: MaxText's scanned (stacked) layer layout, or one module per
      layer.
    vocab_size: overrides the model's vocabulary (the tiny model uses the
      tokenizer's).

  Returns:
    MaxText's `HyperParameters`.

  Raises:
    ValueError: on settings mcjax cannot honour (e.g. `use_pathways`).
  """
  maxtext = import_maxtext()
  from maxtext.configs import pyconfig  # pylint: disable=g-import-not-at-top

  if base_config is None:
    base_config = os.path.join(
        os.path.dirname(maxtext.__file__), "configs", "base.yml"
    )
  if not os.path.isfile(base_config):
    raise FileNotFoundError(f"MaxText config {base_config!r} does not exist.")
  settings: dict[str, Any] = dict(
      TINY_QWEN3_OVERRIDES if overrides is None else overrides
  )
  settings.update(
      scan_layers=scan_layers,
      hardware=settings.get("hardware", _hardware()),
      run_name=settings.get("run_name", "tunix_mcjax"),
      enable_checkpointing=settings.get("enable_checkpointing", False),
      # tunix_mcjax.runtime owns jax.distributed start-up.
      skip_jax_distributed_system=True,
      # Never convert from a hub checkpoint at run time.
      convert_checkpoint_if_possible=False,
  )
  if vocab_size is not None:
    settings["vocab_size"] = vocab_size
  if load_parameters_path:
    settings["load_parameters_path"] = load_parameters_path
  for key in _SINGLE_CONTROLLER_ONLY:
    if settings.get(key):
      raise ValueError(
          f"MaxText setting {key}=true asks for a single controller"
          " (Pathways); the mcjax backend runs one process per host. Drop it."
      )
  argv = ["", base_config] + [_format_override(k, v) for k, v in settings.items()]
  # MaxText's config sets XLA_FLAGS, when unset, to dump the train step's
  # HLO into /tmp/xla_dump; this host's JAX has started already, but the
  # processes it starts would inherit the dumps (and leave the files).
  xla_flags = os.environ.get("XLA_FLAGS")
  try:
    config = pyconfig.initialize(argv)
  finally:
    if xla_flags is None:
      os.environ.pop("XLA_FLAGS", None)
    else:
      os.environ["XLA_FLAGS"] = xla_flags
  if config.decoder_block.value != "qwen3":
    raise ValueError(
        f"Only MaxText's dense Qwen3 (decoder_block=qwen3) is mapped to the"
        f" rollout engines; model_name={config.model_name!r} has"
        f" decoder_block={config.decoder_block.value!r}."
    )
  return config


def _hardware() -> str:
  platform = jax.devices()[0].platform
  return {"cpu": "cpu", "gpu": "gpu"}.get(platform, "tpu")


def maxtext_mesh(config: Any) -> Mesh:
  """MaxText's mesh over every host's devices, hosts contiguous on "fsdp".

  Only FSDP is supported across hosts (every other mesh axis of size 1): the
  mcjax cluster shards batches over "fsdp" and needs each host's devices as
  one contiguous block of it.
  """
  from maxtext.utils import maxtext_utils  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import runtime  # pylint: disable=g-import-not-at-top

  shape = maxtext_utils.create_device_mesh(config).shape
  sizes = dict(zip(config.mesh_axes, shape))
  others = {a: n for a, n in sizes.items() if a != "fsdp" and n != 1}
  if others:
    raise ValueError(
        f"MaxText mesh {sizes} uses axes {sorted(others)} besides 'fsdp';"
        " mcjax supports FSDP over all devices (leave ici_fsdp_parallelism=-1"
        " and the other parallelisms at 1)."
    )
  devices = np.array(runtime.host_contiguous_devices(), dtype=object)
  return Mesh(
      devices.reshape(shape),
      tuple(config.mesh_axes),
      axis_types=(jax.sharding.AxisType.Auto,) * len(shape),
  )


def create_actor(
    config: Any, mesh: Mesh, *, pad_id: int | None, rng_seed: int = 0
) -> Any:
  """A MaxText Transformer in a `TunixMaxTextAdapter`, sharded on `mesh`.

  Parameters come from `config.load_parameters_path` when set, else a random
  initialisation that depends only on `rng_seed` and the config (not on the
  number of hosts).
  """
  from maxtext.utils import model_creation_utils  # pylint: disable=g-import-not-at-top

  out = model_creation_utils.from_pretrained(
      config,
      mesh=mesh,
      rng_key=jax.random.key(rng_seed),
      wrap_with_tunix_adapter=True,
      tokenizer_pad_id=pad_id,
  )
  # (model, mesh) when MaxText built the mesh itself; the model otherwise.
  return out[0] if isinstance(out, tuple) else out


def engine_model_config(config: Any, *, dtype: Any = jnp.float32) -> Any:
  """The Tunix Qwen3 config a rollout engine mirrors a MaxText Qwen3 with."""
  from tunix.models.qwen3 import model as qwen3_lib  # pylint: disable=g-import-not-at-top

  return qwen3_lib.ModelConfig(
      num_layers=config.base_num_decoder_layers,
      vocab_size=config.vocab_size,
      embed_dim=config.base_emb_dim,
      hidden_dim=config.base_mlp_dim,
      num_heads=config.base_num_query_heads,
      head_dim=config.head_dim,
      num_kv_heads=config.base_num_kv_heads,
      rope_theta=int(config.rope_max_timescale),
      norm_eps=config.normalization_layer_epsilon,
      use_tied_embedding=bool(config.logits_via_embedding),
      shd_config=qwen3_lib.ShardingConfig.get_default_sharding(),
      dtype=dtype,
      param_dtype=dtype,
  )


def _keystr(*parts: str | int) -> str:
  return "".join(f"[{p}]" if isinstance(p, int) else f"['{p}']" for p in parts)


def qwen3_param_mapping(
    config: Any,
) -> Callable[[dict[str, Any]], dict[str, Any]]:
  """MaxText Qwen3 parameters -> Tunix Qwen3 parameters (flat, by keystr).

  For `publication.Publisher(mapping=...)`: takes the actor's flattened
  `nnx.state(adapter, nnx.Param)` and returns the engine's names. The scanned
  layout (`scan_layers=True`, layers stacked on `param_scan_axis`) is
  unstacked with array ops that trace into the caller's jitted program. Kernel
  layouts already agree (MaxText `[embed, heads, head_dim]` = Tunix
  `DNH`), so nothing is transposed. Names the mapping does not know are
  passed through unchanged, so the publisher reports them instead of
  dropping them.

  Args:
    config: the MaxText config of the actor.

  Returns:
    The mapping (pure; usable on arrays and abstract values).
  """
  num_layers = int(config.base_num_decoder_layers)
  scanned = bool(config.scan_layers)
  scan_axis = int(config.param_scan_axis)

  def mapping(flat: dict[str, Any]) -> dict[str, Any]:
    suffix = ".value" if flat and all(
        k.endswith(".value") for k in flat) else ""
    prefix = _keystr("base")
    src = {}
    for k, v in flat.items():
      name = k[: len(k) - len(suffix)] if suffix else k
      src[name[len(prefix):] if name.startswith(prefix) else name] = (k, v)
    out: dict[str, Any] = {}
    used: set[str] = set()
    for mt, tx in _LAYER_RENAMES:
      if scanned:
        name = _keystr("decoder", "layers", *mt)
        if name not in src:
          continue
        used.add(name)
        stacked = jnp.moveaxis(src[name][1], scan_axis, 0)
        for i in range(num_layers):
          out[_keystr("layers", i, *tx) + suffix] = stacked[i]
      else:
        for i in range(num_layers):
          name = _keystr("decoder", f"layers_{i}", *mt)
          if name in src:
            used.add(name)
            out[_keystr("layers", i, *tx) + suffix] = src[name][1]
    for mt, tx in _GLOBAL_RENAMES:
      name = _keystr(*mt)
      if name in src:
        used.add(name)
        out[_keystr(*tx) + suffix] = src[name][1]
    for name, (key, value) in src.items():
      if name not in used:
        out[key] = value
    return out

  return mapping


def weight_dtype_engine_spec(config: Any) -> Any:
  """`engine_model_spec` in the MaxText config's own weight dtype: the
  engine model of a MaxText actor, trainer and rollout hosts alike."""
  return engine_model_spec(config, dtype=jnp.dtype(config.weight_dtype))


def engine_model_spec(config: Any, *, dtype: Any = jnp.float32) -> Any:
  """The `EngineModelSpec` that puts a Tunix Qwen3 engine behind a MaxText actor."""
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from tunix.models.qwen3 import model as qwen3_lib  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.engines import base  # pylint: disable=g-import-not-at-top

  engine_cfg = engine_model_config(config, dtype=dtype)
  return base.EngineModelSpec(
      create=lambda: qwen3_lib.Qwen3(engine_cfg, rngs=nnx.Rngs(0)),
      mapping=qwen3_param_mapping(config),
  )


def zero_engine_model(spec: Any, mesh: Mesh) -> Any:
  """`spec`'s engine model replicated on `mesh` with zero weights: a
  disaggregated rollout host's, until the trainers' first publication
  (which they map from MaxText's layout before sending)."""
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import publication  # pylint: disable=g-import-not-at-top

  graphdef, state = nnx.split(nnx.eval_shape(spec.create))
  zeros = jax.tree.map(
      lambda s: jnp.zeros(s.shape, s.dtype, device=s.sharding),
      publication.replicated_like(state, mesh))
  return nnx.merge(graphdef, zeros)


def logical_axis_rules(config: Any) -> Sequence[tuple[str, Any]]:
  """MaxText's logical axis rules, for Tunix's `role_to_logical_axis_rule`."""
  return tuple(tuple(r) for r in config.logical_axis_rules)
