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

Admission writes one entry per admitted batch into a `StepLedger`
(`tunix_mcjax.ledger`, re-exported here): the admitted rows' identities,
the admission time and the batch's statistics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
import dataclasses
import contextlib
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


# The step ledger lives in its own module; callers read its names here too.
# pylint: disable=unused-import,g-importing-member,g-bad-import-order
from tunix_mcjax.ledger import BatchStats
from tunix_mcjax.ledger import ClosedStep
from tunix_mcjax.ledger import LedgerEntry
from tunix_mcjax.ledger import StepLedger
from tunix_mcjax.ledger import prompts_digest
# pylint: enable=unused-import,g-importing-member,g-bad-import-order


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


@dataclasses.dataclass(frozen=True, kw_only=True)
class ResumeAt:
  """Where a resumed run's first pass over the dataset continues.

  Attributes:
    data_position: global prompts of the stream trained before the
      checkpoint; the batches holding them are skipped without recording
      (identities continue from here, on any host count).
    fast_forward_micro_batches: micro-batches that the learner pulls and
      discards before its first batch (Tunix's learner fast-forwards its
      iterator by the restored trainer's `iter_steps`); batches covering
      them are yielded first, unrecorded.
    micro_batch_size: the learner's per-host training micro-batch (None:
      it iterates whole batches).
  """

  data_position: int
  fast_forward_micro_batches: int = 0
  micro_batch_size: int | None = None

  def __post_init__(self):
    if self.data_position < 0 or self.fast_forward_micro_batches < 0:
      raise ValueError(f"Resume positions must be >= 0, got {self}.")

  def fast_forward_batches(self, host_batch_size: int) -> int:
    """Batches of `host_batch_size` prompts the fast-forward consumes."""
    if self.micro_batch_size is None:
      return self.fast_forward_micro_batches
    prompts = self.fast_forward_micro_batches * self.micro_batch_size
    if prompts % host_batch_size:
      raise ValueError(
          f"The learner fast-forwards {prompts} prompts per host, not a whole"
          f" number of this host's {host_batch_size}-prompt batches: the"
          " checkpoint was written inside a global step (its save interval,"
          " in optimizer updates, must be a multiple of the updates per"
          " global step)."
      )
    return prompts // host_batch_size


class ShardedDataset(Iterable[dict[str, Any]]):
  """This host's share of a stream of global batches (re-iterable)."""

  def __init__(
      self,
      global_batches: Iterable[Mapping[str, Any]],
      config: AdmissionConfig,
      ledger: StepLedger,
      length_fn: Callable[[Sequence[str]], Sequence[int]] | None = None,
      first_prompt_index: int = 0,
      same_identities_each_pass: bool = False,
      resume: ResumeAt | None = None,
  ):
    self._batches = global_batches
    # Applied to the first pass only (a resumed run continues that pass).
    self._resume = resume
    self._first_prompt_index = first_prompt_index
    self._same_identities_each_pass = same_identities_each_pass
    self._config = config
    self._ledger = ledger
    self._length_fn = length_fn
    # Cumulative admission time of this dataset (benchmarks; the cluster
    # reads the ledger).
    self.admission_seconds = 0.0
    # Prompt indices keep counting across epochs, so a prompt seen again
    # draws fresh sampling noise.
    self._stream_offset = first_prompt_index

  def __iter__(self) -> Iterator[dict[str, Any]]:
    if self._same_identities_each_pass:
      self._stream_offset = self._first_prompt_index
    resume, self._resume = self._resume, None
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
      if resume is not None:
        trained = self._stream_offset - self._first_prompt_index
        if trained < resume.data_position:
          # Trained before the checkpoint: skipped without taking identities.
          self._stream_offset += n
          continue
        if trained != resume.data_position:
          raise ValueError(
              f"The checkpoint's data position {resume.data_position} is not"
              f" at a batch boundary of this dataset ({n} prompts per batch):"
              " resume with the batch size the checkpoint was written with."
          )
        # The learner's own fast-forward (it pulls and discards the batches
        # it believes were trained): unrecorded copies, so that no row id is
        # consumed by a batch that is never generated.
        for _ in range(resume.fast_forward_batches(len(idx))):
          yield local
        resume = None
      stats = BatchStats(digest=prompts_digest(prompts), prompt_tokens=tokens)
      prompt_indices = self._stream_offset + idx
      self._stream_offset += n
      elapsed = time.perf_counter() - t0
      self.admission_seconds += elapsed
      self._ledger.record_batch(
          prompt_indices, self._config.num_generations, stats=stats,
          admission_s=elapsed,
          stream_end=self._stream_offset - self._first_prompt_index,
      )
      yield local

  def _lengths(self, prompts: Sequence[Any]) -> list[int]:
    if self._length_fn is None:
      return [len(str(p)) for p in prompts]
    return [int(x) for x in self._length_fn(list(prompts))]


