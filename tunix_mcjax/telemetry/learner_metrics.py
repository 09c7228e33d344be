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

"""Tunix's learner-logged metrics over all hosts' rows.

Tunix's learner buffers per-step metrics as `name -> (values, op)` (e.g.
`rewards/score/mean -> ([mean of a generate call's rows, ...], np.mean)`) and
logs `op(values)`. Under mcjax each host buffers only its own rows. Before a
buffer is logged, `GlobalLearnerMetrics.combine` reduces every numeric metric
with a known op on each host, gathers the per-host results in ONE tiny
all-gather, and combines them with the same op:

- np.mean: the mean of the hosts' means. Exact (up to float summation order)
  because every host buffers the same number of values, each over the same
  number of rows (hosts hold equal shares of every batch).
- np.max / np.min / np.sum: of the hosts' values.

Values travel as float64 bit patterns, so nothing is rounded on the way.
Metrics with another op (a user's lambda) or non-numeric values (prompts,
completions, trajectory ids) stay host-local; host 0 logs its own.

The gather is a collective: call `combine` on every host, on the learner's
main sequence, once per buffer Tunix logs (Tunix logs buffers at the same
points on every host: when a step's first metrics of the next step arrive,
and at close).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

from jax.sharding import Mesh
import numpy as np

from tunix_mcjax.telemetry import recorder

# Tunix's reductions -> how per-host results combine. Keyed by identity, as
# Tunix passes the numpy functions themselves.
_COMBINE = {
    id(np.mean): np.mean,
    id(np.max): np.max,
    id(np.min): np.min,
    id(np.sum): np.sum,
}


def combinable(values: Any, op: Any) -> np.ndarray | None:
  """The numeric array of a buffered metric with a known op, else None."""
  if op is None or id(op) not in _COMBINE:
    return None
  try:
    arr = np.array(values)
  except Exception:  # pylint: disable=broad-except
    return None  # Ragged: Tunix skips it too.
  if arr.dtype.kind not in "biuf" or arr.size == 0:
    return None
  return arr


def combine_host_results(per_host: np.ndarray, op: Any) -> float:
  """Per-host `op` results (hosts,) -> the global value."""
  return float(_COMBINE[id(op)](per_host))


class GlobalLearnerMetrics:
  """Combines Tunix's buffered learner metrics across hosts (see module)."""

  def __init__(self, local_mesh: Mesh | None):
    self._gather = recorder.HostGather(local_mesh)

  def combine(self, buffer: Any) -> Any:
    """A copy of Tunix's `MetricsBuffer` with global values (a collective)."""
    return self.finish(self.dispatch(buffer))

  def dispatch(self, buffer: Any) -> tuple[Any, list[str], Any]:
    """Starts combining `buffer` across hosts; `finish` completes it.

    Call on the learner's main sequence (every host logs a buffer at the
    same point); `finish` may run later on the metrics exporter thread, so
    that O1 keeps the step off this barrier.
    """
    names, local = [], []
    for name in sorted(buffer.metrics):
      values, op = buffer.metrics[name]
      arr = combinable(values, op)
      if arr is not None:
        names.append(name)
        local.append(float(op(arr)))
    # Every host must gather the same metrics in the same order: a
    # fingerprint of the names travels along and is checked.
    digest = hashlib.sha1("\0".join(names).encode()).digest()[:8]
    payload = np.concatenate([
        np.frombuffer(digest, dtype=np.uint32),
        np.asarray(local, dtype=np.float64).view(np.uint32),
    ])
    return buffer, names, self._gather.dispatch(payload)

  def finish(self, pending: tuple[Any, list[str], Any]) -> Any:
    """The buffer with global values: combined metrics hold one value (the
    global one) with their op, so Tunix's `_log_metrics` logs exactly it."""
    buffer, names, gathered = pending
    everyone = recorder.HostGather.read(gathered)
    tags = everyone[:, :2]
    if (tags != tags[:1]).any():
      raise RuntimeError(
          "Hosts buffered different learner metrics for one step (names"
          f" here: {names}); every host's learner must log the same metrics."
      )
    per_host = np.ascontiguousarray(everyone[:, 2:]).view(np.float64)
    metrics = dict(buffer.metrics)
    for i, name in enumerate(names):
      op = metrics[name][1]
      metrics[name] = ([combine_host_results(per_host[:, i], op)], op)
    return dataclasses.replace(buffer, metrics=metrics)
