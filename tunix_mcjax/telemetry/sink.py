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

"""Where host 0's step records go: a progress line, JSONL, Tunix's logger.

JAX-free, like the schema (`records`): both backends' recorders write
through it.
"""

from __future__ import annotations

from collections.abc import Callable
import json
import os
from typing import Any

from tunix_mcjax.telemetry import records


class RecordSink:
  """Where a step's record goes: a progress line, a JSONL file, Tunix's
  metrics logger (each optional)."""

  def __init__(
      self,
      *,
      metrics_out: str | None = None,
      log_progress: bool = False,
      metrics_logger: Callable[[], Any] | None = None,
  ):
    """Initializes the sink.

    Args:
      metrics_out: JSONL file to append one object per record to.
      log_progress: print a progress line per record.
      metrics_logger: returns Tunix's metrics logger to log the record's main
        numbers into (called per record), or None.
    """
    self._log_progress = log_progress
    self._metrics_logger = metrics_logger
    self._file = None
    if metrics_out:
      os.makedirs(os.path.dirname(os.path.abspath(metrics_out)), exist_ok=True)
      self._file = open(metrics_out, "a")

  def write(self, record: records.StepRecord) -> None:
    if self._log_progress:
      ph = record.phases
      loss = record.loss
      print(
          f"[{record.backend}] step {record.step}: reward"
          f" {_fmt(record.reward_mean, 3)} loss"
          f" {loss if loss is None else round(loss, 5)}"
          f" len {_fmt(record.completion_len_mean, 1)}"
          f" | {record.step_time_s:.2f}s (gen {ph['generate']:.2f},"
          f" train {ph['train']:.2f}, publish {ph['publish']:.3f},"
          f" {(record.publish_bytes or 0) / 2**20:.1f} MiB, wait"
          f" {record.straggler_wait['total']:.3f})",
          flush=True,
      )
    if self._file is not None:
      self._file.write(json.dumps(record.as_dict()) + "\n")
      self._file.flush()
    if self._metrics_logger is not None:
      logger = self._metrics_logger()
      tag = record.backend
      for k in ("reward_mean", "completion_len_mean", "step_time_s"):
        logger.log(tag, k, getattr(record, k), "train", record.step)
      for p, v in record.phases.items():
        logger.log(tag, f"phase/{p}", v, "train", record.step)
      logger.log(tag, "straggler_wait", record.straggler_wait["total"],
                 "train", record.step)

  def close(self) -> None:
    if self._file is not None:
      self._file.close()
      self._file = None


def _fmt(x: float | None, digits: int) -> str:
  return "n/a" if x is None else f"{x:.{digits}f}"
