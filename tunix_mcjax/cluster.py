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
only cross-host programs are the train step, log-prob passes, publication,
one tiny metrics all-gather per step and one per learner metrics buffer that
Tunix logs (`telemetry.learner_metrics`), all on the learner's main sequence);
host-local work (generation) runs under the host's local mesh only.

Per-step metrics (`telemetry`): every host times its step; one tiny
all-gather per step brings every host's numbers to host 0, which reports the
slowest host's phases and the straggler waits. Admission and the engine meet
in an `admission.StepLedger`: admission records each batch's rows, the engine
takes their identities, and each step end closes one batch.

Host-side optimizations O1-O4: `McJaxOptions.optimizations`. Beside this
module: the options (`cluster_options`), this host's rows as global arrays
(`global_rows`), what is published into the engine (`engine_weights`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import socket
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from flax import nnx
from flax.linen import partitioning as nn_partitioning
import jax
import jax.numpy as jnp
from tunix.rl import utils as rl_utils
from tunix.sft import utils as sft_utils

from tunix_mcjax import admission as admission_lib
from tunix_mcjax import agent_turns
from tunix_mcjax import checkpointing
from tunix_mcjax import cluster_options
from tunix_mcjax import compat
from tunix_mcjax import engine_weights
from tunix_mcjax.engines import base as engine_base
from tunix_mcjax import global_rows
from tunix_mcjax import host_optimizations
from tunix_mcjax import packing
from tunix_mcjax import runtime
from tunix_mcjax import rules
from tunix_mcjax import step_watchdog
from tunix_mcjax import telemetry
from tunix_mcjax.telemetry import learner_metrics
from tunix_mcjax import transfers
from tunix_mcjax.registry import ENGINES

Role = compat.Role
Mode = compat.Mode
# The options live in their own module; callers name them here too.
McJaxOptions = cluster_options.McJaxOptions


class McJaxRLCluster(compat.RLCluster):
  """Tunix RLCluster for one process per host (multi-controller JAX).

  Takes the same keyword arguments as `RLCluster`, with every role on the same
  global mesh (the trainer mesh over all hosts' devices, e.g.
  `runtime.global_mesh()`), plus `options`. Batch-size knobs of
  `cluster_config.training_config` are global, as in a single-controller
  recipe: each host's learner gets 1/H of each (checked to divide).
  """

  # The step records' `backend`.
  backend_name = "mcjax"
  agent_turn_lag: int | None = None  # mcjax_da's off-policy bound.

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
    # Tunix fixes for this cluster's lifetime: undone in close(), or at once
    # if the cluster cannot be built.
    self._compat_fixes = compat.install_fixes()
    try:
      self._build(
          actor=actor, critic=critic, reference=reference, reward=reward,
          tokenizer=tokenizer, cluster_config=cluster_config,
          perf_config=perf_config, options=options,
      )
    except BaseException:
      self._compat_fixes.undo()
      raise

  def _build(self, *, actor, critic, reference, reward, tokenizer,
             cluster_config, perf_config, options) -> None:
    """The constructor's work, between installing and undoing the fixes."""
    self.options = options or McJaxOptions()
    self.num_hosts = jax.process_count()
    self.host_index = jax.process_index()
    self._check_supported(actor, critic, reward, cluster_config)
    self.global_mesh = cluster_config.role_to_mesh[Role.ACTOR]
    spec = self.options.engine_model
    # The host's engine mesh: data parallelism over its first axes, engine
    # tensor parallelism (McJaxOptions.engine_tp) over its last.
    self.local_mesh = runtime.local_mesh(
        axis_names=(
            self.global_mesh.axis_names if spec is None else spec.axis_names
        ),
        tp=self.options.engine_tp,
    )
    # Admission writes each batch here; the engine takes the rows'
    # identities from it (`row_ids`), and each step end closes one batch.
    self.ledger = admission_lib.StepLedger()
    # Evaluation prompts get their own ledger (and identities), so that an
    # evaluation pass never takes training rows' identities.
    self.eval_ledger = admission_lib.StepLedger()
    self._row_ids = admission_lib.TrainEvalRowIds(
        self.ledger, self.eval_ledger
    )
    rollout_cfg = cluster_config.rollout_config
    if isinstance(rollout_cfg, dict):
      rollout_cfg = rollout_cfg[Mode.TRAIN]

    # The engine's initial weights reach this host through the same
    # all-gather that publishes every later update.
    local_model = engine_weights.initial_model(
        actor, spec, self.local_mesh, rollout_cfg.data_type)

    import tunix_mcjax.engines  # pylint: disable=g-import-not-at-top,unused-import

    engine_name = cluster_options.engine_name(
        self.options, cluster_config.rollout_engine, ENGINES.names())
    rules.raise_first(rules.engine_tp(
        self.options.engine_tp, backend=self.backend_name, engine=engine_name,
        trainer="tunix" if spec is None else "maxtext",
        flag="McJaxOptions.engine_tp"))
    # A LoRA actor trains and publishes only its adapters (as stock Tunix's
    # sync_weights filters by nnx.LoRAParam); its engine must take them.
    lora_enabled = sft_utils.is_lora_enabled(actor)
    lora_problem = rules.lora_engine(engine_name, lora_enabled)
    rules.raise_first(lora_problem)

    engine_factory = functools.partial(
        self._engine_factory(engine_name),
        context=engine_base.EngineContext(
            engine_mesh=self.local_mesh,
            row_ids=self.row_ids,
            seed=self.options.sampling_seed,
            initial_model=local_model,
        ),
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
    # Tunix restores the latest checkpoint inside its constructor: one from
    # another configuration is refused before anything is restored.
    self.checkpoints = checkpointing.ClusterCheckpoints(
        root=cluster_config.training_config.checkpoint_root_directory,
        ledger=self.ledger, num_hosts=self.num_hosts,
        host_index=self.host_index,
        job_fingerprint=self.options.checkpoint_fingerprint,
        resume_step=self.options.resume_step,
    )
    self.checkpoints.check(actor, cluster_config.training_config)
    # A restore that fails is one line naming the checkpoint and the file.
    with compat.key_safe_memory_moves(), self.checkpoints.restoring():
      super().__init__(
          actor=actor, critic=critic, reference=reference, reward=reward,
          tokenizer=tokenizer, cluster_config=local_cfg,
          perf_config=perf_config)
    # The engine took the initial model over; the factory, which Tunix's
    # cluster_config keeps, would hold it as a second engine copy for good.
    engine_factory.keywords["context"] = dataclasses.replace(
        engine_factory.keywords["context"], initial_model=None)
    self.weights = engine_weights.EngineWeights(
        self.rollout, local_mesh=self.local_mesh, spec=spec,
        lora_enabled=lora_enabled)
    self.checkpoints.attach(self.actor_trainer, lambda: self.global_steps)
    if self.options.transfer_guard != "allow":
      compat.scope_trainer_eval(
          self.actor_trainer, lambda: transfers.deliberate("tunix_eval"))
    if self.actor_trainer.train_steps:
      self.global_steps = self.checkpoints.resume(
          self.actor_trainer, self._publish_restored)
    self.agent_turns = agent_turns.AgentTurns(
        self.ledger, self._row_ids, first_step=self.global_steps,
        lag=self.agent_turn_lag)
    self._updates_at_sync = self.actor_trainer.train_steps
    opts = self.options.optimizations
    self.exporter = host_optimizations.MetricsExporter(
        asynchronous=opts.async_metrics
    )
    self.gc_policy = host_optimizations.GcPolicy(freeze=opts.freeze_gc)
    # After RLCluster.__init__, whose one-off collect stays as it is.
    self.gc_policy.start()
    self.telemetry = telemetry.StepTelemetry(
        local_mesh=self.local_mesh,
        exporter=self.exporter,
        gc_policy=self.gc_policy,
        sink=telemetry.RecordSink(
            metrics_out=self.options.metrics_out,
            log_progress=self.options.log_progress,
            metrics_logger=functools.partial(compat.metrics_logger, self),
        ) if self.host_index == 0 else None,
        trace_steps=self.options.trace_steps,
        trace_dir=self.options.trace_dir,
    )
    self._learner_metrics = learner_metrics.GlobalLearnerMetrics(
        self.local_mesh
    )
    self._closed = False
    # Sequence packing: mcjax's packer and the exact packed mask stand in
    # for Tunix's while this cluster lives (undone in close()).
    self._packing = None
    if cluster_config.training_config.max_seq_token_per_tpu is not None:
      tc = self.cluster_config.training_config  # This host's share.
      data_devices = global_rows.mesh_axis_size(
          self.global_mesh, rules.batch_axes(tc.data_sharding_axis))
      self._packing = packing.install(
          gather=telemetry.HostGather(self.local_mesh),
          multiple=max(1, data_devices // self.num_hosts),
          timeout_s=self.options.packing_timeout_s,
          pad_id=self.rollout.pad_id(), trainer=self.actor_trainer,
          max_seq_token_per_tpu=tc.max_seq_token_per_tpu,
          host_index=self.host_index,
          # The clock of the step being packed (a new one every step).
          on_stats=lambda stats: self.step_clock.add_packing(stats),
      )
    self.telemetry.start_step(self.global_steps + 1)
    # Once this process's first step (which compiles) has ended, a step
    # that does not end in time ends this host, naming it.
    self.watchdog = step_watchdog.StepWatchdog(
        timeout_s=self.options.step_timeout_s,
        host=f"host {self.host_index} ({socket.gethostname()})",
        current_phase=lambda: self.step_clock.current)

  def _engine_factory(self, name: str) -> Any:
    """The engine class (or factory) for the registered engine `name`."""
    return ENGINES.get(name)

  # --- checkpoint and resume (see `checkpointing`) ---------------------------

  def _publish_restored(self) -> None:
    """The restored weights into every engine (`ClusterCheckpoints.resume`)."""
    self.weights.publish(self.actor_trainer.model)

  @property
  def publisher(self) -> Any:
    """The trainer -> engine all-gather (`EngineWeights.publisher`)."""
    return self.weights.publisher

  @property
  def row_ids(self) -> admission_lib.TrainEvalRowIds:
    """The engine's row-id source: the training or evaluation ledger."""
    return self._row_ids

  @property
  def step_clock(self) -> telemetry.StepClock:
    """This host's clock of the current step (`timed_reward_fns`)."""
    return self.telemetry.clock

  @property
  def step_records(self) -> list[dict[str, Any]]:
    """Every exported step's record, as written to `metrics_out`."""
    return [r.as_dict() for r in self.telemetry.records]

  # --- validation and configuration -----------------------------------------

  def _check_supported(self, actor, critic, reward, cfg) -> None:
    rules.check_cluster(
        actor=actor, critic=critic, reward=reward, cluster_config=cfg
    )

  def _per_host_training_config(self, tc: Any) -> Any:
    """Global batch knobs -> this host's share (the learner reads per host)."""
    return rules.per_host_training_config(tc, self.num_hosts)

  # --- admission -----------------------------------------------------------

  def shard_dataset(
      self,
      global_batches: Iterable[Mapping[str, Any]],
      *,
      num_generations: int,
      loss_agg_mode: str | None = None,
  ) -> admission_lib.ShardedDataset:
    """This host's share of each global batch (call on every host).

    Prompts are dealt in chunks of the per-host training micro-batch, so
    global micro-batch k is the single controller's micro-batch k (see
    `admission` and `cluster_options.admission_config`).

    Args:
      global_batches: The job's global batches, the same on every host.
      num_generations: Samples per prompt (G).
      loss_agg_mode: The learner's `loss_agg_mode`; with O3 and several
        micro-batches per update, a mode whose update O3 would change is
        refused (`rules.balanced_micro_batches`). None: not checked, and a
        warning is logged in that setting.
    """
    adm = admission_lib.Admission(
        cluster_options.admission_config(
            self.options, self.cluster_config.training_config,
            num_hosts=self.num_hosts, host_index=self.host_index,
            num_generations=num_generations, loss_agg_mode=loss_agg_mode,
        ),
        ledger=self.ledger,
        # Token counts, so admission time includes tokenizing the prompts.
        length_fn=self._prompt_lengths,
    )
    return adm.shard(global_batches, resume=self.checkpoints.dataset_resume(
        self.actor_trainer, self.cluster_config.training_config))

  def shard_eval_dataset(
      self,
      global_batches: Iterable[Mapping[str, Any]],
      *,
      num_generations: int,
  ) -> admission_lib.ShardedDataset:
    """This host's share of each global evaluation batch (every host).

    The `eval_ds` of `learner.train(train_ds, eval_ds)`: dealt in contiguous
    blocks into the evaluation ledger, with identities counted from
    `admission.EVAL_FIRST_PROMPT_INDEX` by global evaluation prompt index
    (again on every pass), so evaluation rollouts do not depend on placement
    and never share a training row's sampling key.
    """
    return admission_lib.Admission(
        admission_lib.AdmissionConfig(
            num_hosts=self.num_hosts,
            host_index=self.host_index,
            num_generations=num_generations,
        ),
        ledger=self.eval_ledger,
    ).shard_eval(global_batches)

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

  def _to_global(self, x: Any) -> Any:
    """This host's rows -> one global array sharded over the data axes."""
    return global_rows.to_global(
        x, self.global_mesh,
        self.cluster_config.training_config.data_sharding_axis,
        self.num_hosts)

  # --- the learner's calls ---------------------------------------------------

  def generate(self, prompts, apply_chat_template=False, mode=Mode.TRAIN,
               micro_batch_size=None, trace_tags=None,
               max_generation_steps=None):
    inner = super().generate

    def call(prompts, max_generation_steps):
      # Evaluation rows (agent_turns: evaluation turns too) come from the
      # evaluation ledger and are not a phase of the training step.
      evaluating = mode == Mode.EVAL or self._row_ids.is_evaluating
      with (self._row_ids.evaluating() if evaluating
            else self.step_clock.phase("generate")), self._guarded():
        out = inner(prompts, apply_chat_template=apply_chat_template,
                    mode=mode, micro_batch_size=micro_batch_size,
                    trace_tags=trace_tags,
                    max_generation_steps=max_generation_steps)
      if not evaluating:
        # Agent turns generated ahead (off-policy) count in their step.
        turns = self.agent_turns.current_turns()
        self.step_clock.add_generation(telemetry.generation_stats(
            out, micro_batch_size=micro_batch_size, max_tokens=(
                max_generation_steps
                or self.get_rollout_config(mode).max_tokens_to_generate)),
            step=turns and turns[1] + 1)  # Records number steps from 1.
      return out

    # Tunix's agentic learner: one conversation per call, from its threads.
    return self.agent_turns.generate(trace_tags, prompts, max_generation_steps,
                                     call, decode=self.tokenizer.decode)

  def get_ref_per_token_logps(self, prompt_tokens, completion_tokens, pad_id,
                              eos_id, micro_batch_size=None):
    temperature = self.get_rollout_config(mode=Mode.TRAIN).temperature
    ref = self.inference_worker.get_ref_per_token_logps
    return self._global_logps(
        Role.REFERENCE,
        lambda p, c: ref(p, c, pad_id, eos_id, temperature=temperature),
        prompt_tokens, completion_tokens, micro_batch_size)

  def _global_logps(self, role, compute, prompt_tokens, completion_tokens,
                    micro_batch_size):
    """`compute` (global prompts, completions -> per-token log-probs) over
    this host's rows in chunks of `micro_batch_size`, under `role`'s mesh;
    this host's rows of the result, left on its devices."""
    n = prompt_tokens.shape[0]
    if n == 0:
      raise ValueError(f"Cannot get {role.value} log-probs of an empty batch.")
    outs = []
    with self.step_clock.phase(
        "logps", cross_host="logps"
    ), self._get_mesh_and_logical_axis_rules_cm(role), self._guarded():
      for sl in rl_utils.chunk_slices_by_size(
          stop=n, step=agent_turns.chunk_rows(micro_batch_size) or n):
        out = compute(
            self._to_global(global_rows.take_rows(prompt_tokens, sl)),
            self._to_global(global_rows.take_rows(completion_tokens, sl)))
        outs.append(global_rows.local_rows_on_device(
            runtime.order_collectives(out)))
      return outs[0] if len(outs) == 1 else jnp.concatenate(outs, axis=0)

  def get_old_per_token_logps(self, prompt_tokens, completion_tokens,
                              micro_batch_size=None):
    # The local engine holds the policy that sampled; rows stay local.
    with self.step_clock.phase("logps"), self._guarded():
      return super().get_old_per_token_logps(
          prompt_tokens, completion_tokens, micro_batch_size=micro_batch_size)

  # Tunix's agentic learner's: under the policy of the last sync.
  def get_actor_per_token_logps(self, prompt_tokens, completion_tokens,
                                pad_id, eos_id, micro_batch_size=None,
                                temperature=None):
    self.agent_turns.order_logps(self.cluster_config.training_config)
    return self._global_logps(Role.ACTOR, self.agent_turns.actor_logps_fn(
        self.actor_trainer, pad_id=pad_id, eos_id=eos_id,
        temperature=(temperature if temperature is not None else
                     self.get_rollout_config(mode=Mode.TRAIN).temperature),
        updates_at_sync=self._updates_at_sync),
        prompt_tokens, completion_tokens, micro_batch_size)

  def update_actor(self, train_ds, eval_ds, skip_jit=False):
    to_global = lambda batch: [jax.tree.map(self._to_global, e) for e in batch]
    self.agent_turns.before_update(self.actor_trainer,
                                   self.cluster_config.training_config,
                                   self._updates_at_sync)
    self.step_clock.add_train_batch(train_ds)  # Before packing.
    with self.step_clock.phase("train", cross_host="train"), self._guarded():
      super().update_actor(to_global(train_ds),
                           to_global(eval_ds) if eval_ds else eval_ds,
                           skip_jit)
      jax.block_until_ready(nnx.state(self.actor_trainer.model))
    self.agent_turns.trained(train_ds)

  def buffer_metrics(self, metrics, mode=Mode.TRAIN):
    if mode == Mode.TRAIN:
      self.step_clock.add_learner_metrics(metrics)
    super().buffer_metrics(metrics, mode=mode)
    self.agent_turns.metrics_buffered()

  def buffer_metrics_async(self, metrics, mode=Mode.TRAIN, step=0):
    if mode == Mode.TRAIN:  # Tunix's agentic learner.
      self.step_clock.add_learner_metrics(metrics)
    return super().buffer_metrics_async(metrics, mode=mode, step=step)

  def sync_weights(self):
    """Publishes the trainer's weights into every host's engine."""
    with self.step_clock.phase("publish", cross_host="publish"), (
        self._guarded()):
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
        # O4: all weights in one all-gather program and one engine update
        # (else one of each per parameter).
        self.step_clock.publish_calls += self.weights.publish(
            self.actor_trainer.model,
            one_call=self.options.optimizations.publish_in_one_call)
    self.global_steps += 1
    self._updates_at_sync = self.actor_trainer.train_steps
    self.agent_turns.weights_synced()
    self.step_clock.overhead["gc"] += self.gc_policy.after_step(
        self.global_steps)
    with self._guarded(self.global_steps - 1):
      self._end_step()

  def _guarded(self, finished_steps: int | None = None):
    """`--transfer_guard` over a backend call after the first step."""
    return transfers.step_scope(
        self.options.transfer_guard,
        self.global_steps if finished_steps is None else finished_steps)

  # --- metrics -------------------------------------------------------------

  def _end_step(self) -> None:
    """Closes the step's ledger entry and hands the step to the telemetry
    (one tiny all-gather; host 0 reports)."""
    closed = self.ledger.close_step()
    self.watchdog.step_ended(self.global_steps)
    self.checkpoints.step_closed(closed.batch)
    batch = closed.batch.stats if closed.batch is not None else None
    with transfers.deliberate("step_record"):
      train = compat.last_train_metrics(self.actor_trainer)
    self.telemetry.end_step(
        telemetry.StepMeta(
            step=self.global_steps,
            backend=self.backend_name,
            loss=train.get("loss"),
            grad_norm=train.get("grad_norm"),
            prompts_digest=batch.digest if batch is not None else None,
            publish_bytes=self.publisher.last_stats.bytes,
            optimizations=self.options.optimizations.as_dict(),
            extras=self._step_extras(),
        ),
        admission_s=closed.admission_s,
        prompt_tokens=batch.prompt_tokens if batch is not None else -1,
    )

  def _step_extras(self) -> dict[str, Any] | None:
    return None  # Backend-specific fields of the step's record.

  def _log_metrics(self, metrics_buffer):
    # Each host buffered its own rows' metrics: combine them over all hosts
    # (one tiny all-gather, dispatched here on the learner's main sequence,
    # where Tunix logs a buffer at the same point on every host). Waiting for
    # it and Tunix's own logging go through the exporter: on its thread under
    # O1, inline (as stock) otherwise.
    with self._guarded():
      pending = self._learner_metrics.dispatch(metrics_buffer)
    log = super()._log_metrics
    self.exporter.submit(
        lambda: log(self._learner_metrics.finish(pending))
    )

  def close(self):
    if self._closed:
      return
    self._closed = True
    self.watchdog.close()
    try:
      self.checkpoints.save_final(self.actor_trainer, self.global_steps)
      super().close()
    finally:
      try:
        # Nothing is lost at exit: every queued record is written first.
        self.exporter.close()
      finally:
        self._compat_fixes.undo()
        if self._packing is not None:
          self._packing.undo()
        self.telemetry.close()
        self.gc_policy.stop()
