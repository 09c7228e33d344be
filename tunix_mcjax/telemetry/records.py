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

"""The one step-record schema: what a host measures, what a record says.

`HOST_FIELDS` is one host's row of numbers per step (`StepClock.host_numbers`
fills it); `build_record` turns every host's row into the `StepRecord` that
both backends write (fields in docs/metrics.md): the slowest host's phases
(the one with the most time not spent waiting), the longest wait at each
cross-host point, and the step totals.

Since every host runs the same program in a cross-host call, the host that
spent the least time in it arrived last; another host's excess over that
minimum is the time it waited for the slowest host (no clocks are compared
across hosts). No JAX here: the advisor and the benchmark read the schema.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import numpy as np

# Phases of a step, in the learner's order. `learner_host` is whatever the
# other phases and the host overheads leave of the step.
PHASES = ("admission", "generate", "logps", "reward", "learner_host", "train",
          "publish")
LEFTOVER_PHASE = "learner_host"
# Name prefix of the phases' ranges in a JAX profiler trace.
PHASE_TRACE_PREFIX = "mcjax/phase/"
# Cross-host points of a step (global programs every host joins).
CROSS_HOST_POINTS = ("logps", "train", "publish")
# Host work outside the phases: exporting the previous step's metrics, and
# the end-of-step garbage collection.
HOST_OVERHEADS = ("metrics_export", "gc")
# One host's numbers of a step, in this order (`StepClock.host_numbers`).
HOST_FIELDS = (
    "reward_mean",
    "len_mean",
    "step_s",
    *(f"phase/{p}" for p in PHASES),
    *(f"in_xhost/{p}" for p in CROSS_HOST_POINTS),
    *(f"overhead/{o}" for o in HOST_OVERHEADS),
    "gen_rows",
    "gen_tokens",
    "gen_max_len",
    "gen_truncated",
    "decode_iterations",
    "prompt_tokens",
    "publish_calls",
    "gc_explicit",
    "gc_skipped",
    "gc_frozen",
    "gc_full_collections",
    # Sequence packing (`tunix_mcjax.packing`), summed over the step's
    # micro-batches: packed rows before and after the hosts' agreement on K,
    # real tokens packed, and token slots (rows x budget).
    "packed_rows_local",
    "packed_rows",
    "packed_tokens",
    "packed_slots",
    # The train batch as the learner hands it over (unpacked, padded as Tunix
    # pads it): tokens the loss reads and token slots (`train_batch_tokens`).
    "train_tokens",
    "train_slots",
)
_F = {name: i for i, name in enumerate(HOST_FIELDS)}
# What a "mcjax_da" record adds (`StepMeta.extras`, from trainer host 0's
# view; meanings in docs/disaggregated.md), on every step. With
# max_staleness >= 1 the importance-weight statistics follow too
# (`DISAGGREGATED_IS_FIELDS`).
DISAGGREGATED_FIELDS = (
    "policy_version",
    "staleness",
    "rollout_wait_s",
    "rollout_generate_s",
    "weights_wait_s",
    # Of the batch's weights (version policy_version), slowest rollout host:
    # its get from Ray's object store, its install onto devices.
    "weights_get_s",
    "weights_install_s",
    # This step's publication: the put into Ray's object store, bytes put.
    "weights_put_s",
    "weights_bytes",
    "reissued_rows",
    "rollout_host_failures",
)
DISAGGREGATED_IS_FIELDS = (
    "is_weight_mean",
    "is_weight_min",
    "is_weight_max",
    "is_weight_max_dev_aligned",
    "misaligned_tokens",
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepMeta:
  """What a step record says beyond the hosts' numbers."""

  step: int
  backend: str
  loss: float | None
  grad_norm: float | None
  prompts_digest: str | None
  publish_bytes: int | None
  optimizations: dict[str, bool] | None
  # Backend-specific fields, added to the record's top level (e.g. the
  # disaggregated mode's policy_version and staleness).
  extras: dict[str, Any] | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepRecord:
  """One learner step; `as_dict()` is the JSONL object.

  Attributes:
    step: the step number (1-based).
    backend: "mcjax" or "tunix".
    num_hosts: hosts (processes) of the job.
    reward_mean: mean reward over every scored row.
    completion_len_mean: mean completion length (tokens).
    completion_len_max: longest completion.
    completion_tokens: completion tokens over all hosts.
    truncated_share: share of rows that used the whole completion budget.
    loss: the learner's loss of the step.
    grad_norm: its gradient norm.
    step_time_s: the slowest host's step time.
    phases: the slowest host's phases (`PHASES`); with `host_overhead` they
      add up to `step_time_s`.
    host_overhead: the slowest host's `HOST_OVERHEADS`.
    slowest_host: the host with the most time not spent waiting.
    straggler_wait: the longest wait of any host at each cross-host point,
      and the longest total.
    decode_iterations: most decode iterations of any host.
    decode_iter_s: generation time / decode iterations (prefill and
      tokenization included), slowest host.
    host_prompt_tokens: each host's admitted prompt tokens (-1: unknown).
    prompts_digest: fingerprint of the global batch's prompts.
    publish_bytes: bytes the step's publication moved (None: not measured).
    publish_calls: engine update calls of the step.
    gc: garbage-collection counts of the step.
    optimizations: the mcjax host-side optimizations (None: stock cluster).
    exported_on: the thread the record was built on.
    padded_token_share: share of the packed rows' token slots that are
      padding, over all hosts (None: no packing).
    host_packed_rows: each host's packed rows before the agreement on K,
      summed over the step's micro-batches (None: no packing).
    unpacked_padded_token_share: share of the unpacked train batch's token
      slots (rows x (prompt + completion width), as Tunix pads them) that
      hold no token the loss reads (`train_batch_tokens`), over all hosts;
      with packing, what the same rows would have padded unpacked (None:
      no train batch seen).
  """

  step: int
  backend: str
  num_hosts: int
  reward_mean: float | None
  completion_len_mean: float | None
  completion_len_max: int
  completion_tokens: int
  truncated_share: float | None
  loss: float | None
  grad_norm: float | None
  step_time_s: float
  phases: dict[str, float]
  host_overhead: dict[str, float]
  slowest_host: int
  straggler_wait: dict[str, float]
  decode_iterations: int
  decode_iter_s: float | None
  host_prompt_tokens: list[int]
  prompts_digest: str | None
  publish_bytes: int | None
  publish_calls: int
  gc: dict[str, Any]
  optimizations: dict[str, bool] | None
  exported_on: str
  padded_token_share: float | None = None
  host_packed_rows: list[int] | None = None
  unpacked_padded_token_share: float | None = None

  # Backend-specific fields (`StepMeta.extras`), at the JSON's top level.
  extras: dict[str, Any] | None = None

  def as_dict(self) -> dict[str, Any]:
    out = dataclasses.asdict(self)
    extras = out.pop("extras") or {}
    clash = set(extras) & set(out)
    if clash:
      raise ValueError(f"Step record extras shadow fields {sorted(clash)}.")
    out.update(extras)
    return out


