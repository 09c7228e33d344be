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

"""Step records of Tunix's stock `RLCluster`, in the one telemetry schema.

The stock cluster is one host, so nobody gathers anything: the recorder
wraps the cluster instance's learner-facing calls with a `StepClock` and
builds the same `StepRecord` as the mcjax cluster (no straggler wait).
"""

from __future__ import annotations

from collections.abc import Mapping
import functools
import time
from typing import Any

import jax

from tunix_mcjax import compat
from tunix_mcjax.compat import metric_keys
from tunix_mcjax.telemetry.clock import generation_stats
from tunix_mcjax.telemetry.clock import StepClock
from tunix_mcjax.telemetry.records import build_record
from tunix_mcjax.telemetry.records import StepMeta
from tunix_mcjax.telemetry.records import StepRecord
from tunix_mcjax.telemetry.sink import RecordSink


class StockClusterRecorder:
  """Step records of Tunix's stock `RLCluster`, measured like mcjax's.

  Wraps the instance's learner-facing methods (generate, reference and old
  log-probs, update_actor, sync_weights, buffer_metrics); the learner calls
  them through the instance, so nothing in Tunix changes. `update_actor` is
  waited for, as mcjax does, so that the train step's time is not charged to
  the next phase. A step ends when `sync_weights` returns, or, where the
  learner skips it (actor and rollout share weights), at the first
  `buffer_metrics` call after the learner advanced `global_steps`. Records
  have the mcjax schema (one host, so no straggler wait).

  The recorder sets `cluster.step_clock`, so that a caller can time its
  reward functions (`timed_reward_fns`) the same way on either backend.

  Attributes:
    step_clock: the `StepClock` of the current step.
    records: one `StepRecord` per finished step.
  """

  def __init__(
      self,
      cluster: Any,
      *,
      ledger: Any = None,
      metrics_out: str | None = None,
      trace_steps: tuple[int, ...] = (),
      trace_dir: str | None = None,
      take_rows: bool = False,
  ):
    """Wraps `cluster`.

    Args:
      cluster: a stock `RLCluster`.
      ledger: the `admission.StepLedger` the job's admission writes into
        (admission time, prompt statistics), or None.
      metrics_out: JSONL file to append one object per step to.
      trace_steps: steps (1-based) to record a JAX profiler trace of, into
        `trace_dir`/host0, as the mcjax cluster does.
      trace_dir: where traces go; required with `trace_steps`.
      take_rows: take each generated train row's identity from `ledger`
        (for an engine that does not, such as Tunix's own rollout), so
        that the ledger closes every step.
    """
    self._take_rows = take_rows
    if trace_steps and not trace_dir:
      raise ValueError("trace_steps needs trace_dir.")
    self._trace_steps = tuple(trace_steps)
    self._trace_dir = trace_dir
    self._tracing = False
    self._cluster = cluster
    self._ledger = ledger
    self._sink = RecordSink(metrics_out=metrics_out)
    self._steps_at_start = cluster.global_steps
    self.records: list[StepRecord] = []
    self.step_clock = StepClock()
    cluster.step_clock = self.step_clock
    self._wrap("generate", "generate", self._after_generate)
    self._wrap("get_ref_per_token_logps", "logps")
    self._wrap("get_old_per_token_logps", "logps")
    self._wrap("get_actor_per_token_logps", "logps")
    self._wrap("update_actor", "train", self._after_update,
               before=self._before_update)
    self._wrap("sync_weights", "publish", self._after_sync)
    buffer_metrics = cluster.buffer_metrics

    @functools.wraps(buffer_metrics)
    def buffer_and_read(metrics, mode=compat.Mode.TRAIN):
      if cluster.global_steps != self._steps_at_start:
        self._end_step()
      if str(mode) == metric_keys.TRAIN_MODE:
        self.step_clock.add_learner_metrics(metrics)
      return buffer_metrics(metrics, mode=mode)

    cluster.buffer_metrics = buffer_and_read
    # Tunix's agentic learner buffers its metrics with a step of their own.
    buffer_async = cluster.buffer_metrics_async

    @functools.wraps(buffer_async)
    def buffer_async_and_read(metrics, mode=compat.Mode.TRAIN, step=0):
      if str(mode) == metric_keys.TRAIN_MODE:
        self.step_clock.add_learner_metrics(metrics)
      return buffer_async(metrics, mode=mode, step=step)

    cluster.buffer_metrics_async = buffer_async_and_read
    self._trace(cluster.global_steps + 1)

  def _trace(self, next_step: int) -> bool:
    """Starts or stops the profiler trace so that it covers traced steps.

    Returns:
      Whether a trace was stopped (and written out).
    """
    want = next_step in self._trace_steps
    if want and not self._tracing:
      jax.profiler.start_trace(f"{self._trace_dir}/host0")
      self._tracing = True
    elif self._tracing and not want:
      jax.profiler.stop_trace()
      self._tracing = False
      return True
    return False

  def _wrap(self, name: str, phase: str, after=None, before=None) -> None:
    inner = getattr(self._cluster, name)

    @functools.wraps(inner)
    def timed(*args, **kwargs):
      if before is not None:
        before(args, kwargs)
      with self.step_clock.phase(phase):
        out = inner(*args, **kwargs)
        if after is not None:
          after(out, kwargs)
      if name == "sync_weights":
        self._end_step()
      return out

    setattr(self._cluster, name, timed)

  def _after_generate(self, out: Any, kwargs: Mapping[str, Any]) -> None:
    mode = kwargs.get("mode", compat.Mode.TRAIN)
    if str(mode) != metric_keys.TRAIN_MODE:
      return
    max_tokens = kwargs.get("max_generation_steps") or (
        self._cluster.get_rollout_config(mode).max_tokens_to_generate
    )
    stats = generation_stats(
        out, micro_batch_size=kwargs.get("micro_batch_size"),
        max_tokens=max_tokens,
    )
    self.step_clock.add_generation(stats)
    if self._take_rows and self._ledger is not None:
      self._ledger.take(stats["rows"])

  def _before_update(self, args: tuple[Any, ...],
                     kwargs: Mapping[str, Any]) -> None:
    # update_actor(train_ds, eval_ds, skip_jit): the train batch, unpacked.
    train_ds = args[0] if args else kwargs.get("train_ds")
    if train_ds is not None:
      self.step_clock.add_train_batch(train_ds)

  def _after_update(self, out: Any, kwargs: Mapping[str, Any]) -> None:
    del out, kwargs
    from flax import nnx  # pylint: disable=g-import-not-at-top

    jax.block_until_ready(nnx.state(self._cluster.actor_trainer.model))

  def _after_sync(self, out: Any, kwargs: Mapping[str, Any]) -> None:
    del out, kwargs
    self.step_clock.publish_calls += 1

  def _end_step(self) -> None:
    now = time.perf_counter()
    self._steps_at_start = self._cluster.global_steps
    admission_s, batch = 0.0, None
    if self._ledger is not None:
      closed = self._ledger.close_step()
      admission_s = closed.admission_s
      batch = closed.batch.stats if closed.batch is not None else None
    step_s = self.step_clock.finish(now, admission_s)
    local = self.step_clock.host_numbers(
        step_s, batch.prompt_tokens if batch is not None else -1
    )
    train = compat.last_train_metrics(self._cluster.actor_trainer)
    record = build_record(local[None, :], StepMeta(
        step=self._cluster.global_steps,
        backend="tunix",
        loss=train.get("loss"),
        grad_norm=train.get("grad_norm"),
        prompts_digest=batch.digest if batch is not None else None,
        publish_bytes=None,
        optimizations=None,
    ))
    self.records.append(record)
    self._sink.write(record)
    export_s = time.perf_counter() - now
    if self._trace(self._cluster.global_steps + 1):
      # Writing the trace out is no step's time: the next step starts after,
      # so this export (before it) is none of its host work either.
      now, export_s = time.perf_counter(), 0.0
    # The next step starts now; writing this record is its host work.
    self.step_clock.reset(now, export_s)

  def close(self) -> None:
    if self._tracing:
      jax.profiler.stop_trace()
      self._tracing = False
    self._sink.close()
