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

"""One host's step clock: its phases, overheads and counts of a step.

Every host times its step with a `StepClock`: its phases (`records.PHASES`),
its host overheads (metrics export, garbage collection), its decode
iterations, and how long it spent in each cross-host call
(`records.CROSS_HOST_POINTS`). The `reward` phase is time inside the reward
functions (`timed_reward_fns`); `learner_host` is the rest of the learner's
host work between the timed calls (advantages, batching, Tunix's metric
buffering), so the phases and host overheads add up to the step.
`StepClock.host_numbers` lays the step out as one row of
`records.HOST_FIELDS`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
import contextlib
import functools
import threading
import time
from typing import Any

import jax
import numpy as np

from tunix_mcjax import host_optimizations
from tunix_mcjax import transfers
from tunix_mcjax.compat import metric_keys
from tunix_mcjax.telemetry import records

_GEN_KEYS = ("rows", "tokens", "max_len", "truncated", "decode_iterations")
_PACK_KEYS = ("local_rows", "rows", "real_tokens", "slots")


def _mask_tokens(xp: Any, p_mask: Any, c_mask: Any) -> Any:
  """Tokens the loss reads in one batch's masks (`xp`: numpy or jnp)."""
  p_mask = p_mask.astype(bool)
  c_mask = c_mask.astype(bool)
  # Index of the last loss-bearing token + 1 (0 for a row without any).
  width = c_mask.shape[1]
  last = xp.where(c_mask.any(axis=1),
                  width - xp.argmax(c_mask[:, ::-1], axis=1), 0)
  return xp.where(last > 0, p_mask.sum(axis=1) + last, 0).sum()


# On the masks' devices: only the scalar comes back, with the step record.
_device_mask_tokens = jax.jit(functools.partial(_mask_tokens, jax.numpy))


def train_batch_tokens(examples: Any) -> tuple[int, int]:
  """Tokens the loss reads and token slots of an unpacked train batch.

  Slots: rows x (prompt width + completion width), the padded layout Tunix
  trains on. Tokens: per row, its prompt tokens (prompt mask) plus its
  completion up to the last loss-bearing token (completion mask); a row
  without any counts none. The same count as sequence packing's real tokens
  (`packing.PackStats.real_tokens`), so the two padded shares compare.

  Args:
    examples: TrainExamples (or one), each with [rows, width] `prompt_mask`
      and `completion_mask`.

  Returns:
    (tokens, slots).
  """
  tokens, on_device, slots = _batch_counts(examples)
  return tokens + sum(int(n) for n in jax.device_get(on_device)), slots


def _batch_counts(examples: Any) -> tuple[int, list[jax.Array], int]:
  """`train_batch_tokens`, with the counts of jax.Array masks left on their
  devices (not copied to the host): (host tokens, device tokens, slots)."""
  if not isinstance(examples, (list, tuple)):
    examples = [examples]
  tokens = slots = 0
  on_device = []
  for ex in examples:
    if getattr(ex, "segment_ids", None) is not None:
      continue  # Packed already: counted by `StepClock.add_packing`.
    p_mask, c_mask = ex.prompt_mask, ex.completion_mask
    slots += c_mask.shape[0] * (p_mask.shape[1] + c_mask.shape[1])
    if isinstance(p_mask, jax.Array) and isinstance(c_mask, jax.Array):
      if p_mask.sharding != c_mask.sharding:
        p_mask = jax.device_put(p_mask, c_mask.sharding)
      on_device.append(_device_mask_tokens(p_mask, c_mask))
    else:
      tokens += int(_mask_tokens(np, np.asarray(p_mask), np.asarray(c_mask)))
  return tokens, on_device, slots


def generation_stats(
    output: Any, *, micro_batch_size: int | None, max_tokens: int
) -> dict[str, int]:
  """Row, token, truncation and decode-iteration counts of one generate call.

  The engines' decode loops stop when every row of a call is done, so a call
  runs as many decode iterations as its longest completion; with
  micro-batching, each micro-batch is one call.

  Args:
    output: a `RolloutOutput` (its `tokens`: one token sequence per row).
    micro_batch_size: the micro-batch the cluster generated with, or None.
    max_tokens: the completion budget; a row that used all of it counts as
      truncated.

  Returns:
    {"rows", "tokens", "max_len", "truncated", "decode_iterations"}.
  """
  lens = [len(t) for t in output.tokens]
  step = micro_batch_size or max(len(lens), 1)
  return {
      "rows": len(lens),
      "tokens": int(sum(lens)),
      "max_len": int(max(lens, default=0)),
      "truncated": int(sum(n >= max_tokens for n in lens)),
      "decode_iterations": int(sum(
          max(lens[i:i + step], default=0) for i in range(0, len(lens), step)
      )),
  }


