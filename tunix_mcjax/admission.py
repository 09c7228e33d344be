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

With `balance_by_length` (optimization O3), each global batch is instead
dealt by prompt length: prompts sorted by (token count descending, position)
go to hosts in snake order (0..H-1, H-1..0, ...), so every host gets the same
number of prompts and similar prompt work; each host keeps its prompts in
dataset order. Every host computes the same assignment from the same global
batch, so no communication is needed. The global train batch is then a
permutation of the unbalanced one (GRPO's loss over a batch does not depend
on row order, up to float summation order).

Admission also records each admitted row's identity (global prompt index in
the prompt stream, sample index in its group) in a `RowIdTracker`; the rollout
engine takes those identities in the same order to derive per-row sampling
keys, which makes sampling independent of placement.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
import dataclasses
import hashlib
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
      contiguous block of P/H prompts per host. With `balance_by_length` it
      only has to divide the host's share.
    balance_by_length: O3: deal prompts by length (see the module doc)
      instead of in dataset order.
    update_size: prompts per host per optimizer update (the learner's
      per-host mini-batch), if smaller than a host's share of the batch.
      Balanced dealing refuses it: it would change which prompts share an
      update, i.e. the algorithm.
  """

  num_hosts: int
  host_index: int
  num_generations: int
  chunk_size: int | None = None
  balance_by_length: bool = False
  update_size: int | None = None

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
    if self.update_size is not None and self.update_size < 1:
      raise ValueError(f"update_size must be >= 1, got {self.update_size}.")

  def host_prompt_indices(
      self, global_batch_size: int, lengths: Sequence[int] | None = None
  ) -> np.ndarray:
    """Positions (within a global batch) of the prompts this host admits.

    Args:
      global_batch_size: prompts in the global batch.
      lengths: prompt lengths of the whole global batch; required with
        `balance_by_length`, ignored otherwise.

    Returns:
      Increasing positions in balanced mode; in chunked dealing order
      otherwise.
    """
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
    if self.balance_by_length:
      if self.update_size is not None and self.update_size < per_host:
        raise ValueError(
            f"balance_by_length with {self.update_size} prompts per host per"
            f" optimizer update (< the host's {per_host} per batch) would"
            " change which prompts share an update; use one update per batch"
            " or turn balancing off."
        )
      if lengths is None or len(lengths) != global_batch_size:
        raise ValueError(
            "balance_by_length needs the lengths of all"
            f" {global_batch_size} prompts of the global batch."
        )
      return balanced_assignment(lengths, n)[h]
    rounds = per_host // c
    return np.concatenate(
        [np.arange(k * n * c + h * c, k * n * c + (h + 1) * c) for k in
         range(rounds)]
    )


def balanced_assignment(
    lengths: Sequence[int], num_hosts: int
) -> list[np.ndarray]:
  """Deals prompts to hosts by length, in snake order (O3).

  Prompts are ranked by length, longest first (ties: earlier position
  first); rank r goes to host r mod H in even rounds and H-1 - (r mod H) in
  odd rounds. Every host gets len(lengths) / H prompts; a host's largest
  possible excess over another is one prompt's length per pair of rounds.

  Args:
    lengths: length of each prompt of the global batch (e.g. token counts).
    num_hosts: H; must divide len(lengths).

  Returns:
    For each host, the increasing positions of its prompts.
  """
  lengths = np.asarray(lengths, dtype=np.int64)
  total = lengths.shape[0]
  if num_hosts < 1 or total % num_hosts:
    raise ValueError(
        f"{total} prompts do not divide over {num_hosts} hosts."
    )
  # lexsort: last key is primary; positions break ties deterministically.
  order = np.lexsort((np.arange(total), -lengths))
  rank = np.empty(total, dtype=np.int64)
  rank[order] = np.arange(total)
  rnd, col = np.divmod(rank, num_hosts)
  host_of = np.where(rnd % 2 == 0, col, num_hosts - 1 - col)
  return [np.flatnonzero(host_of == h) for h in range(num_hosts)]


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
      length_fn: Callable[[Sequence[str]], Sequence[int]] | None = None,
  ):
    self._batches = global_batches
    self._config = config
    self._tracker = tracker
    self._length_fn = length_fn
    self.admission_seconds = 0.0  # Cumulative; read by the cluster's metrics.
    # One entry per yielded batch, consumed by the cluster at each step end.
    self.batch_stats: collections.deque[BatchStats] = collections.deque()
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
      prompts = batch["prompts"]
      if self._config.balance_by_length:
        # Every host measures the whole batch (the assignment must agree).
        lengths = self._lengths(prompts)
        idx = self._config.host_prompt_indices(n, lengths)
        tokens = int(np.sum(np.asarray(lengths)[idx]))
      else:
        idx = self._config.host_prompt_indices(n)
        tokens = (
            int(np.sum(self._lengths(_take(prompts, idx))))
            if self._length_fn is not None
            else -1
        )
      local = {k: _take(v, idx) for k, v in batch.items()}
      if self._tracker is not None:
        self._tracker.push_prompts(
            self._stream_offset + idx, self._config.num_generations
        )
      self._stream_offset += n
      self.batch_stats.append(
          BatchStats(digest=prompts_digest(prompts), prompt_tokens=tokens)
      )
      self.admission_seconds += time.perf_counter() - t0
      yield local

  def _lengths(self, prompts: Sequence[Any]) -> list[int]:
    if self._length_fn is None:
      return [len(str(p)) for p in prompts]
    return [int(x) for x in self._length_fn(list(prompts))]


class Admission:
  """Per-host admission of prompts plus the row identities for the engine."""

  def __init__(
      self,
      config: AdmissionConfig,
      row_ids: RowIdTracker | None = None,
      length_fn: Callable[[Sequence[str]], Sequence[int]] | None = None,
  ):
    """Initializes admission.

    Args:
      config: how batches are split.
      row_ids: where admitted rows' identities go (default: a new tracker).
      length_fn: prompt lengths (e.g. token counts) for balancing and the
        per-host prompt-token metric; admission time includes it. Default:
        character counts for balancing, no metric.
    """
    self.config = config
    self.row_ids = row_ids if row_ids is not None else RowIdTracker()
    self._length_fn = length_fn
    self._datasets: list[ShardedDataset] = []

  def shard(self, global_batches: Iterable[Mapping[str, Any]]) -> ShardedDataset:
    ds = ShardedDataset(
        global_batches, self.config, self.row_ids, self._length_fn
    )
    self._datasets.append(ds)
    return ds

  def admission_seconds(self) -> float:
    return sum(d.admission_seconds for d in self._datasets)

  def pop_batch_stats(self) -> BatchStats | None:
    """The oldest unreported batch's stats (the learner's current step)."""
    for d in self._datasets:
      if d.batch_stats:
        return d.batch_stats.popleft()
    return None