class Admission:
  """Per-host admission of prompts into a `StepLedger`."""

  def __init__(
      self,
      config: AdmissionConfig,
      ledger: StepLedger | None = None,
      length_fn: Callable[[Sequence[str]], Sequence[int]] | None = None,
  ):
    """Initializes admission.

    Args:
      config: how batches are split.
      ledger: where admitted batches are recorded (default: a new ledger).
      length_fn: prompt lengths (e.g. token counts) for balancing and the
        per-host prompt-token metric; admission time includes it. Default:
        character counts for balancing, no metric.
    """
    self.config = config
    self.ledger = ledger if ledger is not None else StepLedger()
    self._length_fn = length_fn
    self._stats_popped = 0

  @property
  def row_ids(self) -> StepLedger:
    """The engine's row-id source (`RowIdSource`): the ledger."""
    return self.ledger

  def shard(
      self, global_batches: Iterable[Mapping[str, Any]], *,
      first_prompt_index: int = 0,
      same_identities_each_pass: bool = False,
      resume: ResumeAt | None = None,
  ) -> ShardedDataset:
    """This host's share of `global_batches`.

    Args:
      global_batches: the global batches, the same on every host.
      first_prompt_index: the identity of the first batch's first prompt
        (e.g. `EVAL_FIRST_PROMPT_INDEX` for an evaluation stream).
      same_identities_each_pass: every iteration starts again at
        `first_prompt_index` (an evaluation set: each pass samples with the
        same noise, so passes differ only by the policy). Default: identities
        keep counting, so a prompt seen again draws fresh noise.
      resume: a resumed run's position (`checkpointing`); None: from the
        start.
    """
    return ShardedDataset(
        global_batches, self.config, self.ledger, self._length_fn,
        first_prompt_index=first_prompt_index,
        same_identities_each_pass=same_identities_each_pass,
        resume=resume,
    )

  def shard_eval(
      self, global_batches: Iterable[Mapping[str, Any]]
  ) -> ShardedDataset:
    """An evaluation set: identities from `EVAL_FIRST_PROMPT_INDEX`, the
    same on every pass."""
    return self.shard(
        global_batches, first_prompt_index=EVAL_FIRST_PROMPT_INDEX,
        same_identities_each_pass=True,
    )

  def pop_batch_stats(self) -> BatchStats | None:
    """The oldest open batch's stats not returned here yet (tools, tests).

    Reads without closing the ledger entry; a learner step closes it.
    """
    for entry in self.ledger.entries:
      if entry.batch >= self._stats_popped:
        self._stats_popped = entry.batch + 1
        return entry.stats
    return None


# Evaluation rows' prompt identities start here, so that no evaluation row is
# keyed like a training row (training streams would need 2**31 prompts to
# reach it); row ids must stay below 2**32.
EVAL_FIRST_PROMPT_INDEX = 2**31


