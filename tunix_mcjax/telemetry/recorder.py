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

"""The mcjax cluster's step records: one tiny all-gather per step.

`StepTelemetry` gathers every host's row of numbers
(`clock.StepClock.host_numbers`) with `HostGather` and turns them into the
step's `records.StepRecord` (`records.build_record`); host 0's
`sink.RecordSink` writes it. Tunix's stock cluster is one host and gathers
nothing (`stock`).
"""

from __future__ import annotations

from collections.abc import Sequence
import functools
import os
import time

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec
import numpy as np

from tunix_mcjax import host_optimizations
from tunix_mcjax import transfers
from tunix_mcjax.telemetry import clock
from tunix_mcjax.telemetry import records
from tunix_mcjax.telemetry import sink as sink_lib


class HostGather:
  """One tiny all-gather of a row of numbers from every host to every host.

  `dispatch` starts it without waiting (every host calls it at the same
  point of its step sequence, so the collective is issued in the same order
  everywhere); `read` waits for it and returns one row per host, in process
  order. One row per device of a (host, *local) view mesh, replicated by a
  jitted identity: no host round-trip beyond the row itself.
  """

  def __init__(self, local_mesh: Mesh | None):
    self._local_mesh = local_mesh
    self._fn = None
    self._sharding = None

  def dispatch(self, row: np.ndarray) -> jax.Array | np.ndarray:
    if jax.process_count() == 1:
      return row[None, :]
    # Imported here: publication imports the engines' base, which the
    # telemetry's other users (the stock recorders, the bench) do not need.
    from tunix_mcjax import publication  # pylint: disable=g-import-not-at-top

    if self._fn is None:
      view = publication.host_view_mesh(self._local_mesh)
      self._sharding = NamedSharding(view, PartitionSpec(view.axis_names))
      self._fn = jax.jit(
          lambda x: x, out_shardings=NamedSharding(view, PartitionSpec())
      )
    rows = np.ascontiguousarray(
        np.broadcast_to(row, (self._local_mesh.size, row.size))
    )
    with transfers.deliberate("step_record"):
      return self._fn(jax.make_array_from_process_local_data(self._sharding,
                                                             rows))

  @staticmethod
  def read(gathered: jax.Array | np.ndarray) -> np.ndarray:
    if isinstance(gathered, np.ndarray):
      return gathered
    flat = np.asarray(gathered.addressable_data(0))
    # Rows are devices, host by host; each host's rows are equal.
    return flat.reshape(jax.process_count(), -1, flat.shape[-1])[:, 0, :]


class StepTelemetry:
  """The mcjax cluster's per-step metrics: one host's clock, the per-step
  all-gather of every host's numbers, and the record host 0 exports.

  Every host calls `end_step` at the same point of its step sequence, so the
  all-gather is issued in the same order everywhere. Off the barrier (O1,
  an asynchronous `exporter`), reading the gathered numbers (which waits for
  the slowest host), building the record and writing it happen on the
  exporter's thread; the step goes on at once. Either way the time the main
  thread spends in `end_step` is the next step's `metrics_export` overhead.

  Attributes:
    clock: this host's `clock.StepClock`.
    records: every exported step's record (on every host).
  """

  def __init__(
      self,
      *,
      local_mesh: Mesh,
      exporter: host_optimizations.MetricsExporter,
      gc_policy: host_optimizations.GcPolicy,
      sink: sink_lib.RecordSink | None,
      trace_steps: Sequence[int] = (),
      trace_dir: str | None = None,
  ):
    """Initializes the telemetry.

    Args:
      local_mesh: this host's engine mesh (the gather lands on it).
      exporter: runs the export of each step (inline or on its thread).
      gc_policy: the cluster's garbage-collection policy (counted per step).
      sink: where host 0's records go; None on the other hosts.
      trace_steps: steps (1-based) to record a JAX profiler trace of.
      trace_dir: where traces go (host<i> below it).
    """
    self._local_mesh = local_mesh
    self._exporter = exporter
    self._sink = sink
    self._trace_steps = tuple(trace_steps)
    self._trace_dir = trace_dir
    self._tracing = False
    self._gather = HostGather(local_mesh)
    self.clock = clock.StepClock(gc_policy)
    self.records: list[records.StepRecord] = []

  def start_step(
      self, next_step: int, start: float | None = None,
      carried_export_s: float = 0.0,
  ) -> None:
    """Starts timing step `next_step` (and its trace, if it is traced)."""
    if (self._trace_steps and not self._tracing
        and next_step in self._trace_steps):
      jax.profiler.start_trace(
          os.path.join(self._trace_dir, f"host{jax.process_index()}")
      )
      self._tracing = True
      # Starting the profiler is no step's time: the step, like its trace
      # window, starts after it (as the stock path's does).
      start = None
    self.clock.reset(
        time.perf_counter() if start is None else start, carried_export_s,
        step=next_step)

  def end_step(self, meta: records.StepMeta, *, admission_s: float,
               prompt_tokens: int) -> None:
    """Ends step `meta.step`: dispatches the gather and the export; starts
    the next step's clock."""
    now = time.perf_counter()
    step_s = self.clock.finish(now, admission_s)
    local = self.clock.host_numbers(step_s, prompt_tokens)
    gathered = self._gather.dispatch(local)
    self._exporter.submit(functools.partial(self._export, gathered, meta))
    export_s = time.perf_counter() - now
    if self._tracing and meta.step + 1 not in self._trace_steps:
      jax.profiler.stop_trace()  # Traced steps are for reading, not timing.
      self._tracing = False
      # Writing the trace out is no step's time: the next step starts after,
      # so this export (before it) is none of its host work either.
      now, export_s = time.perf_counter(), 0.0
    self.start_step(meta.step + 1, start=now, carried_export_s=export_s)

  def close(self) -> None:
    """Stops a running trace and closes the sink (after the exporter)."""
    if self._tracing:
      jax.profiler.stop_trace()
      self._tracing = False
    if self._sink is not None:
      self._sink.close()

  def _export(self, gathered: jax.Array, meta: records.StepMeta) -> None:
    """Builds the step's record; host 0's sink prints, writes and logs it."""
    everyone = HostGather.read(gathered)
    # Its `exported_on` is evidence of where the export ran ("MainThread"
    # unless O1 is on).
    record = records.build_record(everyone, meta)
    self.records.append(record)
    if self._sink is not None:
      self._sink.write(record)
