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

"""Sequence packing under mcjax, with the hosts' agreement on K.

Tunix's `max_seq_token_per_tpu` packs the learner's rows into rows of that
many tokens (prompt and completion of several sequences back to back). Under
mcjax each host packs only its own rows, so hosts may need different numbers
of packed rows K for the same micro-batch, while the train step is one
global program whose batch must have the same shape on every host. So, per
micro-batch (the paper's Algorithm 1):

1. each host packs its rows first-fit in row order (`first_fit`:
   deterministic) into K_h rows of the budget;
2. the hosts agree on K = max_h K_h (rounded up to the host's data-parallel
   devices) with one tiny all-gather issued at the same point on every host
   (`Agreement`, with a timeout);
3. each host pads to K with empty rows (segment 0, completion mask 0: no
   loss weight), and the micro-batch is one `update_actor` call, as
   unpacked (Tunix's own packer makes each packed row its own call, i.e.
   its own optimizer update).

With `loss_agg_mode="token-mean"` the loss is a sum over completion tokens
divided by their count, which packing does not change; with the causal
same-segment mask (`compat.packing`) every token sees what it sees unpacked.
The packed losses then equal the unpacked ones up to float summation order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
import dataclasses
import functools
import time
from typing import Any

from absl import logging
import jax.numpy as jnp
import numpy as np

from tunix_mcjax import rules
from tunix_mcjax.compat import packing as compat_packing

# Per-token fields Tunix carries through packing (tunix.rl.utils
# `_OPTIONAL_PER_TOKEN_KEYS`, those a TrainExample has).
_PER_TOKEN_KEYS = ("ref_per_token_logps", "old_per_token_logps")
# Seconds a host waits for the others' K before giving up.
DEFAULT_AGREEMENT_TIMEOUT_S = 600.0


def first_fit(lengths: Sequence[int], budget: int) -> list[list[int]]:
  """Row indices per packed row: each row into the first with room.

  Args:
    lengths: tokens of each row (prompt + completion), in row order.
    budget: tokens per packed row.

  Returns:
    Packed rows, each the indices of its rows in ascending order; packed
    rows in the order they were opened.

  Raises:
    ValueError: a row is longer than the budget (Tunix drops such a row with
      a warning, which would change the loss).
  """
  bins: list[list[int]] = []
  free: list[int] = []
  for i, n in enumerate(lengths):
    if n > budget:
      raise ValueError(
          f"A row of {n} tokens (prompt + completion) does not fit in"
          f" max_seq_token_per_tpu={budget}; set it to at least the longest"
          " prompt plus max_tokens_to_generate."
      )
    for b, room in enumerate(free):
      if n <= room:
        bins[b].append(i)
        free[b] -= n
        break
    else:
      bins.append([i])
      free.append(budget - n)
  return bins


def agreed_rows(local_rows: Sequence[int], multiple: int) -> int:
  """K: the most packed rows of any host, rounded up to `multiple` (>= 1)."""
  k = max(1, max(local_rows))
  return -(-k // multiple) * multiple


@dataclasses.dataclass(frozen=True, kw_only=True)
class PackStats:
  """One packed micro-batch on one host.

  Attributes:
    local_rows: packed rows this host needed (K_h, before the agreement).
    rows: packed rows after the agreement (K, same on every host).
    real_tokens: prompt and completion tokens packed.
    slots: rows * budget.
    unpacked_slots: token slots of the same rows unpacked (rows x (prompt
      width + completion width), as the learner handed them over).
  """

  local_rows: int
  rows: int
  real_tokens: int
  slots: int
  unpacked_slots: int = 0


def _rows_of(examples: Sequence[Any]) -> list[dict[str, Any]]:
  """The micro-batch's rows, each cut to what the unpacked loss reads.

  A prompt is its masked (left-padded) tail. A completion runs to its last
  loss-bearing token: later tokens are seen by no token of the loss (causal
  attention), so a row without any is left out. Tokens equal to the pad id
  inside a completion stay (Tunix's unpacked path gives them no key, and
  does not advance positions over them: `process_ids`; the packed path does
  the same, see `segment_positions` and `compat.packing`). Tunix's own
  `unpad_train_example` cuts completions to their mask's sum instead, which
  drops real tokens when a pad-id token is masked inside a completion.
  """
  rows = []
  for ex in examples:
    if getattr(ex, "sampler_is_weights", None) is not None:
      raise NotImplementedError(
          "Sequence packing under mcjax does not carry sampler_is_weights"
          " (truncated importance sampling); disable it or unset"
          " max_seq_token_per_tpu."
      )
    p_ids = np.asarray(ex.prompt_ids)
    p_mask = np.asarray(ex.prompt_mask).astype(bool)
    c_ids = np.asarray(ex.completion_ids)
    c_mask = np.asarray(ex.completion_mask)
    adv = np.asarray(ex.advantages)
    per_token = {k: getattr(ex, k) for k in _PER_TOKEN_KEYS}
    per_token = {k: np.asarray(v) for k, v in per_token.items()
                 if v is not None}
    for i in range(p_ids.shape[0]):
      loss_at = np.flatnonzero(c_mask[i])
      if not loss_at.size:
        continue
      end = int(loss_at[-1]) + 1
      p_len = int(p_mask[i].sum())
      row = {
          "prompt_ids": p_ids[i, p_ids.shape[1] - p_len:],
          "completion_ids": c_ids[i, :end],
          "completion_mask": c_mask[i, :end],
          "advantages": adv[i, :end] if adv.ndim == 2 else adv[i],
      }
      row.update({k: v[i, :end] for k, v in per_token.items()})
      rows.append(row)
  return rows


def segment_positions(ids: np.ndarray, pad_id: int) -> np.ndarray:
  """Positions of one packed sequence, as Tunix's unpacked path counts them.

  `build_positions_from_mask` over `ids != pad_id`: a pad-id token takes the
  position of the token before it.
  """
  count = np.cumsum(ids != pad_id)
  return (count - (count >= 1)).astype(np.int32)


def build_packed(
    items: Sequence[dict[str, Any]],
    bins: Sequence[Sequence[int]],
    *,
    budget: int,
    rows: int,
    example_cls: type,
    pad_id: int = 0,
) -> Any:
  """One TrainExample of `rows` packed rows (the layout of Tunix's packer).

  Each packed row holds its rows' prompt and completion tokens back to back;
  `segment_ids` number the sequences from 1 (0: padding),
  `segment_positions` count from 0 in each (`segment_positions`); the
  completion mask and the per-token advantages and log-probs are zero on
  prompts and padding. Rows past `len(bins)` are empty.
  """
  if rows < len(bins):
    raise ValueError(f"{len(bins)} packed rows do not fit in {rows}.")
  ids = np.full((rows, budget), pad_id, np.int32)
  mask = np.zeros((rows, budget), np.int32)
  adv = np.zeros((rows, budget), np.float32)
  seg = np.zeros((rows, budget), np.int32)
  pos = np.zeros((rows, budget), np.int32)
  keys = [k for k in _PER_TOKEN_KEYS if items and k in items[0]]
  per_token = {k: np.zeros((rows, budget), np.float32) for k in keys}
  for r, members in enumerate(bins):
    at = 0
    for s, i in enumerate(members, start=1):
      item = items[i]
      p, c = item["prompt_ids"], item["completion_ids"]
      n_p, n = len(p), len(p) + len(c)
      ids[r, at:at + n_p] = p
      ids[r, at + n_p:at + n] = c
      mask[r, at + n_p:at + n] = item["completion_mask"]
      adv[r, at + n_p:at + n] = item["advantages"]
      for k in keys:
        per_token[k][r, at + n_p:at + n] = item[k]
      seg[r, at:at + n] = s
      pos[r, at:at + n] = segment_positions(ids[r, at:at + n], pad_id)
      at += n
  kwargs = dict(
      prompt_ids=jnp.zeros((rows, 0), jnp.int32),
      prompt_mask=jnp.zeros((rows, 0), jnp.int32),
      completion_ids=ids,
      completion_mask=mask,
      advantages=adv,
      ref_per_token_logps=per_token.get("ref_per_token_logps"),
      old_per_token_logps=per_token.get("old_per_token_logps"),
      segment_ids=seg,
      segment_positions=pos,
  )
  return example_cls(**kwargs)


def pack_micro_batch(
    examples: Sequence[Any],
    budget: int,
    *,
    agree: Callable[[int], int],
    pad_id: int = 0,
) -> tuple[Any, PackStats]:
  """Packs one host's rows of one micro-batch into K agreed rows.

  Args:
    examples: the micro-batch as the learner queues it (TrainExamples).
    budget: tokens per packed row (`max_seq_token_per_tpu`).
    agree: this host's K_h -> K (the same on every host; see `Agreement`).
    pad_id: token id of padding.

  Returns:
    The packed TrainExample ([K, budget] arrays) and its stats.
  """
  items = _rows_of(examples)
  lengths = [len(it["prompt_ids"]) + len(it["completion_ids"]) for it in items]
  bins = first_fit(lengths, budget)
  rows = agree(len(bins))
  example = build_packed(
      items, bins, budget=budget, rows=rows, example_cls=type(examples[0]),
      pad_id=pad_id,
  )
  unpacked = sum(
      int(np.shape(ex.completion_ids)[0]) * (
          int(np.shape(ex.prompt_ids)[1]) + int(np.shape(ex.completion_ids)[1]))
      for ex in examples)
  return example, PackStats(
      local_rows=len(bins), rows=rows, real_tokens=int(sum(lengths)),
      slots=rows * budget, unpacked_slots=unpacked,
  )


class Agreement:
  """K = max over hosts of K_h, by one tiny all-gather, with a timeout.

  Called on the learner's main thread, once per packed micro-batch, so every
  host issues the gather at the same point of its sequence of collectives.
  """

  def __init__(
      self,
      gather: Any,
      *,
      multiple: int,
      timeout_s: float = DEFAULT_AGREEMENT_TIMEOUT_S,
  ):
    """Initializes the agreement.

    Args:
      gather: a `telemetry.HostGather` (one row of numbers per host).
      multiple: K is rounded up to this (the host's data-parallel devices,
        so the packed rows split over them).
      timeout_s: how long to wait for the other hosts.
    """
    self._gather = gather
    self._multiple = multiple
    self._timeout_s = timeout_s
    self.calls = 0

  def __call__(self, local_rows: int) -> int:
    self.calls += 1
    pending = self._gather.dispatch(np.array([local_rows], np.float32))
    deadline = time.monotonic() + self._timeout_s
    is_ready = getattr(pending, "is_ready", None)
    while is_ready is not None and not is_ready():
      if time.monotonic() > deadline:
        raise TimeoutError(
            f"Packing: no agreement on the number of packed rows (K) within"
            f" {self._timeout_s:.0f} s at packed micro-batch {self.calls}:"
            " another host did not reach the same micro-batch (it failed,"
            " or its learner queued a different number of micro-batches)."
            " Check the other hosts' logs."
        )
      time.sleep(0.001)
    everyone = self._gather.read(pending)[:, 0]
    return agreed_rows([int(k) for k in everyone], self._multiple)


class Packer:
  """Stands in for `tunix.rl.utils.pack_sequences` under an mcjax cluster.

  One packed batch per micro-batch the learner queues (so one
  `update_actor` call and the unpacked number of optimizer updates).
  """

  def __init__(
      self,
      *,
      agree: Callable[[int], int],
      check: Callable[[], None] | None = None,
      on_packed: Callable[[PackStats], None] | None = None,
      pad_id: int | None = None,
  ):
    """Initializes the packer.

    Args:
      agree: K_h -> K (see `Agreement`).
      check: called before the first micro-batch is packed (refuses a
        learner whose loss packing would change).
      on_packed: receives each micro-batch's stats (telemetry).
      pad_id: the pad id the learner's loss masks by (its rollout's);
        Tunix's learner passes none to the packer (None: the call's).
    """
    self._pad_id = pad_id
    self._agree = agree
    self._check = check
    self._on_packed = on_packed
    self._checked = False

  def __call__(
      self,
      item_iterator: Iterator[list[Any]],
      max_token_budget: int,
      pad_id: int = 0,
  ) -> Iterator[list[Any]]:
    for item in item_iterator:
      if not self._checked and self._check is not None:
        self._check()
      self._checked = True
      example, stats = pack_micro_batch(
          item, max_token_budget, agree=self._agree,
          pad_id=pad_id if self._pad_id is None else self._pad_id,
      )
      if self._on_packed is not None:
        self._on_packed(stats)
      yield [example]


def check_learner(trainer: Any, max_seq_token_per_tpu: int) -> None:
  """Refuses a learner whose loss packing would change (before the first
  packed micro-batch; every host reads the same config).

  Args:
    trainer: Tunix's actor trainer (its learner's algorithm config is read).
    max_seq_token_per_tpu: the training config's packing budget.
  """
  algo = compat_packing.learner_algo_config(trainer)
  if algo is None or not hasattr(algo, "loss_agg_mode"):
    raise NotImplementedError(
        "max_seq_token_per_tpu (sequence packing) under mcjax needs a"
        " Tunix GRPO-family learner (GRPOLearner, DAPOLearner,"
        " DrGRPOLearner), whose loss_agg_mode it checks; unset it."
    )
  problem = rules.sequence_packing(
      max_seq_token_per_tpu,
      loss_agg_mode=algo.loss_agg_mode,
      num_iterations=getattr(algo, "num_iterations", 1),
  )
  if problem is not None:
    problem.raise_()


def install(
    *,
    gather: Any,
    multiple: int,
    timeout_s: float,
    pad_id: int | None,
    trainer: Any,
    max_seq_token_per_tpu: int,
    host_index: int,
    on_stats: Callable[[PackStats], None],
) -> compat_packing.PackingHandle:
  """Puts mcjax's packer in Tunix's place while a cluster lives.

  Args:
    gather: a `telemetry.HostGather` for the agreement on K.
    multiple: the host's data-parallel devices (K is rounded up to it).
    timeout_s: how long a host waits for the others' K.
    pad_id: the pad id the learner's loss masks by (the rollout's).
    trainer: Tunix's actor trainer, whose learner `check_learner` checks
      before the first packed micro-batch.
    max_seq_token_per_tpu: the training config's packing budget.
    host_index: this host (for the log line).
    on_stats: receives each micro-batch's stats (telemetry).

  Returns:
    The handle that undoes the install (the cluster's close()).
  """

  def on_packed(stats: PackStats) -> None:
    on_stats(stats)
    logging.info(
        "Packing: host %d packed %d rows, agreed K=%d (%d real tokens in"
        " %d slots).", host_index, stats.local_rows, stats.rows,
        stats.real_tokens, stats.slots,
    )

  return compat_packing.install_packing(Packer(
      agree=Agreement(gather, multiple=multiple, timeout_s=timeout_s),
      check=functools.partial(check_learner, trainer, max_seq_token_per_tpu),
      on_packed=on_packed, pad_id=pad_id,
  ))