def _gc_counts(policy: host_optimizations.GcPolicy | None) -> tuple[int, ...]:
  explicit = policy.explicit_collects if policy is not None else 0
  skipped = policy.skipped_collects if policy is not None else 0
  return explicit, skipped, host_optimizations.full_collections()


class StepClock:
  """One host's timers and counters of the current step.

  Reset in place at each step start, so that wrappers holding the clock
  (`timed`, `timed_reward_fns`) keep timing into the current step.
  `step`: the step being timed (as its record numbers it), if known.
  """

  def __init__(self, gc_policy: host_optimizations.GcPolicy | None = None):
    self._gc_policy = gc_policy
    # Generation counts of later steps (`add_generation`), by step index.
    self._lock = threading.Lock()
    self._gen_ahead: dict[int, list[Mapping[str, int]]] = {}
    self.step: int | None = None
    # The innermost phase running now and since when (time.monotonic()), or
    # None: what the step watchdog names when a step hangs.
    self.current: tuple[str, float] | None = None
    self.reset(time.perf_counter())

  def reset(self, now: float, carried_export_s: float = 0.0,
            step: int | None = None) -> None:
    """Starts the next step at `now`.

    Args:
      now: when the step began (the previous step's end, so that steps tile
        the timeline).
      carried_export_s: time since `now` already spent exporting the previous
        step's metrics: host work of this step.
      step: the step's number, if known.
    """
    self.start = now
    self.phases = {p: 0.0 for p in records.PHASES}
    self.in_cross_host = {p: 0.0 for p in records.CROSS_HOST_POINTS}
    self.overhead = {o: 0.0 for o in records.HOST_OVERHEADS}
    self.overhead["metrics_export"] = carried_export_s
    self.gen = {k: 0 for k in _GEN_KEYS}
    self.publish_calls = 0
    self.packing = {k: 0 for k in _PACK_KEYS}
    self.train = {"tokens": 0, "slots": 0}
    # Train-token counts still on the devices (`train_batch_tokens`).
    self._device_train_tokens: list[jax.Array] = []
    self.reward_means: list[float] = []
    self.len_means: list[float] = []
    self._gc_at_start = _gc_counts(self._gc_policy)
    with self._lock:
      self.step = step
      for stats in self._gen_ahead.pop(step, []):
        self._count_generation(stats)

  @contextlib.contextmanager
  def phase(self, name: str, cross_host: str | None = None) -> Iterator[None]:
    """Times a phase; `cross_host` also names the cross-host call inside.

    The phase is also a named range of a JAX profiler trace
    (`records.PHASE_TRACE_PREFIX` + name), which the benchmark's step
    breakdown (`bench.traces`) reads; outside a trace it costs about a
    microsecond.
    """
    t0 = time.perf_counter()
    outer = self.current
    self.current = (f"{name} (cross-host)" if cross_host else name,
                    time.monotonic())
    try:
      with jax.profiler.TraceAnnotation(records.PHASE_TRACE_PREFIX + name):
        yield
    finally:
      self.current = outer
      dt = time.perf_counter() - t0
      self.phases[name] += dt
      if cross_host is not None:
        self.in_cross_host[cross_host] += dt

  def timed(self, fn: Callable[..., Any], phase: str) -> Callable[..., Any]:
    """`fn`, timed into `phase`; same result, name and signature."""

    @functools.wraps(fn)
    def timed_fn(*args, **kwargs):
      with self.phase(phase):
        return fn(*args, **kwargs)

    return timed_fn

  def add_generation(self, stats: Mapping[str, int],
                     step: int | None = None) -> None:
    """Counts a generate call's rows into step `step` (None: the current
    one): agent turns of a later batch, generated ahead, count in the step
    that trains them."""
    with self._lock:
      if None not in (step, self.step) and step > self.step:
        self._gen_ahead.setdefault(step, []).append(stats)
      else:
        self._count_generation(stats)

  def _count_generation(self, stats: Mapping[str, int]) -> None:
    for k in ("rows", "tokens", "truncated", "decode_iterations"):
      self.gen[k] += stats[k]
    self.gen["max_len"] = max(self.gen["max_len"], stats["max_len"])

  def add_packing(self, stats: Any) -> None:
    """Counts one packed micro-batch (a `packing.PackStats`)."""
    self.packing["local_rows"] += stats.local_rows
    self.packing["rows"] += stats.rows
    self.packing["real_tokens"] += stats.real_tokens
    self.packing["slots"] += stats.slots
    # The same rows unpacked (the learner hands the packed batch over).
    self.train["tokens"] += stats.real_tokens
    self.train["slots"] += stats.unpacked_slots

  def add_train_batch(self, examples: Any) -> None:
    """Counts one `update_actor` call's train batch (`train_batch_tokens`)."""
    tokens, on_device, slots = _batch_counts(examples)
    self.train["tokens"] += tokens
    self._device_train_tokens += on_device
    self.train["slots"] += slots

  def add_learner_metrics(self, metrics: Mapping[str, Any]) -> None:
    """Reads the mean reward and completion length a learner buffers."""
    for keys, into in (
        ((metric_keys.REWARD_MEAN, metric_keys.AGENTIC_REWARD_MEAN),
         self.reward_means),
        ((metric_keys.COMPLETION_LEN_MEAN,
          metric_keys.AGENTIC_COMPLETION_LEN_MEAN), self.len_means)):
      key = next((k for k in keys if k in metrics), None)
      if key is not None:
        into.append(float(np.mean(metrics[key][0])))

  def finish(self, now: float, admission_s: float) -> float:
    """Ends the step at `now`; fills in admission and the leftover phase.

    Returns:
      The step's time.
    """
    self.phases["admission"] = admission_s
    step_s = now - self.start
    accounted = sum(v for k, v in self.phases.items()
                    if k != records.LEFTOVER_PHASE)
    accounted += sum(self.overhead.values())
    self.phases[records.LEFTOVER_PHASE] = max(0.0, step_s - accounted)
    return step_s

  def host_numbers(self, step_s: float, prompt_tokens: int) -> np.ndarray:
    """This host's numbers of the step, laid out as `records.HOST_FIELDS`."""
    explicit0, skipped0, full0 = self._gc_at_start
    explicit, skipped, full = _gc_counts(self._gc_policy)
    frozen = self._gc_policy is not None and self._gc_policy.frozen
    if self._device_train_tokens:
      with transfers.deliberate("step_record"):
        self.train["tokens"] += sum(
            int(n) for n in jax.device_get(self._device_train_tokens))
      self._device_train_tokens = []
    values = {
        "reward_mean": (
            np.mean(self.reward_means) if self.reward_means else np.nan
        ),
        "len_mean": np.mean(self.len_means) if self.len_means else np.nan,
        "step_s": step_s,
        **{f"phase/{p}": self.phases[p] for p in records.PHASES},
        **{f"in_xhost/{p}": self.in_cross_host[p]
           for p in records.CROSS_HOST_POINTS},
        **{f"overhead/{o}": self.overhead[o] for o in records.HOST_OVERHEADS},
        "gen_rows": self.gen["rows"],
        "gen_tokens": self.gen["tokens"],
        "gen_max_len": self.gen["max_len"],
        "gen_truncated": self.gen["truncated"],
        "decode_iterations": self.gen["decode_iterations"],
        "prompt_tokens": prompt_tokens,
        "publish_calls": self.publish_calls,
        "gc_explicit": explicit - explicit0,
        "gc_skipped": skipped - skipped0,
        "gc_frozen": float(frozen),
        "gc_full_collections": full - full0,
        "packed_rows_local": self.packing["local_rows"],
        "packed_rows": self.packing["rows"],
        "packed_tokens": self.packing["real_tokens"],
        "packed_slots": self.packing["slots"],
        "train_tokens": self.train["tokens"],
        "train_slots": self.train["slots"],
    }
    # float32: what the mcjax gather carries; ample for seconds and counts.
    return np.array([values[f] for f in records.HOST_FIELDS], dtype=np.float32)


def timed_reward_fns(reward_fns: Any, clock: StepClock) -> list[Any]:
  """The learner's reward functions, each timed into the `reward` phase.

  Each wrapper returns exactly what its function returns and carries its
  name and signature (Tunix reads both: `inspect.signature` to pass config
  values, `__name__` for metric names).
  """
  fns = reward_fns if isinstance(reward_fns, (list, tuple)) else [reward_fns]
  return [clock.timed(fn, "reward") for fn in fns]