class TrainEvalRowIds:
  """The engines' `RowIdSource` for training and evaluation rows.

  Training and evaluation prompts are admitted into two ledgers, so that an
  evaluation pass never takes training rows' identities (nor the reverse).
  The cluster brackets an evaluation generate call with `evaluating()`;
  Tunix's learner generates evaluation rollouts on its main thread while no
  training generate call is in flight (its data thread has handed the step's
  batch over), so one switch serves both.

  Evaluation rows may span admitted batches in one call (Tunix's learner
  merges evaluation batches up to its rollout size); the rows of a fully
  generated evaluation batch are closed at once, as no learner step owns
  them.
  """

  def __init__(self, train: StepLedger, evaluation: StepLedger):
    self.train = train
    self.evaluation = evaluation
    self._evaluating = 0
    self._lock = threading.Lock()
    # An agent turn's identity, set around its generate call.
    self._fixed = threading.local()

  @contextlib.contextmanager
  def evaluating(self) -> Iterator[None]:
    """Rows taken inside come from the evaluation ledger."""
    with self._lock:
      self._evaluating += 1
    try:
      yield
    finally:
      with self._lock:
        self._evaluating -= 1

  @property
  def is_evaluating(self) -> bool:
    """Whether rows are taken from the evaluation ledger now."""
    with self._lock:
      return self._evaluating > 0

  @contextlib.contextmanager
  def fixed(self, ids: np.ndarray) -> Iterator[None]:
    """This thread's next take returns `ids` (one agent turn's identity,
    `agent_turns`), from no ledger."""
    self._fixed.ids = ids
    try:
      yield
    finally:
      self._fixed.ids = None

  def take(self, num_rows: int) -> np.ndarray:
    ids = getattr(self._fixed, "ids", None)
    if ids is not None:
      if ids.shape[0] != num_rows:
        raise RuntimeError(
            f"The engine asked for {num_rows} rows in an agent turn of"
            f" {ids.shape[0]}.")
      self._fixed.ids = None
      return ids
    with self._lock:
      evaluating = self._evaluating > 0
    if not evaluating:
      return self.train.take(num_rows)
    parts = []
    left = num_rows
    while left:
      entry = next((e for e in self.evaluation.entries if e.rows_left), None)
      if entry is None:
        raise RuntimeError(
            f"An evaluation generate call asked for {num_rows} rows but"
            f" evaluation admission recorded {num_rows - left}: pass the"
            " learner the eval_ds returned by `cluster.shard_eval_dataset(...)`"
            " (or `Admission.shard_eval`), so that every evaluation row has"
            " an identity of its own."
        )
      k = min(left, entry.rows_left)
      parts.append(self.evaluation.take(k))
      left -= k
      # Fully generated evaluation batches belong to no learner step.
      while (self.evaluation.entries
             and not self.evaluation.entries[0].rows_left):
        self.evaluation.close_step()
    if not parts:
      return np.zeros((0, 2), dtype=np.int64)
    return np.concatenate(parts, axis=0)

  def pending(self) -> int:
    """Training rows recorded but not taken yet (as `StepLedger.pending`)."""
    return self.train.pending()


def route_eval_generate(cluster: Any, row_ids: TrainEvalRowIds) -> None:
  """Makes a stock cluster's evaluation generate calls take evaluation ids.

  For Tunix's stock `RLCluster` running an mcjax engine keyed by `row_ids`
  (the comparison runs); the mcjax cluster does this itself. Wraps the
  instance's `generate` (as `telemetry.stock` does), so nothing in Tunix
  changes.
  """
  inner = cluster.generate

  def generate(*args, **kwargs):
    # Tunix's learner passes the mode by keyword; str(Mode.EVAL) == "eval".
    if str(kwargs.get("mode", "train")) == "eval":
      with row_ids.evaluating():
        return inner(*args, **kwargs)
    return inner(*args, **kwargs)

  cluster.generate = generate


def route_agent_turns(cluster: Any, turns: Any) -> None:
  """Makes a stock cluster's agent turns take `turns`' identities
  (`agent_turns.AgentTurns`), as the mcjax cluster does itself; the
  learner reports its groups and evaluation passes to `turns` there too
  (`compat.agentic_learner`)."""
  cluster.agent_turns = turns
  inner = cluster.generate

  def generate(prompts, *args, **kwargs):
    def call(prompts, max_generation_steps):
      return inner(prompts, *args,
                   **{**kwargs, "max_generation_steps": max_generation_steps})

    return turns.generate(
        kwargs.get("trace_tags"), prompts, kwargs.get("max_generation_steps"),
        call, decode=cluster.tokenizer.decode)

  cluster.generate = generate
