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

"""Reward functions scored in a per-host process pool (opt-in).

Tunix's learner calls each reward function on the whole batch in the
trainer process, one after the other. `RewardPool` keeps the learner's call
(each reward function stays one callable with its name and signature) but
splits the rows into one contiguous chunk per worker and scores the chunks
in parallel in worker processes:

- workers are started once, with the "spawn" start method (forking a
  process that runs JAX is unsafe), and receive the reward functions once,
  pickled (so a lambda or closure is refused up front, naming it);
- per call, the rows (prompts, completions and every per-row keyword
  argument) are pickled to the workers; other keyword arguments (Tunix's
  `mode`, ...) go to every chunk unchanged;
- rewards come back in row order: identical to scoring in-process, since a
  reward function scores each row on its own;
- a function that raises in a worker surfaces as `RewardWorkerError` naming
  the function, the (batch) row that raised and the worker's traceback.

Every host of an mcjax job has its own pool for its own rows. Timing stays
with the caller: wrapped by `telemetry.timed_reward_fns`, a pooled function
is the step's `reward` phase, round trip included.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
import concurrent.futures
import functools
import multiprocessing
import pickle
import traceback
from typing import Any

# The worker's reward functions (set once by `_init_worker`).
_WORKER_FNS: list[Callable[..., Any]] = []


class RewardWorkerError(RuntimeError):
  """A reward function raised in a pool worker."""


def _init_worker(fns_pickled: bytes) -> None:
  global _WORKER_FNS
  _WORKER_FNS = pickle.loads(fns_pickled)


def _ready() -> bool:
  return bool(_WORKER_FNS)


def _score_chunk(index: int, start: int, prompts: list[Any],
                 completions: list[Any], row_kwargs: dict[str, list[Any]],
                 other_kwargs: dict[str, Any]) -> list[float]:
  """Scores one chunk in a worker; names the failing row if one raises."""
  fn = _WORKER_FNS[index]
  try:
    out = fn(prompts, completions, **row_kwargs, **other_kwargs)
    return [float(x) for x in out]
  except Exception as e:  # pylint: disable=broad-exception-caught
    chunk_tb = traceback.format_exc()
    # Find the row: score the rows one at a time (only on failure).
    for i in range(len(completions)):
      try:
        fn(prompts[i:i + 1], completions[i:i + 1],
           **{k: v[i:i + 1] for k, v in row_kwargs.items()}, **other_kwargs)
      except Exception:  # pylint: disable=broad-exception-caught
        raise RewardWorkerError(
            f"reward function {_name(fn)!r} raised {type(e).__name__}: {e}"
            f" on row {start + i} of the batch (completion"
            f" {str(completions[i])[:200]!r}); worker traceback:\n"
            + traceback.format_exc()) from None
    raise RewardWorkerError(
        f"reward function {_name(fn)!r} raised {type(e).__name__}: {e} on"
        f" rows {start}..{start + len(completions) - 1} of the batch (no"
        " single row raises alone); worker traceback:\n" + chunk_tb) from None


def _name(fn: Any) -> str:
  return getattr(fn, "__name__", None) or repr(fn)


class RewardPool:
  """Worker processes that score reward functions chunk by chunk.

  Attributes:
    num_workers: worker processes (started in `__init__`).
    fns: one callable per reward function, in order, for the learner:
      same name and signature, scored in the pool.
  """

  def __init__(self, reward_fns: Callable[..., Any] | Sequence[Any], *,
               num_workers: int):
    """Pickles the functions and starts the workers.

    Args:
      reward_fns: a reward function or a list of them, as Tunix's learner
        takes them.
      num_workers: worker processes, >= 1.

    Raises:
      ValueError: a function cannot be pickled (named), or num_workers < 1.
    """
    if num_workers < 1:
      raise ValueError(f"num_workers must be >= 1, got {num_workers}.")
    fns = list(reward_fns) if isinstance(reward_fns, (list, tuple)) else [
        reward_fns]
    for fn in fns:
      try:
        pickle.dumps(fn)
      except Exception as e:  # pylint: disable=broad-exception-caught
        raise ValueError(
            f"reward function {_name(fn)!r} cannot be pickled for the reward"
            f" pool ({type(e).__name__}: {e}); define it at module level (not"
            " a lambda, closure or local function), or score rewards"
            " in-process (reward_workers=0)."
        ) from e
    self.num_workers = num_workers
    self._executor = concurrent.futures.ProcessPoolExecutor(
        max_workers=num_workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_init_worker, initargs=(pickle.dumps(fns),))
    # Start every worker now, not during the first step.
    for f in [self._executor.submit(_ready) for _ in range(num_workers)]:
      if not f.result():
        raise RuntimeError("A reward pool worker started without functions.")
    self.fns = [self._pooled(i, fn) for i, fn in enumerate(fns)]

  def _pooled(self, index: int, fn: Callable[..., Any]) -> Callable[..., Any]:

    @functools.wraps(fn)
    def pooled(prompts, completions, **kwargs):
      return self.score(index, prompts, completions, **kwargs)

    return pooled

  def score(self, index: int, prompts: Sequence[Any],
            completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """Reward function `index` on the rows, in the pool, in row order."""
    n = len(completions)
    prompts, completions = list(prompts), list(completions)
    # Per-row arguments (batch fields repeated like the prompts) are split
    # with the rows; the rest goes to every chunk.
    row_kwargs = {k: list(v) for k, v in kwargs.items()
                  if not isinstance(v, (str, bytes, dict))
                  and hasattr(v, "__len__") and len(v) == n}
    other = {k: v for k, v in kwargs.items() if k not in row_kwargs}
    size = -(-n // self.num_workers) if n else 1
    futures = []
    for start in range(0, n, size):
      end = min(start + size, n)
      futures.append((start, end, self._executor.submit(
          _score_chunk, index, start, prompts[start:end],
          completions[start:end],
          {k: v[start:end] for k, v in row_kwargs.items()}, other)))
    out: list[float] = []
    for start, end, f in futures:
      chunk = f.result()
      if len(chunk) != end - start:
        raise RewardWorkerError(
            f"reward function {_name(self.fns[index])!r} returned"
            f" {len(chunk)} rewards for rows {start}..{end - 1}"
            f" ({end - start} rows).")
      out.extend(chunk)
    return out

  def close(self) -> None:
    """Stops the workers; idempotent."""
    self._executor.shutdown(wait=True, cancel_futures=True)

  def __enter__(self) -> RewardPool:
    return self

  def __exit__(self, *exc: Any) -> None:
    self.close()
