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


"""`TpuInferenceEngine`: tpu-inference (vLLM's JAX backend on TPU) per host.

A deliberately thin wrapper that drives Tunix's vLLM rollout
(`tunix.rl.rollout.vllm_rollout.VllmRollout`) on the host's local mesh
(in-process engine, local `device_indexes`, `MODEL_IMPL_TYPE=flax_nnx`) and
installs publications with `tpu_inference_weights.local_write`, the one
jitted program that maps the trainer's Qwen3 parameters onto tpu-inference's
state (pure JAX, tested on CPU). IT HAS NEVER BEEN RUN
(`TpuInferenceEngine.experimental`): tpu-inference only runs on TPU and
cannot be installed next to Tunix 0.1.7 here. Treat it as a reviewed sketch.

The mapping's names (`TargetParam`, `qwen3_plan`, `with_lora`,
`LocalWriter`, `local_write`) stay importable from here.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
import os
from typing import Any

from absl import logging
from flax import nnx
import jax
import jaxtyping
import numpy as np

from tunix_mcjax import temp_dirs
from tunix_mcjax import tree_paths
from tunix_mcjax.compat import vllm_rollout as compat_vllm_rollout
from tunix_mcjax.engines import base
from tunix_mcjax.engines import lora_merge
from tunix_mcjax.engines import qwen3_hf
from tunix_mcjax.engines.experimental import tpu_inference_weights as weights

# The weight mapping lives in its own module; callers read its names here
# too.
# pylint: disable=unused-import,g-importing-member,g-bad-import-order
from tunix_mcjax.engines.experimental.tpu_inference_weights import LocalWriter
from tunix_mcjax.engines.experimental.tpu_inference_weights import TargetParam
from tunix_mcjax.engines.experimental.tpu_inference_weights import local_write
from tunix_mcjax.engines.experimental.tpu_inference_weights import qwen3_plan
from tunix_mcjax.engines.experimental.tpu_inference_weights import with_lora
# pylint: enable=unused-import,g-importing-member,g-bad-import-order

Mesh = jax.sharding.Mesh
NamedSharding = jax.sharding.NamedSharding
PartitionSpec = jax.sharding.PartitionSpec


@dataclasses.dataclass(frozen=True, kw_only=True)
class TpuInferenceOptions:
  """Options of `TpuInferenceEngine`.

  Attributes:
    keep_kv_cache: keep the KV cache allocated across publications (the
      prefix cache is reset either way); False deletes and re-creates it
      around each write, as Tunix's vLLM sampler does.
    tensor_parallel_size: the engine's "model" axis size; None: all of the
      engine mesh's devices (one replica per host).
    hbm_utilization: fraction of HBM vLLM may take.
    q_proj_layout: tpu-inference's q_proj layout ("DNH" unless the engine
      runs with LAYOUT_Q_PROJ_AS_NDH=1).
    config_dir: where to write config.json; None: a temporary directory.
  """

  keep_kv_cache: bool = True
  tensor_parallel_size: int | None = None
  hbm_utilization: float = 0.3
  q_proj_layout: str = "DNH"
  config_dir: str | None = None

  def __post_init__(self):
    if self.tensor_parallel_size is not None and self.tensor_parallel_size < 1:
      raise ValueError("tensor_parallel_size must be >= 1.")
    if not 0.0 < self.hbm_utilization <= 1.0:
      raise ValueError("hbm_utilization must be in (0, 1].")
    if self.q_proj_layout not in ("DNH", "NDH"):
      raise ValueError("q_proj_layout must be 'DNH' or 'NDH'.")


class TpuInferenceEngine(base.Engine):
  """Tunix's vLLM rollout (tpu-inference) on this host, fed by `local_write`.

  Experimental (`experimental = True`; it logs a warning when constructed).

  NOT RUN ANYWHERE: written against Tunix 0.1.7's `VllmRollout` and
  tpu-inference's Aug-2026 main, but tpu-inference only runs on TPU and no
  TPU was available; only the pure-JAX mapping (`tpu_inference_weights`)
  is tested (on CPU).

  Set-up per host: `VLLM_ENABLE_V1_MULTIPROCESSING=0` (in-process engine),
  `MODEL_IMPL_TYPE=flax_nnx` (the state layout `qwen3_plan` targets),
  `TPU_MULTIHOST_BACKEND` unset, and Tunix's vLLM config built on
  `engine_mesh` (this host's devices), so its `device_indexes` are local.
  tpu-inference has no per-request seeds, so sampling here is not
  placement-invariant (Tunix passes one seed for all rows); the context's
  `row_ids` and `reshard_on_update` are not used.

  A LoRA actor: the engine keeps the frozen base weights on this host's
  devices, takes only the adapters at each publication and merges them in
  `local_write`'s one program (`with_lora`); alpha and rank come from
  `rollout_config.rollout_vllm_lora_config` (e.g. the actor's lora_config),
  and tpu-inference itself runs plain (merged) weights, so Tunix's vLLM LoRA
  setting is not passed on. Tunix's own first transfer gets the actor's
  state; the merged weights are written over it right after.
  """

  experimental = True

  def __init__(
      self,
      *,
      rollout_actor: nnx.Module | None = None,
      tokenizer: Any,
      mesh: Mesh | None = None,
      rollout_config: Any = None,
      context: base.EngineContext | None = None,
      options: TpuInferenceOptions | None = None,
  ):
    logging.warning("TpuInferenceEngine ('vllm_tpu') is experimental: it has"
                    " never run on a TPU.")
    # row_ids and reshard_on_update do not apply: see the class docstring.
    context = context or base.EngineContext()
    if context.source_mapping is not None:
      raise NotImplementedError(
          "TpuInferenceEngine does not apply a source_mapping."
      )
    self._options = options or TpuInferenceOptions()
    if rollout_config is None:
      raise ValueError("TpuInferenceEngine needs rollout_config.")
    engine_mesh, source = base.engine_mesh_and_source(
        "TpuInferenceEngine", context, mesh=mesh, rollout_actor=rollout_actor)
    if jax.default_backend() != "tpu":
      raise RuntimeError(
          "The 'vllm_tpu' engine runs tpu-inference, which needs TPUs (this"
          f" process's JAX backend is {jax.default_backend()!r}); on GPU or"
          " CPU use the 'vllm' engine."
      )
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ["MODEL_IMPL_TYPE"] = "flax_nnx"
    os.environ.pop("TPU_MULTIHOST_BACKEND", None)
    # Imported here: vllm_rollout imports vLLM, absent outside TPU set-ups.
    from tunix.rl.rollout import vllm_rollout  # pylint: disable=g-import-not-at-top

    self._engine_mesh = engine_mesh
    self._replicated = NamedSharding(engine_mesh, PartitionSpec())
    tp = self._options.tensor_parallel_size or engine_mesh.size
    config = source.config
    plan = weights.qwen3_plan(config, tp_size=tp,
                              q_proj_layout=self._options.q_proj_layout)
    flat = tree_paths.flat_params(nnx.state(source, nnx.Param))
    # A LoRA actor: merged here (see the class docstring).
    self._lora = bool(lora_merge.adapters(flat))
    self._base = None
    if self._lora:
      plan = weights.with_lora(plan, set(flat), scale=lora_merge.scale(
          getattr(rollout_config, "rollout_vllm_lora_config", None),
          where="RolloutConfig.rollout_vllm_lora_config"))
      keep = jax.jit(lambda x: x, out_shardings=self._replicated)
      with jax.transfer_guard("allow"):
        self._base = jax.tree.map(keep, nnx.state(
            source, nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam))))
    self._plan = plan
    self._tmpdir = None
    config_dir = self._options.config_dir
    if config_dir is None:
      self._tmpdir = temp_dirs.temporary("tunix_mcjax_tpu_")
      config_dir = self._tmpdir.name
    eos = rollout_config.eos_tokens or None
    qwen3_hf.write_hf_config_dir(config_dir, qwen3_hf.qwen3_hf_config(
        config, bos_id=None, eos_id=eos, pad_id=None,
        max_position_embeddings=base.default_cache_size(rollout_config),
        torch_dtype=np.dtype(
            rollout_config.data_type or config.param_dtype).name,
    ))
    cfg = dataclasses.replace(
        rollout_config,
        seed=rollout_config.seed if context.seed is None else context.seed,
        rollout_vllm_model_version=config_dir,
        rollout_vllm_init_with_random_weights=True,
        rollout_vllm_lora_config=None,  # Merged here instead.
        rollout_vllm_hbm_utilization=self._options.hbm_utilization,
        tensor_parallel_size=tp,
        data_parallel_size=engine_mesh.size // tp,
        rollout_vllm_kwargs={
            **(rollout_config.rollout_vllm_kwargs or {}),
            "skip_tokenizer_init": True,
        },
    )
    with base.use_mesh(engine_mesh):
      # Tunix's VllmRollout installs the first weights with its own
      # (per-layer) transfer; later publications go through local_write.
      self._rollout = vllm_rollout.VllmRollout(
          source, tokenizer,
          cache_config_or_size=cfg.kv_cache_size, mesh=engine_mesh,
          rollout_config=cfg,
      )
    # A LoRA actor publishes only its adapters (nnx.LoRAParam).
    self._target = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype,
                                       sharding=self._replicated),
        nnx.state(source, nnx.LoRAParam if self._lora else nnx.Param),
    )
    if self._lora:
      with jax.transfer_guard("allow"):
        self.update_params(jax.tree.map(
            jax.jit(lambda x: x, out_shardings=self._replicated),
            nnx.state(source, nnx.LoRAParam)))

  @property
  def engine_mesh(self) -> Mesh:
    return self._engine_mesh

  def publication_target(self) -> Any:
    return self._target

  def update_params(
      self,
      params: jaxtyping.PyTree,
      filter_types: tuple[Any, ...] | None = None,
  ) -> None:
    del filter_types
    llm = compat_vllm_rollout.vllm_sampler(self._rollout).llm
    runner = compat_vllm_rollout.model_runner(self._rollout)
    llm.reset_prefix_cache()
    if not self._options.keep_kv_cache:
      llm.collective_rpc("delete_kv_cache")
    new_state = weights.local_write(runner.state, params, plan=self._plan,
                                    base_params=self._base)
    runner.state = new_state
    if hasattr(runner, "state_leaves"):
      # tpu-inference's jitted model reads these flattened leaves.
      runner.state_leaves = (
          tuple(jax.tree_util.tree_leaves(new_state))
          if isinstance(new_state, nnx.State) else new_state
      )
    if not self._options.keep_kv_cache:
      llm.collective_rpc("reinitialize_kv_cache")

  def generate(self, prompts: Sequence[str], rollout_config: Any,
               **kwargs: Any) -> Any:
    out = self._rollout.generate(list(prompts), rollout_config, **kwargs)
    # Tunix's vLLM sampler keeps the stop token and pads; strip both so the
    # rows look like the native engine's.
    stop = list(rollout_config.eos_tokens or [self.eos_id()])
    pad = self.pad_id()
    tokens = []
    for t in out.tokens:
      t = np.asarray(t)
      ends = np.flatnonzero(np.isin(t, stop))
      t = t[:ends[0]] if ends.size else t
      real = np.flatnonzero(t != pad)
      tokens.append(t[:real[-1] + 1 if real.size else 0].astype(np.int32))
    return dataclasses.replace(out, tokens=tokens)

  def get_per_token_logps(self, prompt_tokens, completion_tokens):
    return self._rollout.get_per_token_logps(prompt_tokens, completion_tokens)

  def pad_id(self) -> int:
    return self._rollout.pad_id()

  def eos_id(self) -> int:
    return self._rollout.eos_id()

  def model(self) -> None:
    return None


__all__ = [
    "LocalWriter",
    "with_lora",
    "TargetParam",
    "TpuInferenceEngine",
    "TpuInferenceOptions",
    "local_write",
    "qwen3_plan",
]
