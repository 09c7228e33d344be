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

"""Per-step telemetry: one step record, measured on either backend.

Modules: `records` (the one step-record schema: `PHASES`, `HOST_FIELDS`,
`StepRecord`, `build_record`; JAX-free), `clock` (one host's `StepClock` of
a step, `timed_reward_fns`), `sink` (`RecordSink`: prints, writes JSONL and
logs the records; JAX-free), `recorder` (the mcjax cluster's `StepTelemetry`:
one tiny all-gather of every host's numbers per step, `HostGather`),
`stock` (Tunix's stock cluster, one host: `stock.StockClusterRecorder`) and
`learner_metrics` (Tunix's learner-logged metrics over all hosts).

The names are re-exported here (`telemetry.StepClock`, ...). Those of
`clock` and `recorder` are imported on first use, so that importing the
schema (the advisor, the benchmark's report) does not import JAX.
"""

from typing import Any

from tunix_mcjax.telemetry.records import build_record
from tunix_mcjax.telemetry.records import CROSS_HOST_POINTS
from tunix_mcjax.telemetry.records import HOST_FIELDS
from tunix_mcjax.telemetry.records import HOST_OVERHEADS
from tunix_mcjax.telemetry.records import LEFTOVER_PHASE
from tunix_mcjax.telemetry.records import PHASE_TRACE_PREFIX
from tunix_mcjax.telemetry.records import PHASES
from tunix_mcjax.telemetry.records import StepMeta
from tunix_mcjax.telemetry.records import StepRecord
from tunix_mcjax.telemetry.sink import RecordSink

_CLOCK_NAMES = frozenset(
    {"StepClock", "generation_stats", "timed_reward_fns", "train_batch_tokens"})
_RECORDER_NAMES = frozenset({"HostGather", "StepTelemetry"})


def __getattr__(name: str) -> Any:
  """The JAX-using re-exports, imported on first use (PEP 562)."""
  if name in _CLOCK_NAMES:
    from tunix_mcjax.telemetry import clock as module  # pylint: disable=g-import-not-at-top
  elif name in _RECORDER_NAMES:
    from tunix_mcjax.telemetry import recorder as module  # pylint: disable=g-import-not-at-top
  else:
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
  globals()[name] = value = getattr(module, name)  # Later reads skip this.
  return value


__all__ = [
    "CROSS_HOST_POINTS",
    "HOST_FIELDS",
    "HOST_OVERHEADS",
    "HostGather",
    "LEFTOVER_PHASE",
    "PHASES",
    "PHASE_TRACE_PREFIX",
    "RecordSink",
    "StepClock",
    "StepMeta",
    "StepRecord",
    "StepTelemetry",
    "build_record",
    "generation_stats",
    "timed_reward_fns",
    "train_batch_tokens",
]
