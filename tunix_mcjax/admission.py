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

"""Admission: which prompts of each global batch this host takes.

Every host iterates the same global dataset (same batches, same order) and
keeps a disjoint share of each batch. All G samples of a prompt stay on the
host that admitted it, every host yields the same number of equally sized
batches, and the union over hosts, in host order, is the global batch.

Prompts are dealt in chunks: with chunk size c (prompts per host per chunk)
and H hosts, chunk round k gives host h the global prompts
[k*H*c + h*c, k*H*c + (h+1)*c). With c equal to the per-host training
micro-batch, global micro-batch k is exactly the single-controller one.

Admission also records each admitted row's identity (global prompt index in
the prompt stream, sample index in its group) in a `RowIdTracker`; the rollout
engine takes those identities in the same order to derive per-row sampling
keys, which makes sampling independent of placement.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator, Mapping, Sequence
import dataclasses
import threading
import time
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True, kw_only=True)
class AdmissionConfig:
  """How a global batch of prompts is split over hosts.

  Attributes:
    num_hosts: number of hosts H (processes).
    host_index: this host, in [0, H).
    num_generations: samples per prompt (G in GRPO); >= 2.
    chunk_size: prompts given to one host per dealing round; None deals one
      contiguous block of P/H prompts per host.
  """

  num_hosts: int
  host_index: int
  num_generations: int
  chunk_size: int | None = None

  def __post_init__(self):
    if self.num_hosts < 1:
      raise ValueError(f"num_hosts must be >= 1, got {self.num_hosts}.")
    if not 0 <= self.host_index < self.num_hosts:
      raise ValueError(
          f"host_index must be in [0, {self.num_hosts}), got {self.host_index}."
      )
    if self.num_generations < 2:
      raise ValueError(
          "GRPO needs num_generations >= 2 (group advantages of a single"
          f" sample are zero); got {self.num_generations}."
      )
    if self.chunk_size is not None and self.chunk_size < 1:
      raise ValueError(f"chunk_size must be >= 1, got {self.chunk_size}.")

  def host_prompt_indices(self, global_batch_size: int) -> np.ndarray:
    """Positions (within a global batch) of the prompts this host admits."""
    h, n = self.host_index, self.num_hosts
    if global_batch_size % n:
      raise ValueError(
          f"The global batch of {global_batch_size} prompts does not divide"
          f" over {n} hosts; use a batch size that is a multiple of {n}."
      )
    per_host = global_batch_size // n
    c = per_host if self.chunk_size is None else self.chunk_size
    if per_host % c:
      raise ValueError(
          f"Each host gets {per_host} prompts per batch, which is not a"
          f" multiple of the chunk size {c} (the per-host micro-batch); make"
          f" the global batch a multiple of num_hosts * {c}."
      )
    rounds = per_host // c
    return np.concatenate(
        [np.arange(k * n * c + h * c, k * n * c + (h + 1) * c) for k in
         range(rounds)]
    )


class RowIdTracker:
  """FIFO of (global prompt index, sample index) for admitted rows.

  Admission pushes when it yields a batch; the engine takes as it generates.
  Both run on the learner's data thread, in the same order on every host, so
  a FIFO is all the bookkeeping needed. The lock only guards against misuse.
  """

  def __init__(self):
    self._rows: collections.deque[tuple[int, int]] = collections.deque()
    self._lock = threading.Lock()

  def push_prompts(
      self, prompt_indices: Sequence[int], num_generations: int
  ) -> None:
    """Records the G rows of each prompt, in the learner's np.repeat order."""
    with self._lock:
      for p in prompt_indices:
        for s in range(num_generations):
          self._rows.append((int(p), s))

  def pending(self) -> int:
    return len(self._rows)

  def take(self, num_rows: int) -> np.ndarray:
    with self._lock:
      if num_rows > len(self._rows):
        raise RuntimeError(
            f"The engine was asked for {num_rows} rows but admission recorded"
            f" only {len(self._rows)}: feed the learner the dataset returned"
            " by `cluster.shard_dataset(...)` (or `Admission.shard`), so that"
            " every generated row has an identity."
        )
      out = np.array([self._rows.popleft() for _ in range(num_rows)],
                     dtype=np.int64)
    return out.reshape(num_rows, 2)


def _batch_len(batch: Mapping[str, Any]) -> int:
  if "prompts" not in batch:
    raise ValueError(
        f"A batch needs a 'prompts' field; got fields {sorted(batch)}."
    )
  n = len(batch["prompts"])
  for k, v in batch.items():
    if hasattr(v, "__len__") and not isinstance(v, (str, bytes)):
      if len(v) != n:
        raise ValueError(
            f"Batch field {k!r} has {len(v)} entries but 'prompts' has {n};"
            " every field must have one entry per prompt."
        )
  return n


def _take(values: Any, idx: np.ndarray) -> Any:
  if isinstance(values, np.ndarray):
    return values[idx]
  if isinstance(values, (list, tuple)):
    return [values[i] for i in idx]
  if hasattr(values, "__getitem__") and hasattr(values, "shape"):
    return np.asarray(values)[idx]
  raise TypeError(f"Cannot slice a batch field of type {type(values)}.")


class ShardedDataset(Iterable[dict[str, Any]]):
  """This host's share of a stream of global batches (re-iterable)."""

  def __init__(
      self,
      global_batches: Iterable[Mapping[str, Any]],
      config: AdmissionConfig,
      tracker: RowIdTracker | None,
  ):
    self._batches = global_batches
    self._config = config
    self._tracker = tracker
    self.admission_seconds = 0.0  # Cumulative; read by the cluster's metrics.
    # Prompt indices keep counting across epochs, so a prompt seen again
    # draws fresh sampling noise.
    self._stream_offset = 0

  def __iter__(self) -> Iterator[dict[str, Any]]:
    global_batch_size = None
    for batch in self._batches:
      t0 = time.perf_counter()
      n = _batch_len(batch)
      if global_batch_size is None:
        global_batch_size = n
      elif n != global_batch_size:
        # Hosts must run the same number of equally shaped steps, or a
        # collective hangs; a short last batch would also change the algorithm.
        raise ValueError(
            f"Global batch of {n} prompts after batches of {global_batch_size}:"
            " every batch must have the same size (drop the remainder)."
        )
      idx = self._config.host_prompt_indices(n)
      local = {k: _take(v, idx) for k, v in batch.items()}
      if self._tracker is not None:
        self._tracker.push_prompts(
            self._stream_offset + idx, self._config.num_generations
        )
      self._stream_offset += n
      self.admission_seconds += time.perf_counter() - t0
      yield local


class Admission:
  """Per-host admission of prompts plus the row identities for the engine."""

  def __init__(
      self, config: AdmissionConfig, row_ids: RowIdTracker | None = None
  ):
    self.config = config
    self.row_ids = row_ids if row_ids is not None else RowIdTracker()
    self._datasets: list[ShardedDataset] = []

  def shard(self, global_batches: Iterable[Mapping[str, Any]]) -> ShardedDataset:
    ds = ShardedDataset(global_batches, self.config, self.row_ids)
    self._datasets.append(ds)
    return ds

  def admission_seconds(self) -> float:
    return sum(d.admission_seconds for d in self._datasets)
