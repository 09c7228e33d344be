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

"""The step ledger: one entry per admitted batch, closed per learner step.

Admission (`admission.Admission`) opens an entry for every batch it admits:
the admitted rows' identities (global prompt index in the prompt stream,
sample index in its group), the admission time and the batch's statistics.
The rollout engine takes the identities in the same order to derive
per-row sampling keys (placement-invariant sampling); the cluster closes
one entry per learner step and reports its statistics.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
import dataclasses
import hashlib
import threading
from typing import Any

import numpy as np


def prompts_digest(prompts: Sequence[Any]) -> str:
  """A short fingerprint of a global batch's prompts, in order."""
  h = hashlib.sha1()
  for p in prompts:
    h.update(str(p).encode("utf-8", "surrogatepass"))
    h.update(b"\0")
  return h.hexdigest()[:16]


@dataclasses.dataclass(frozen=True, kw_only=True)
class BatchStats:
  """What admission saw of one global batch, for the step's metrics.

  Attributes:
    digest: `prompts_digest` of the global batch (equal-work checks).
    prompt_tokens: total length of this host's admitted prompts (-1 when no
      length function was given).
  """

  digest: str
  prompt_tokens: int


@dataclasses.dataclass(kw_only=True)
class LedgerEntry:
  """What admission recorded of one batch (one learner step).

  Attributes:
    batch: 0-based position of the batch among those the ledger recorded.
    row_ids: (rows, 2) int64: (global prompt index, sample index) per row, in
      the learner's np.repeat order.
    stats: the batch's statistics for the step's metrics.
    admission_s: time admission spent on the batch.
    taken: rows the engine has taken so far.
    stream_end: global prompts of the stream up to and including this batch
      (the data position once its step is trained; -1 if not known).
  """

  batch: int
  row_ids: np.ndarray
  stats: BatchStats
  admission_s: float
  taken: int = 0
  stream_end: int = -1

  @property
  def rows_left(self) -> int:
    return self.row_ids.shape[0] - self.taken


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClosedStep:
  """One learner step as the ledger saw it.

  Attributes:
    batch: the step's batch (the oldest open entry); None when nothing was
      admitted (the learner was not fed an admitted dataset).
    admission_s: admission time spent since the previous step closed (with
      prefetch, this may include a later batch's admission: it is charged to
      the step whose wall time it took).
  """

  batch: LedgerEntry | None
  admission_s: float


class StepLedger:
  """Per-batch entries that admission writes and the engine and cluster read.

  Admission records one entry per batch it yields; the engine takes the
  rows' identities (`take`, the engines' `RowIdSource`); the cluster closes
  one entry per learner step (`close_step`) and reads its statistics.
  Entries are kept in batch order, so a learner that prefetches batches
  (admits batch k+1 before step k ends) still gets each step's rows and
  statistics. A generate call whose rows are not the next rows of one batch,
  or a step that ends before its batch's rows were all generated, is an
  error naming what admission recorded and what the engine asked for: it
  would key rows with another row's identity.

  Admission runs on the learner's data thread and steps close on its main
  thread, hence the lock.
  """

  def __init__(self):
    self._open: collections.deque[LedgerEntry] = collections.deque()
    self._recorded = 0
    self._admission_unreported = 0.0
    self._lock = threading.Lock()

  def record_batch(
      self,
      prompt_indices: Sequence[int],
      num_generations: int,
      *,
      stats: BatchStats,
      admission_s: float,
      stream_end: int = -1,
  ) -> LedgerEntry:
    """Opens the entry of an admitted batch: G rows per prompt, in order."""
    prompts = np.asarray(prompt_indices, dtype=np.int64)
    rows = np.stack(
        [np.repeat(prompts, num_generations),
         np.tile(np.arange(num_generations, dtype=np.int64), prompts.size)],
        axis=1,
    )
    with self._lock:
      entry = LedgerEntry(batch=self._recorded, row_ids=rows, stats=stats,
                          admission_s=float(admission_s),
                          stream_end=int(stream_end))
      self._recorded += 1
      self._open.append(entry)
      self._admission_unreported += entry.admission_s
    return entry

  @property
  def entries(self) -> tuple[LedgerEntry, ...]:
    """The open entries, oldest first."""
    with self._lock:
      return tuple(self._open)

  def pending(self) -> int:
    """Rows recorded by admission that the engine has not taken yet."""
    with self._lock:
      return sum(e.rows_left for e in self._open)

  def take(self, num_rows: int) -> np.ndarray:
    """The identities of the next `num_rows` rows of the current batch."""
    with self._lock:
      entry = next((e for e in self._open if e.rows_left), None)
      if entry is None:
        raise RuntimeError(
            f"The engine asked for {num_rows} rows but admission recorded"
            " none that are not taken yet: feed the learner the dataset"
            " returned by `cluster.shard_dataset(...)` (or `Admission.shard`),"
            " so that every generated row has an identity."
        )
      if num_rows > entry.rows_left:
        raise RuntimeError(
            f"The engine asked for {num_rows} rows in one call, but"
            f" admission recorded {entry.row_ids.shape[0]} rows for batch"
            f" {entry.batch}, of which {entry.rows_left} are left (the engine"
            f" took {entry.taken}): one generate call must cover rows of one"
            " batch, in admission order."
        )
      out = entry.row_ids[entry.taken:entry.taken + num_rows]
      entry.taken += num_rows
    return out.copy()

  def mark_taken(self, batch: int, num_rows: int) -> None:
    """Counts `num_rows` rows of open batch `batch` as generated, for engines
    keyed by another source (`agent_turns`: one agent turn at a time)."""
    with self._lock:
      entry = next((e for e in self._open if e.batch == batch), None)
      if entry is None or num_rows > entry.rows_left:
        raise RuntimeError(
            f"{num_rows} rows of batch {batch} were generated, but admission"
            f" has {'no such batch open' if entry is None else f'{entry.rows_left} of its rows left'}.")
      entry.taken += num_rows

  def close_step(self) -> ClosedStep:
    """Closes the oldest batch: the learner step that used it has ended."""
    with self._lock:
      admission_s, self._admission_unreported = self._admission_unreported, 0.0
      if not self._open:
        return ClosedStep(batch=None, admission_s=admission_s)
      entry = self._open[0]
      if entry.rows_left:
        raise RuntimeError(
            f"A learner step ended after the engine took {entry.taken} rows"
            f" of batch {entry.batch}, for which admission recorded"
            f" {entry.row_ids.shape[0]} rows: every admitted row must be"
            " generated in the step of its batch, or later rows would be"
            " keyed by other rows' identities."
        )
      self._open.popleft()
    return ClosedStep(batch=entry, admission_s=admission_s)
