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
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import json
import math
import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

from absl import logging
from flax import nnx
from flax.linen import partitioning as nn_partitioning
import jax
from jax.experimental import multihost_utils
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec
import numpy as np
from tunix.rl import utils as rl_utils
from tunix.sft import utils as sft_utils

from tunix_mcjax import admission as admission_lib
from tunix_mcjax import compat
from tunix_mcjax import publication
from tunix_mcjax import runtime
from tunix_mcjax.registry import ENGINES

Role = compat.Role
Mode = compat.Mode

PHASES = ("admission", "generate", "reward", "logps", "train", "publish")


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
  """

  engine: str | None = None
  sampling_seed: int | None = None
  metrics_out: str | None = None
  log_progress: bool = True

  def __post_init__(self):
    if self.engine is not None and not isinstance(self.engine, str):
      raise TypeError(f"engine must be a registered name, got {self.engine!r}")


def _mesh_axis_size(mesh: Mesh, axes: tuple[str, ...]) -> int:
  return math.prod(mesh.shape[a] for a in axes)


def _same_mesh(a: Mesh, b: Mesh) -> bool:
  return a is b or (
      a.axis_names == b.axis_names
      and a.devices.shape == b.devices.shape
      and [d.id for d in a.devices.flat] == [d.id for d in b.devices.flat]
  )


class _StepClock:
  """Per-host phase timers for the current step."""

  def __init__(self):
    self.reset(time.perf_counter())

  def reset(self, now: float) -> None:
    self.start = now
    self.phases = {p: 0.0 for p in PHASES}
    self.reward_means: list[float] = []
    self.len_means: list[float] = []

  @contextlib.contextmanager
  def phase(self, name: str):
    t0 = time.perf_counter()
    try:
      yield
    finally:
      self.phases[name] += time.perf_counter() - t0


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
    self.options = options or McJaxOptions()
    self.num_hosts = jax.process_count()
    self.host_index = jax.process_index()
    self._check_supported(actor, critic, reward, cluster_config)
    self.global_mesh = cluster_config.role_to_mesh[Role.ACTOR]
    self.local_mesh = runtime.local_mesh(
        axis_names=self.global_mesh.axis_names
    )
    self.row_ids = admission_lib.RowIdTracker()
    self._admissions: list[admission_lib.Admission] = []
    rollout_cfg = cluster_config.rollout_config
    if isinstance(rollout_cfg, dict):
      rollout_cfg = rollout_cfg[Mode.TRAIN]

    # The engine's initial weights reach this host through the same
    # all-gather that publishes every later update.
    graphdef, full_state = nnx.split(actor)
    init_publisher = publication.Publisher(
        dst=publication.replicated_like(
            full_state, self.local_mesh, rollout_cfg.data_type
        ),
        local_mesh=self.local_mesh,
    )
    local_model = nnx.merge(graphdef, init_publisher(full_state))

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
    self._clock = _StepClock()
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
    engine_params = nnx.state(self.rollout.model(), self._param_filter)
    self.publisher = publication.Publisher(
        dst=engine_params, local_mesh=self.local_mesh
    )
    self.step_records: list[dict[str, Any]] = []
    self._metrics_file = None
    if self.options.metrics_out and self.host_index == 0:
      os.makedirs(
          os.path.dirname(os.path.abspath(self.options.metrics_out)),
          exist_ok=True,
      )
      self._metrics_file = open(self.options.metrics_out, "a")
    self._clock.reset(time.perf_counter())

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
        ),
        row_ids=self.row_ids,
    )
    self._admissions.append(adm)
    return adm.shard(global_batches)

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
      return super().generate(
          prompts,
          apply_chat_template=apply_chat_template,
          mode=mode,
          micro_batch_size=micro_batch_size,
          trace_tags=trace_tags,
          max_generation_steps=max_generation_steps,
      )

  def get_ref_per_token_logps(self, prompt_tokens, completion_tokens, pad_id,
                              eos_id, micro_batch_size=None):
    n = prompt_tokens.shape[0]
    if n == 0:
      raise ValueError("Cannot get reference log-probs of an empty batch.")
    temperature = self.get_rollout_config(mode=Mode.TRAIN).temperature
    outs = []
    with self._clock.phase("logps"), self._get_mesh_and_logical_axis_rules_cm(
        Role.REFERENCE
    ):
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

  def get_actor_per_token_logps(self, *args, **kwargs):
    raise NotImplementedError(
        "get_actor_per_token_logps is not supported by mcjax yet."
    )

  def update_actor(self, train_ds, eval_ds, skip_jit=False):
    to_global = lambda batch: [jax.tree.map(self._to_global, e) for e in batch]
    with self._clock.phase("train"):
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
    with self._clock.phase("publish"):
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
        self.rollout.update_params(self.publisher(src))
        compat.set_anchor_policy_state(
            self,
            rl_utils.put_params_on_memory_kind(
                nnx.state(self.actor_trainer.model), "pinned_host"
            ),
        )
    self.global_steps += 1
    self._end_step()

  # --- metrics -------------------------------------------------------------

  def _end_step(self) -> None:
    """One tiny all-gather of this step's numbers; host 0 reports them."""
    clock = self._clock
    now = time.perf_counter()
    admission_s = sum(a.admission_seconds() for a in self._admissions)
    clock.phases["admission"] = admission_s - getattr(
        self, "_admission_seen", 0.0
    )
    self._admission_seen = admission_s
    step_s = now - clock.start
    accounted = sum(v for k, v in clock.phases.items() if k != "reward")
    clock.phases["reward"] = max(0.0, step_s - accounted)
    local = np.array(
        [
            np.mean(clock.reward_means) if clock.reward_means else np.nan,
            np.mean(clock.len_means) if clock.len_means else np.nan,
            step_s,
            *[clock.phases[p] for p in PHASES],
        ],
        dtype=np.float64,
    )
    everyone = np.asarray(multihost_utils.process_allgather(local))
    everyone = everyone.reshape(self.num_hosts, -1)
    clock.reset(time.perf_counter())
    train = compat.last_train_metrics(self.actor_trainer)
    record = {
        "step": self.global_steps,
        "backend": "mcjax",
        "num_hosts": self.num_hosts,
        # Every host scores the same number of rows, so the global mean is the
        # mean of host means.
        "reward_mean": float(np.nanmean(everyone[:, 0])),
        "completion_len_mean": float(np.nanmean(everyone[:, 1])),
        "loss": train.get("loss"),
        "grad_norm": train.get("grad_norm"),
        "step_time_s": float(everyone[:, 2].max()),
        # Slowest host per phase: that is what the step waits for.
        "phases": {
            p: float(everyone[:, 3 + i].max()) for i, p in enumerate(PHASES)
        },
        "publish_bytes": self.publisher.last_stats.bytes,
    }
    self.step_records.append(record)
    if self.host_index != 0:
      return
    if self.options.log_progress:
      ph = record["phases"]
      print(
          f"[mcjax] step {record['step']}: reward {record['reward_mean']:.3f}"
          f" loss {record['loss'] if record['loss'] is None else round(record['loss'], 5)}"
          f" len {record['completion_len_mean']:.1f}"
          f" | {record['step_time_s']:.2f}s (gen {ph['generate']:.2f},"
          f" train {ph['train']:.2f}, publish {ph['publish']:.3f},"
          f" {record['publish_bytes'] / 2**20:.1f} MiB)",
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

  def close(self):
    super().close()
    if self._metrics_file is not None:
      self._metrics_file.close()
      self._metrics_file = None