def _mean_or_none(x: np.ndarray) -> float | None:
  x = x[np.isfinite(x)]
  # Every host scores the same number of rows, so the global mean is the
  # mean of host means.
  return float(x.mean()) if x.size else None


def build_record(
    everyone: np.ndarray, meta: StepMeta, *, exported_on: str | None = None
) -> StepRecord:
  """The step's record from every host's numbers (rows: hosts)."""
  everyone = np.asarray(everyone)
  if everyone.ndim != 2 or everyone.shape[1] != len(HOST_FIELDS):
    raise ValueError(
        f"Expected one row of {len(HOST_FIELDS)} numbers per host, got shape"
        f" {everyone.shape}."
    )
  col = lambda name: everyone[:, _F[name]].astype(np.float64)
  in_call = np.stack(
      [col(f"in_xhost/{p}") for p in CROSS_HOST_POINTS], axis=1
  )
  # Same program on every host: time in a cross-host call beyond the least
  # any host spent there is waiting for the slowest host.
  waits = in_call - in_call.min(axis=0, keepdims=True)
  busy = col("step_s") - waits.sum(axis=1)
  slow = int(np.argmax(busy))
  rows = float(col("gen_rows").sum())
  gen_s = col("phase/generate")
  iters = col("decode_iterations")
  per_iter = np.where(iters > 0, gen_s / np.maximum(iters, 1), np.nan)
  # float32 counts stay exact below 2**24 (tokens of one step, per host).
  slots = float(col("packed_slots").sum())
  train_slots = float(col("train_slots").sum())
  return StepRecord(
      step=int(meta.step),
      backend=meta.backend,
      num_hosts=int(everyone.shape[0]),
      reward_mean=_mean_or_none(col("reward_mean")),
      completion_len_mean=_mean_or_none(col("len_mean")),
      completion_len_max=int(col("gen_max_len").max()),
      completion_tokens=int(col("gen_tokens").sum()),
      truncated_share=(
          float(col("gen_truncated").sum() / rows) if rows else None
      ),
      loss=meta.loss,
      grad_norm=meta.grad_norm,
      # The slowest host's step and phases (the phases add up to it; the
      # hosts' own step clocks differ by when each left the last collective,
      # not by work).
      step_time_s=float(col("step_s")[slow]),
      phases={p: float(col(f"phase/{p}")[slow]) for p in PHASES},
      host_overhead={
          o: float(col(f"overhead/{o}")[slow]) for o in HOST_OVERHEADS
      },
      slowest_host=slow,
      straggler_wait={
          **{p: float(waits[:, i].max())
             for i, p in enumerate(CROSS_HOST_POINTS)},
          "total": float(waits.sum(axis=1).max()),
      },
      decode_iterations=int(iters.max()),
      # The engines decode in one jitted loop.
      decode_iter_s=(
          float(np.nanmax(per_iter)) if np.isfinite(per_iter).any() else None
      ),
      host_prompt_tokens=[int(x) for x in col("prompt_tokens")],
      prompts_digest=meta.prompts_digest,
      publish_bytes=meta.publish_bytes,
      publish_calls=int(col("publish_calls").max()),
      gc={
          "explicit_collects": int(col("gc_explicit").max()),
          "skipped_collects": int(col("gc_skipped").max()),
          "frozen": bool(col("gc_frozen").min() > 0),
          "full_collections": int(col("gc_full_collections").max()),
      },
      optimizations=meta.optimizations,
      extras=dict(meta.extras) if meta.extras else None,
      exported_on=(
          threading.current_thread().name if exported_on is None
          else exported_on
      ),
      padded_token_share=(
          1.0 - float(col("packed_tokens").sum()) / slots if slots else None
      ),
      host_packed_rows=(
          [int(x) for x in col("packed_rows_local")] if slots else None
      ),
      unpacked_padded_token_share=(
          1.0 - float(col("train_tokens").sum()) / train_slots
          if train_slots else None
      ),
  )
