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

"""The mcjax backend: a colocated multi-controller RL cluster for Tunix.

`McJaxRLCluster` is a drop-in `RLCluster` for one-process-per-host JAX. The
stock `GRPOLearner` runs on top of it unchanged; per step, on every host:

  admission (this host's prompts) -> generate on the host-local engine ->
  rewards and group advantages (learner, local rows) -> reference log-probs
  and the FSDP train step over all hosts (global arrays built explicitly) ->
  publication of the new weights into every host's engine.

Multi-controller discipline: every host issues the same global programs in
the same order (the learner's data path is identical on every host, and the
only cross-host programs are the train step, log-prob passes, publication and
one tiny metrics all-gather per step, all on the learner's main sequence);
host-local work (generation) runs under the host's local mesh only.

Step anatomy (metrics): every host times its phases (admission, generate,
reward, logps, train, publish), its host overheads (metrics export, garbage
collection), its decode iterations, and how long it spent in each cross-host
call (reference log-probs, train step, publication). Since every host runs
the same program in a cross-host call, the host that spent the least time in
it arrived last; another host's excess over that minimum is the time it
waited for the slowest host (no clocks are compared across hosts). One tiny
all-gather per step brings every host's numbers to host 0, which reports the
slowest host's phases (the one with the most time not spent waiting), the
longest wait at each cross-host point, and the step totals.

The host-side optimizations O1-O4 (`host_optimizations.HostOptimizations`)
are switched in `McJaxOptions.optimizations`.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import json
import math
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from flax import nnx
from flax.linen import partitioning as nn_partitioning
import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec
import numpy as np
from tunix.rl import utils as rl_utils
from tunix.sft import utils as sft_utils

from tunix_mcjax import admission as admission_lib
from tunix_mcjax import compat
from tunix_mcjax.engines import base as engine_base
from tunix_mcjax import host_optimizations
from tunix_mcjax import publication
from tunix_mcjax import runtime
from tunix_mcjax.registry import ENGINES

Role = compat.Role
Mode = compat.Mode

PHASES = ("admission", "generate", "reward", "logps", "train", "publish")
# Cross-host points of a step (global programs every host joins).
CROSS_HOST_POINTS = ("logps", "train", "publish")
# Host work outside the phases: exporting the previous step's metrics, and
# the end-of-step garbage collection.
HOST_OVERHEADS = ("metrics_export", "gc")
# Per-host numbers gathered at each step end, in this order.
_FIELDS = (
    "reward_mean",
    "len_mean",
    "step_s",
    *(f"phase/{p}" for p in PHASES),
    *(f"in_xhost/{p}" for p in CROSS_HOST_POINTS),
    *(f"overhead/{o}" for o in HOST_OVERHEADS),
    "gen_rows",
    "gen_tokens",
    "gen_max_len",
    "gen_truncated",
    "decode_iterations",
    "prompt_tokens",
    "publish_calls",
    "gc_explicit",
    "gc_skipped",
    "gc_frozen",
    "gc_full_collections",
)
_F = {name: i for i, name in enumerate(_FIELDS)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class McJaxOptions:
  """Options of the mcjax backend beyond Tunix's ClusterConfig.

  Attributes:
    engine: registered engine name for the host-local rollout (e.g. "native").
      None picks it from `ClusterConfig.rollout_engine` ("vanilla" means the
      native engine).
    sampling_seed: base seed of per-row sampling keys; None uses the rollout
      config's seed (or 0).
    metrics_out: JSONL file that host 0 appends one object per step to.
    log_progress: print a progress line per step on host 0.
    optimizations: the host-side optimizations O1-O4 (see
      `host_optimizations.PROFILES` for "base" and "optimized").
    trace_steps: steps (1-based) to record a JAX profiler trace of, into
      `trace_dir`/host<i> on every host.
    trace_dir: where traces go; required with `trace_steps`.
    engine_model: the engine's own architecture and the mapping into it,
      when the actor cannot sample itself (e.g. a MaxText actor; see
      `maxtext_models.engine_model_spec`). None: engines run a copy of the
      actor.
  """

  engine: str | None = None
  sampling_seed: int | None = None
  metrics_out: str | None = None
  log_progress: bool = True
  optimizations: host_optimizations.HostOptimizations = dataclasses.field(
      default_factory=host_optimizations.HostOptimizations
  )
  trace_steps: tuple[int, ...] = ()
  trace_dir: str | None = None
  engine_model: engine_base.EngineModelSpec | None = None

  def __post_init__(self):
    if self.engine is not None and not isinstance(self.engine, str):
      raise TypeError(f"engine must be a registered name, got {self.engine!r}")
    if not isinstance(
        self.optimizations, host_optimizations.HostOptimizations
    ):
      raise TypeError(
          "optimizations must be a HostOptimizations, got"
          f" {self.optimizations!r}."
      )
    if any(
        not isinstance(k, int) or isinstance(k, bool) or k < 1
        for k in self.trace_steps
    ):
      raise ValueError(
          f"trace_steps must be step numbers >= 1, got {self.trace_steps}."
      )
    if self.trace_steps and not self.trace_dir:
      raise ValueError("trace_steps needs trace_dir.")
    if self.engine_model is not None and not isinstance(
        self.engine_model, engine_base.EngineModelSpec
    ):
      raise TypeError(
          f"engine_model must be an EngineModelSpec, got {self.engine_model!r}."
      )


def _mesh_axis_size(mesh: Mesh, axes: tuple[str, ...]) -> int:
  return math.prod(mesh.shape[a] for a in axes)


def _same_mesh(a: Mesh, b: Mesh) -> bool:
  return a is b or (
      a.axis_names == b.axis_names
      and a.devices.shape == b.devices.shape
      and [d.id for d in a.devices.flat] == [d.id for d in b.devices.flat]
  )


def generation_stats(
    output: Any, *, micro_batch_size: int | None, max_tokens: int
) -> dict[str, int]:
  """Row, token, truncation and decode-iteration counts of one generate call.

  The engines' decode loops stop when every row of a call is done, so a call
  runs as many decode iterations as its longest completion; with
  micro-batching, each micro-batch is one call.

  Args:
    output: a `RolloutOutput` (its `tokens`: one token sequence per row).
    micro_batch_size: the micro-batch the cluster generated with, or None.
    max_tokens: the completion budget; a row that used all of it counts as
      truncated.

  Returns:
    {"rows", "tokens", "max_len", "truncated", "decode_iterations"}.
  """
  lens = [len(t) for t in output.tokens]
  step = micro_batch_size or max(len(lens), 1)
  return {
      "rows": len(lens),
      "tokens": int(sum(lens)),
      "max_len": int(max(lens, default=0)),
      "truncated": int(sum(n >= max_tokens for n in lens)),
      "decode_iterations": int(sum(
          max(lens[i:i + step], default=0) for i in range(0, len(lens), step)
      )),
  }


class StepClock:
  """Per-host timers and counters of the current step (also used to time
  the stock cluster side by side: grpo_job._StockStepClock)."""

  def __init__(self):
    self.reset(time.perf_counter())

  def reset(self, now: float) -> None:
    self.start = now
    self.phases = {p: 0.0 for p in PHASES}
    self.in_cross_host = {p: 0.0 for p in CROSS_HOST_POINTS}
    self.overhead = {o: 0.0 for o in HOST_OVERHEADS}
    self.gen = {k: 0 for k in ("rows", "tokens", "max_len", "truncated",
                               "decode_iterations")}
    self.publish_calls = 0
    self.reward_means: list[float] = []
    self.len_means: list[float] = []

  @contextlib.contextmanager
  def phase(self, name: str, cross_host: str | None = None):
    """Times a phase; `cross_host` also names the cross-host call inside."""
    t0 = time.perf_counter()
    try:
      yield
    finally:
      dt = time.perf_counter() - t0
      self.phases[name] += dt
      if cross_host is not None:
        self.in_cross_host[cross_host] += dt

  def add_generation(self, stats: Mapping[str, int]) -> None:
    for k in ("rows", "tokens", "truncated", "decode_iterations"):
      self.gen[k] += stats[k]
    self.gen["max_len"] = max(self.gen["max_len"], stats["max_len"])


def _is_maxtext_actor(actor: Any) -> bool:
  return type(actor).__name__ == "TunixMaxTextAdapter" and hasattr(
      actor, "base"
  )


class McJaxRLCluster(compat.RLCluster):
  """Tunix RLCluster for one process per host (multi-controller JAX).

  Takes the same keyword arguments as `RLCluster`, with every role on the same
  global mesh (the trainer mesh over all hosts' devices, e.g.
  `runtime.global_mesh()`), plus `options`. Batch-size knobs of
  `cluster_config.training_config` are global, as in a single-controller
  recipe: each host's learner gets 1/H of each (checked to divide).
  """

  def __init__(
      self,
      *,
      actor: nnx.Module,
      critic: Any = None,
      reference: nnx.Module | None = None,
      reward: Any = None,
      tokenizer: Any,
      cluster_config: compat.ClusterConfig,
      perf_config: Any = None,
      options: McJaxOptions | None = None,
  ):
    compat.install_fixes()
    self.options = options or McJaxOptions()
    self.num_hosts = jax.process_count()
    self.host_index = jax.process_index()
    self._check_supported(actor, critic, reward, cluster_config)
    self.global_mesh = cluster_config.role_to_mesh[Role.ACTOR]
    spec = self.options.engine_model
    if spec is None and _is_maxtext_actor(actor):
      # A MaxText Transformer cannot sample: engines run Tunix's Qwen3 and
      # publication maps the MaxText parameters into it.
      from tunix_mcjax.maxtext import models as maxtext_models  # pylint: disable=g-import-not-at-top

      spec = maxtext_models.engine_model_spec(
          actor.base.config, dtype=jnp.dtype(actor.base.config.weight_dtype)
      )
    self.local_mesh = runtime.local_mesh(
        axis_names=(
            self.global_mesh.axis_names if spec is None else spec.axis_names
        )
    )
    self.row_ids = admission_lib.RowIdTracker()
    self._admissions: list[admission_lib.Admission] = []
    rollout_cfg = cluster_config.rollout_config
    if isinstance(rollout_cfg, dict):
      rollout_cfg = rollout_cfg[Mode.TRAIN]

    # The engine's initial weights reach this host through the same
    # all-gather that publishes every later update.
    if spec is None:
      graphdef, full_state = nnx.split(actor)
      init_publisher = publication.Publisher(
          dst=publication.replicated_like(
              full_state, self.local_mesh, rollout_cfg.data_type
          ),
          local_mesh=self.local_mesh,
      )
      local_model = nnx.merge(graphdef, init_publisher(full_state))
    else:
      local_model = publication.build_engine_model(
          spec, nnx.state(actor, nnx.Param), self.local_mesh,
          rollout_cfg.data_type,
      )

    engine_name = self.options.engine
    if engine_name is None:
      engine_name = cluster_config.rollout_engine
      if engine_name == "vanilla":
        engine_name = "native"
    if not isinstance(engine_name, str):
      raise ValueError(
          "Under mcjax the rollout engine is chosen by name (one of"
          f" {ENGINES.names()}), got {cluster_config.rollout_engine!r}."
      )
    import tunix_mcjax.engines  # pylint: disable=g-import-not-at-top,unused-import

    engine_factory = functools.partial(
        ENGINES.get(engine_name),
        engine_mesh=self.local_mesh,
        row_ids=self.row_ids,
        seed=self.options.sampling_seed,
        initial_model=local_model,
    )
    del local_model
    local_cfg = dataclasses.replace(
        cluster_config,
        role_to_mesh=dict(cluster_config.role_to_mesh),
        rollout_engine=engine_factory,
        training_config=self._per_host_training_config(
            cluster_config.training_config
        ),
    )
    self._clock = StepClock()
    with compat.key_safe_memory_moves():
      super().__init__(
          actor=actor,
          critic=critic,
          reference=reference,
          reward=reward,
          tokenizer=tokenizer,
          cluster_config=local_cfg,
          perf_config=perf_config,
      )
    self._param_filter = nnx.Param
    target = self.rollout.publication_target()
    self.publisher = publication.Publisher(
        dst=target,
        local_mesh=self.local_mesh,
        mapping=None if spec is None else spec.mapping,
    )
    # Nested-dict paths of the engine parameters in publication order, for
    # the per-parameter (O4 baseline) engine update calls.
    self._param_paths = [
        tuple(getattr(k, "key", getattr(k, "idx", k)) for k in path)
        for path, _ in jax.tree_util.tree_flatten_with_path(
            nnx.to_pure_dict(target)
            if isinstance(target, nnx.State) else target
        )[0]
    ]
    if len(self._param_paths) != len(self.publisher.names):
      raise ValueError(
          "The engine's publication target does not flatten to one path per"
          " parameter."
      )
    self.step_records: list[dict[str, Any]] = []
    self._metrics_file = None
    if self.options.metrics_out and self.host_index == 0:
      os.makedirs(
          os.path.dirname(os.path.abspath(self.options.metrics_out)),
          exist_ok=True,
      )
      self._metrics_file = open(self.options.metrics_out, "a")
    opts = self.options.optimizations
    self.exporter = host_optimizations.MetricsExporter(
        asynchronous=opts.async_metrics
    )
    self.gc_policy = host_optimizations.GcPolicy(freeze=opts.freeze_gc)
    # After RLCluster.__init__, whose one-off collect stays as it is.
    self.gc_policy.start()
    self._gather_fn = None
    self._gather_sharding = None
    self._tracing = False
    self._closed = False
    self._admission_seen = 0.0
    self._start_step_clock()

  # --- validation and configuration -----------------------------------------

  def _check_supported(self, actor, critic, reward, cfg) -> None:
    if critic is not None or reward is not None:
      raise NotImplementedError(
          "mcjax supports GRPO-style learners (actor + optional reference);"
          " critic and reward models are not supported yet."
      )
    if not isinstance(actor, nnx.Module):
      raise TypeError("mcjax needs the actor as an nnx.Module.")
    if sft_utils.is_lora_enabled(actor):
      raise NotImplementedError("mcjax does not publish LoRA actors yet.")
    if cfg.offload_to_cpu:
      raise ValueError(
          "offload_to_cpu is not supported by mcjax; set it to False."
      )
    r2m = cfg.role_to_mesh
    mesh = r2m.get(Role.ACTOR)
    if mesh is None:
      raise ValueError("cluster_config.role_to_mesh needs an ACTOR mesh.")
    for role in (Role.ROLLOUT, Role.REFERENCE):
      if role in r2m and not _same_mesh(r2m[role], mesh):
        raise ValueError(
            f"mcjax is colocated: the {role.value} mesh must be the same"
            " global mesh as the actor's (every host generates on its own"
            " devices; disjoint trainer/rollout meshes are the"
            " disaggregated mode)."
        )
    devices = [d.id for d in mesh.devices.flat]
    expected = [d.id for d in runtime.host_contiguous_devices()]
    if devices != expected:
      raise ValueError(
          "The actor mesh must span every device of every host, host by host"
          " (use tunix_mcjax.runtime.global_mesh()); got device ids"
          f" {devices[:8]}..., expected {expected[:8]}..."
      )
    data_axes = tuple(cfg.training_config.data_sharding_axis)
    for a in data_axes:
      if a not in mesh.axis_names:
        raise ValueError(
            f"data_sharding_axis {data_axes} names axis {a!r}, which the mesh"
            f" {mesh.axis_names} lacks."
        )
    if cfg.training_config.max_seq_token_per_tpu is not None:
      raise NotImplementedError(
          "Sequence packing (max_seq_token_per_tpu) is not supported by mcjax"
          " yet; unset it."
      )

  def _per_host_training_config(self, tc: Any) -> Any:
    """Global batch knobs -> this host's share (the learner reads per host)."""
    h = self.num_hosts
    local = copy.copy(tc)
    for name in (
        "mini_batch_size",
        "train_micro_batch_size",
        "rollout_micro_batch_size",
        "compute_logps_micro_batch_size",
    ):
      value = getattr(tc, name)
      if value is None:
        continue
      if value % h:
        raise ValueError(
            f"training_config.{name}={value} is global and must divide over"
            f" {h} hosts; use a multiple of {h}."
        )
      setattr(local, name, value // h)
    return local

  # --- admission -----------------------------------------------------------

  def shard_dataset(
      self,
      global_batches: Iterable[Mapping[str, Any]],
      *,
      num_generations: int,
  ) -> admission_lib.ShardedDataset:
    """This host's share of each global batch (call on every host)."""
    tc = self.cluster_config.training_config
    chunk = tc.train_micro_batch_size or tc.mini_batch_size
    adm = admission_lib.Admission(
        admission_lib.AdmissionConfig(
            num_hosts=self.num_hosts,
            host_index=self.host_index,
            num_generations=num_generations,
            chunk_size=chunk,
            balance_by_length=(
                self.options.optimizations.balance_admission
            ),
            update_size=tc.mini_batch_size,
        ),
        row_ids=self.row_ids,
        # Token counts, so admission time includes tokenizing the prompts.
        length_fn=self._prompt_lengths,
    )
    self._admissions.append(adm)
    return adm.shard(global_batches)

  def _prompt_lengths(self, prompts: Sequence[str]) -> list[int]:
    return [len(self.tokenizer.encode(p)) for p in prompts]

  # --- role contexts -------------------------------------------------------

  @contextlib.contextmanager
  def _get_mesh_and_logical_axis_rules_cm(self, role):
    if role != Role.ROLLOUT:
      with super()._get_mesh_and_logical_axis_rules_cm(role) as out:
        yield out
      return
    # Host-local work: only this host's devices, never the global mesh.
    rules = self.cluster_config.role_to_logical_axis_rule
    rules_cm = (
        nn_partitioning.axis_rules(rules[role])
        if rules and role in rules
        else contextlib.nullcontext()
    )
    with contextlib.ExitStack() as stack:
      yield (
          stack.enter_context(self.local_mesh),
          stack.enter_context(rules_cm),
      )

  # --- global arrays from this host's rows -----------------------------------

  def _data_sharding(self) -> NamedSharding:
    axes = tuple(self.cluster_config.training_config.data_sharding_axis)
    return NamedSharding(self.global_mesh, PartitionSpec(axes))

  def _to_global(self, x: Any) -> Any:
    """This host's rows -> one global array sharded over the data axes."""
    if x is None or not hasattr(x, "shape") or x.ndim == 0:
      return x
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
      return x
    sharding = self._data_sharding()
    axes = tuple(self.cluster_config.training_config.data_sharding_axis)
    per_host = _mesh_axis_size(self.global_mesh, axes) // self.num_hosts
    if per_host == 0 or x.shape[0] % per_host:
      # Tunix's shard_input would silently fall back to a replicated array
      # here, i.e. treat different hosts' rows as one value.
      raise ValueError(
          f"This host has {x.shape[0]} rows, not a multiple of its"
          f" {per_host} data-parallel devices; choose batch sizes (prompts x"
          " num_generations per host and per micro-batch) that divide."
      )
    with jax.transfer_guard("allow"):
      return jax.make_array_from_process_local_data(sharding, np.asarray(x))

  @staticmethod
  def _local_rows(x: jax.Array) -> np.ndarray:
    """This host's rows of a global array sharded over the leading axis."""
    if x.is_fully_addressable:
      return np.asarray(x)
    seen = {}
    for s in x.addressable_shards:
      start = s.index[0].start or 0
      if start not in seen:
        seen[start] = np.asarray(s.data)
    return np.concatenate([seen[k] for k in sorted(seen)], axis=0)

  # --- the learner's calls ---------------------------------------------------

  def generate(self, prompts, apply_chat_template=False, mode=Mode.TRAIN,
               micro_batch_size=None, trace_tags=None,
               max_generation_steps=None):
    with self._clock.phase("generate"):
      out = super().generate(
          prompts,
          apply_chat_template=apply_chat_template,
          mode=mode,
          micro_batch_size=micro_batch_size,
          trace_tags=trace_tags,
          max_generation_steps=max_generation_steps,
      )
    if mode == Mode.TRAIN:
      self._clock.add_generation(generation_stats(
          out,
          micro_batch_size=micro_batch_size,
          max_tokens=(
              max_generation_steps
              or self.get_rollout_config(mode).max_tokens_to_generate
          ),
      ))
    return out

  def get_ref_per_token_logps(self, prompt_tokens, completion_tokens, pad_id,
                              eos_id, micro_batch_size=None):
    n = prompt_tokens.shape[0]
    if n == 0:
      raise ValueError("Cannot get reference log-probs of an empty batch.")
    temperature = self.get_rollout_config(mode=Mode.TRAIN).temperature
    outs = []
    with self._clock.phase(
        "logps", cross_host="logps"
    ), self._get_mesh_and_logical_axis_rules_cm(Role.REFERENCE):
      for sl in rl_utils.chunk_slices_by_size(
          stop=n, step=micro_batch_size or n
      ):
        out = self.inference_worker.get_ref_per_token_logps(
            self._to_global(np.asarray(prompt_tokens[sl])),
            self._to_global(np.asarray(completion_tokens[sl])),
            pad_id,
            eos_id,
            temperature=temperature,
        )
        outs.append(self._local_rows(out))
    return jnp.asarray(np.concatenate(outs, axis=0))

  def get_old_per_token_logps(self, prompt_tokens, completion_tokens,
                              micro_batch_size=None):
    # The local engine holds the policy that sampled; rows stay local.
    with self._clock.phase("logps"):
      return super().get_old_per_token_logps(
          prompt_tokens, completion_tokens, micro_batch_size=micro_batch_size
      )

  # Tunix's stock sync_weights also snapshots the whole policy into host
  # memory every step (`_anchor_policy_state`); only this method reads that
  # snapshot, so mcjax refreshes none while it is refused.
  def get_actor_per_token_logps(self, *args, **kwargs):
    raise NotImplementedError(
        "get_actor_per_token_logps is not supported by mcjax yet."
    )

  def update_actor(self, train_ds, eval_ds, skip_jit=False):
    to_global = lambda batch: [jax.tree.map(self._to_global, e) for e in batch]
    with self._clock.phase("train", cross_host="train"):
      super().update_actor(
          to_global(train_ds),
          to_global(eval_ds) if eval_ds else eval_ds,
          skip_jit,
      )
      jax.block_until_ready(nnx.state(self.actor_trainer.model))

  def buffer_metrics(self, metrics, mode=Mode.TRAIN):
    if mode == Mode.TRAIN:
      if "rewards/score/mean" in metrics:
        self._clock.reward_means.append(
            float(metrics["rewards/score/mean"][0])
        )
      if "completions/mean_length" in metrics:
        self._clock.len_means.append(
            float(metrics["completions/mean_length"][0])
        )
    return super().buffer_metrics(metrics, mode=mode)

  def sync_weights(self):
    """Publishes the trainer's weights into every host's engine."""
    with self._clock.phase("publish", cross_host="publish"):
      guard = contextlib.ExitStack()
      if jax.default_backend() == "cpu":
        # As in stock Tunix: publication must not round-trip through the host.
        guard.enter_context(
            jax.transfer_guard_device_to_host("disallow_explicit")
        )
        guard.enter_context(
            jax.transfer_guard_host_to_device("disallow_explicit")
        )
      with guard:
        src = nnx.state(self.actor_trainer.model, self._param_filter)
        if self.options.optimizations.publish_in_one_call:
          # O4: one all-gather program and one engine update for all weights.
          self.rollout.update_params(self.publisher(src))
          self._clock.publish_calls += 1
        else:
          self._clock.publish_calls += self.publisher.publish_each(
              src, self._update_one_param
          )
    self.global_steps += 1
    self._clock.overhead["gc"] += self.gc_policy.after_step(self.global_steps)
    self._end_step()

  def _update_one_param(self, index: int, value: jax.Array) -> None:
    """One engine update call carrying one parameter (O4 baseline)."""
    tree = value
    for key in reversed(self._param_paths[index]):
      tree = {key: tree}
    self.rollout.update_params(tree, filter_types=(self._param_filter,))

  # --- metrics -------------------------------------------------------------

  def _start_step_clock(
      self, start: float | None = None, carried_export_s: float = 0.0
  ) -> None:
    """Starts timing the next step (and its trace, if it is to be traced).

    Args:
      start: when the next step began (the previous step's end, so that
        steps tile the timeline); default now.
      carried_export_s: time since `start` spent exporting the previous
        step's metrics: host work of the new step.
    """
    self._clock.reset(time.perf_counter() if start is None else start)
    self._clock.overhead["metrics_export"] = carried_export_s
    steps = self.options.trace_steps
    if steps and not self._tracing and self.global_steps + 1 in steps:
      jax.profiler.start_trace(
          os.path.join(self.options.trace_dir, f"host{self.host_index}")
      )
      self._tracing = True
    self._gc_at_start = (
        self.gc_policy.explicit_collects,
        self.gc_policy.skipped_collects,
        host_optimizations.full_collections(),
    )

  def _local_numbers(self, step_s: float, prompt_tokens: int) -> np.ndarray:
    clock = self._clock
    explicit0, skipped0, full0 = self._gc_at_start
    values = {
        "reward_mean": (
            np.mean(clock.reward_means) if clock.reward_means else np.nan
        ),
        "len_mean": np.mean(clock.len_means) if clock.len_means else np.nan,
        "step_s": step_s,
        **{f"phase/{p}": clock.phases[p] for p in PHASES},
        **{f"in_xhost/{p}": clock.in_cross_host[p] for p in CROSS_HOST_POINTS},
        **{f"overhead/{o}": clock.overhead[o] for o in HOST_OVERHEADS},
        "gen_rows": clock.gen["rows"],
        "gen_tokens": clock.gen["tokens"],
        "gen_max_len": clock.gen["max_len"],
        "gen_truncated": clock.gen["truncated"],
        "decode_iterations": clock.gen["decode_iterations"],
        "prompt_tokens": prompt_tokens,
        "publish_calls": clock.publish_calls,
        "gc_explicit": self.gc_policy.explicit_collects - explicit0,
        "gc_skipped": self.gc_policy.skipped_collects - skipped0,
        "gc_frozen": float(self.gc_policy.frozen),
        "gc_full_collections": host_optimizations.full_collections() - full0,
    }
    # float32: what the gather carries; ample for seconds and counts here.
    return np.array([values[f] for f in _FIELDS], dtype=np.float32)

  def _dispatch_gather(self, local: np.ndarray) -> jax.Array:
    """Starts the all-gather of every host's numbers; does not wait for it.

    Every host calls this at the same point of its step sequence, so the
    collective is issued in the same order everywhere.
    """
    if self._gather_fn is None:
      view = publication.host_view_mesh(self.local_mesh)
      self._gather_sharding = NamedSharding(
          view, PartitionSpec(view.axis_names)
      )
      self._gather_fn = jax.jit(
          lambda x: x, out_shardings=NamedSharding(view, PartitionSpec())
      )
    rows = np.ascontiguousarray(
        np.broadcast_to(local, (self.local_mesh.size, local.size))
    )
    with jax.transfer_guard("allow"):
      return self._gather_fn(
          jax.make_array_from_process_local_data(self._gather_sharding, rows)
      )

  def _end_step(self) -> None:
    """Per-step metrics: one tiny all-gather; host 0 reports.

    Off the barrier (O1, `async_metrics`): the all-gather is dispatched
    without waiting for it, and reading its result (which waits for the
    slowest host), building the record, printing and writing happen on the
    exporter thread; the step goes on at once. Without O1, every host waits
    here for the gathered numbers and host 0 writes them before the next
    step starts. Either way, the next step's clock starts now, and the time
    the main thread spends here is its `host_overhead.metrics_export`.
    """
    clock = self._clock
    step = self.global_steps
    now = time.perf_counter()
    admission_s = sum(a.admission_seconds() for a in self._admissions)
    clock.phases["admission"] = admission_s - self._admission_seen
    self._admission_seen = admission_s
    batch = None
    for adm in self._admissions:
      batch = batch or adm.pop_batch_stats()
    step_s = now - clock.start
    accounted = sum(v for k, v in clock.phases.items() if k != "reward")
    accounted += sum(clock.overhead.values())
    # Learner host work between the timed calls: rewards, advantages,
    # batching, Tunix's own metric buffering.
    clock.phases["reward"] = max(0.0, step_s - accounted)
    local = self._local_numbers(
        step_s, batch.prompt_tokens if batch is not None else -1
    )
    train = compat.last_train_metrics(self.actor_trainer)
    meta = {
        "step": step,
        "loss": train.get("loss"),
        "grad_norm": train.get("grad_norm"),
        "prompts_digest": batch.digest if batch is not None else None,
        "publish_bytes": self.publisher.last_stats.bytes,
    }
    gathered = self._dispatch_gather(local)
    self.exporter.submit(functools.partial(self._export, gathered, meta))
    export_s = time.perf_counter() - now
    if self._tracing and step + 1 not in self.options.trace_steps:
      jax.profiler.stop_trace()  # Traced steps are for reading, not timing.
      self._tracing = False
    self._start_step_clock(start=now, carried_export_s=export_s)

  def _record(
      self, everyone: np.ndarray, meta: Mapping[str, Any]
  ) -> dict[str, Any]:
    """The step's record from every host's numbers (rows: hosts)."""
    col = lambda name: everyone[:, _F[name]].astype(np.float64)
    in_call = np.stack(
        [col(f"in_xhost/{p}") for p in CROSS_HOST_POINTS], axis=1
    )
    # Same program on every host: time in a cross-host call beyond the
    # least any host spent there is waiting for the slowest host.
    waits = in_call - in_call.min(axis=0, keepdims=True)
    busy = col("step_s") - waits.sum(axis=1)
    slow = int(np.argmax(busy))
    rows = float(col("gen_rows").sum())
    gen_s = col("phase/generate")
    iters = col("decode_iterations")
    per_iter = np.where(iters > 0, gen_s / np.maximum(iters, 1), np.nan)
    opts = self.options.optimizations
    return {
        "step": meta["step"],
        "backend": "mcjax",
        "num_hosts": self.num_hosts,
        # Every host scores the same number of rows, so the global mean is the
        # mean of host means.
        "reward_mean": float(np.nanmean(col("reward_mean"))),
        "completion_len_mean": float(np.nanmean(col("len_mean"))),
        "completion_len_max": int(col("gen_max_len").max()),
        "completion_tokens": int(col("gen_tokens").sum()),
        "truncated_share": (
            float(col("gen_truncated").sum() / rows) if rows else None
        ),
        "loss": meta["loss"],
        "grad_norm": meta["grad_norm"],
        # The slowest host's step and phases (the phases add up to it; the
        # hosts' own step clocks differ by when each left the last
        # collective, not by work).
        "step_time_s": float(col("step_s")[slow]),
        "phases": {p: float(col(f"phase/{p}")[slow]) for p in PHASES},
        "host_overhead": {
            o: float(col(f"overhead/{o}")[slow]) for o in HOST_OVERHEADS
        },
        "slowest_host": slow,
        # Longest wait of any host at each cross-host point.
        "straggler_wait": {
            **{p: float(waits[:, i].max())
               for i, p in enumerate(CROSS_HOST_POINTS)},
            "total": float(waits.sum(axis=1).max()),
        },
        "decode_iterations": int(iters.max()),
        # Generation time / decode iterations (prefill and tokenization
        # included): the engines decode in one jitted loop.
        "decode_iter_s": (
            float(np.nanmax(per_iter)) if np.isfinite(per_iter).any()
            else None
        ),
        "host_prompt_tokens": [int(x) for x in col("prompt_tokens")],
        "prompts_digest": meta["prompts_digest"],
        "publish_bytes": meta["publish_bytes"],
        "publish_calls": int(col("publish_calls").max()),
        "gc": {
            "explicit_collects": int(col("gc_explicit").max()),
            "skipped_collects": int(col("gc_skipped").max()),
            "frozen": bool(col("gc_frozen").min() > 0),
            "full_collections": int(col("gc_full_collections").max()),
        },
        "optimizations": opts.as_dict(),
    }

  def _export(self, gathered: jax.Array, meta: Mapping[str, Any]) -> None:
    """Builds the step's record; host 0 prints, writes and logs it."""
    flat = np.asarray(gathered.addressable_data(0))
    # Rows are devices, host by host; each host's rows are equal.
    everyone = flat.reshape(self.num_hosts, -1, flat.shape[-1])[:, 0, :]
    record = self._record(everyone, meta)
    # Evidence of where the export ran ("MainThread" unless O1 is on).
    record["exported_on"] = threading.current_thread().name
    self.step_records.append(record)
    if self.host_index != 0:
      return
    if self.options.log_progress:
      ph = record["phases"]
      loss = record["loss"]
      print(
          f"[mcjax] step {record['step']}: reward {record['reward_mean']:.3f}"
          f" loss {loss if loss is None else round(loss, 5)}"
          f" len {record['completion_len_mean']:.1f}"
          f" | {record['step_time_s']:.2f}s (gen {ph['generate']:.2f},"
          f" train {ph['train']:.2f}, publish {ph['publish']:.3f},"
          f" {record['publish_bytes'] / 2**20:.1f} MiB, wait"
          f" {record['straggler_wait']['total']:.3f})",
          flush=True,
      )
    if self._metrics_file is not None:
      self._metrics_file.write(json.dumps(record) + "\n")
      self._metrics_file.flush()
    logger = compat.metrics_logger(self)
    for k in ("reward_mean", "completion_len_mean", "step_time_s"):
      logger.log("mcjax", k, record[k], "train", record["step"])
    for p, v in record["phases"].items():
      logger.log("mcjax", f"phase/{p}", v, "train", record["step"])
    logger.log("mcjax", "straggler_wait", record["straggler_wait"]["total"],
               "train", record["step"])

  def _log_metrics(self, metrics_buffer):
    # Tunix's own per-step metric logging goes through the exporter too: on
    # its thread under O1, inline (as stock) otherwise.
    self.exporter.submit(
        functools.partial(super()._log_metrics, metrics_buffer)
    )

  def flush_metrics(self) -> None:
    """Waits until every finished step's metrics are exported."""
    self.exporter.flush()

  def close(self):
    if self._closed:
      return
    self._closed = True
    try:
      super().close()
    finally:
      try:
        # Nothing is lost at exit: every queued record is written first.
        self.exporter.close()
      finally:
        if self._tracing:
          jax.profiler.stop_trace()
          self._tracing = False
        self.gc_policy.stop()
        if self._metrics_file is not None:
          self._metrics_file.close()
          self._metrics_file = None
