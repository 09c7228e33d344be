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

"""Reward functions with a time limit: in a per-host process pool, or not.

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
  the function, the (batch) row that raised and the worker's traceback;
- a call that takes longer than `timeout_s` is `RewardTimeoutError`, and a
  worker that dies while scoring (a crash in native code, `os._exit`, the
  out-of-memory killer) is `RewardWorkerDiedError`; both name the function,
  the rows and the host, and the worker is replaced (a hung one killed).

Without a pool (`--reward_workers=0`), `with_timeouts` gives the same time
limit to functions that run in the host process: each call runs on a
watchdog thread, and the caller raises `RewardTimeoutError` when it has not
returned in time. Python cannot stop a thread, so the call keeps running
until the process exits: the error ends the job (on that host; the other
hosts are stopped by the launcher). Only the pool kills a hung call and
keeps going.

Every host of an mcjax job has its own pool for its own rows. Timing stays
with the caller: wrapped by `telemetry.timed_reward_fns`, a pooled function
is the step's `reward` phase, round trip included.
"""

from __future__ import annotations

import atexit
from collections.abc import Callable, Sequence
import functools
import multiprocessing
from multiprocessing import connection as mp_connection
import multiprocessing.util  # pylint: disable=unused-import
import os
import pickle
import signal
import socket
import threading
import time
import traceback
from typing import Any

# The limit of one reward call unless --reward_timeout_s says otherwise.
DEFAULT_TIMEOUT_S = 600.0
# How long a (re)started worker may take to import and unpickle the
# functions before it is an error.
_START_TIMEOUT_S = 300.0
# How long `close` waits for an idle worker to exit before killing it.
_CLOSE_WAIT_S = 2.0
_SNIPPET = 60

# The worker's reward functions (set once by `_worker_main`).
_WORKER_FNS: list[Callable[..., Any]] = []


class RewardWorkerError(RuntimeError):
  """A reward function raised in a pool worker."""


class RewardCallError(RuntimeError):
  """A reward call that did not return: it timed out, or its worker died."""


class RewardTimeoutError(RewardCallError):
  """A reward call took longer than its time limit."""


class RewardWorkerDiedError(RewardCallError):
  """A pool worker process ended while scoring (or starting)."""


def host_label(process_index: int | None = None) -> str:
  """'host I (HOSTNAME)', how reward errors name the host."""
  name = socket.gethostname()
  return name if process_index is None else f"host {process_index} ({name})"


def _name(fn: Any) -> str:
  return getattr(fn, "__name__", None) or repr(fn)


def _snippet(text: Any) -> str:
  text = str(text)
  return repr(text if len(text) <= _SNIPPET else text[:_SNIPPET] + "...")


def _rows_text(prompts: Sequence[Any], completions: Sequence[Any],
               start: int, end: int, n: int) -> str:
  """'row 6 of 11 (prompt ..., completion ...)' or 'rows 4..7 of 11 (...)'."""
  prompt = prompts[start] if start < len(prompts) else "?"
  first = (f"prompt {_snippet(prompt)}, completion"
           f" {_snippet(completions[start])}")
  if end - start == 1:
    return f"row {start} of the {n} in this call ({first})"
  return (f"rows {start}..{end - 1} of the {n} in this call (the first:"
          f" {first})")


def _status_text(exitcode: int | None) -> str:
  if exitcode is None:
    return "exit status unknown"
  if exitcode >= 0:
    return f"exit status {exitcode}"
  try:
    return f"killed by {signal.Signals(-exitcode).name}"
  except ValueError:
    return f"killed by signal {-exitcode}"


def check_timeout(timeout_s: float | None, flag: str = "--reward_timeout_s"
                  ) -> None:
  """Raises ValueError unless `timeout_s` is None (off) or > 0."""
  if timeout_s is not None and not timeout_s > 0:
    raise ValueError(
        f"{flag} must be > 0 seconds (the most one reward call may take),"
        f" got {timeout_s:g}.")


# --- In the host process: a watchdog thread -----------------------------------


def with_timeout(fn: Callable[..., Any], *, timeout_s: float | None,
                 host: str) -> Callable[..., Any]:
  """`fn`, each call run on a thread and abandoned after `timeout_s`.

  Args:
    fn: a reward function `fn(prompts, completions, **kwargs)`.
    timeout_s: the most one call may take; None: `fn` itself, unchanged.
    host: how errors name this host (`host_label`).

  Returns:
    A function with `fn`'s name and signature and results; a call that has
    not returned after `timeout_s` raises `RewardTimeoutError` (the call
    itself keeps running: a thread cannot be stopped).
  """
  if timeout_s is None:
    return fn
  check_timeout(timeout_s)
  name = _name(fn)

  @functools.wraps(fn)
  def limited(prompts, completions, **kwargs):
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def call() -> None:
      try:
        outcome["value"] = fn(prompts, completions, **kwargs)
      except BaseException as e:  # pylint: disable=broad-exception-caught
        outcome["error"] = e
      finally:
        done.set()

    # A daemon thread: a call that never returns does not keep the process.
    threading.Thread(target=call, name=f"reward {name}", daemon=True).start()
    if not done.wait(timeout_s):
      n = len(completions)
      rows = (_rows_text(prompts, completions, 0, n, n) if n
              else "an empty batch")
      raise RewardTimeoutError(
          f"reward function {name!r} timed out after {timeout_s:g} s"
          f" (--reward_timeout_s) scoring {rows} on {host}, in the host"
          " process (a thread cannot be stopped, so the job stops); make the"
          " function faster, raise --reward_timeout_s, or score in worker"
          " processes (--reward_workers=N), which kill a hung call.")
    if "error" in outcome:
      raise outcome["error"]
    return outcome["value"]

  return limited


def with_timeouts(reward_fns: Any, *, timeout_s: float | None,
                  host: str) -> list[Any]:
  """`with_timeout` of each of `reward_fns` (a function or a list)."""
  fns = reward_fns if isinstance(reward_fns, (list, tuple)) else [reward_fns]
  return [with_timeout(fn, timeout_s=timeout_s, host=host) for fn in fns]


# --- In a worker process ------------------------------------------------------


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


def _watch_parent(parent: int) -> None:
  """Ends this worker once its host process is gone (e.g. SIGKILLed)."""
  while os.getppid() == parent:
    time.sleep(1.0)
  os._exit(1)  # pylint: disable=protected-access


def _worker_main(conn: mp_connection.Connection, fns_pickled: bytes,
                 parent: int) -> None:
  """A worker: loads the functions, then scores chunks until told to stop."""
  global _WORKER_FNS
  # Ctrl-C reaches the whole process group: the host stops its workers.
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
  _WORKER_FNS = pickle.loads(fns_pickled)
  conn.send(("ready", os.getpid()))
  while True:
    try:
      task = conn.recv_bytes()
    except (EOFError, OSError):
      return
    if not task:
      return
    try:
      conn.send(("ok", _score_chunk(*pickle.loads(task))))
    except RewardWorkerError as e:
      conn.send(("error", str(e)))
    except Exception as e:  # pylint: disable=broad-exception-caught
      conn.send(("error", f"reward pool worker failed ({type(e).__name__}:"
                          f" {e}); worker traceback:\n"
                 + traceback.format_exc()))


# --- The pool, in the host process --------------------------------------------


class _Worker:
  """One worker process and the host's end of its pipe."""

  def __init__(self, ctx: Any, fns_pickled: bytes):
    self.conn, child = ctx.Pipe(duplex=True)
    self.process = ctx.Process(
        target=_worker_main, args=(child, fns_pickled, os.getpid()),
        name="reward-worker")
    self.process.start()
    child.close()
    self.ready = False

  @property
  def pid(self) -> int | None:
    return self.process.pid

  def stop(self, *, kill: bool) -> None:
    """Ends the process: asked to (idle), or killed; then reaped."""
    if not kill:
      try:
        self.conn.send_bytes(b"")
      except OSError:
        pass
      self.process.join(_CLOSE_WAIT_S)
    if self.process.is_alive():
      self.process.kill()
    self.process.join()
    self.conn.close()


class RewardPool:
  """Worker processes that score reward functions chunk by chunk.

  Attributes:
    num_workers: worker processes (started in `__init__`).
    timeout_s: the most one call may take (None: no limit).
    host: how errors name this host.
    fns: one callable per reward function, in order, for the learner:
      same name and signature, scored in the pool.
  """

  def __init__(self, reward_fns: Callable[..., Any] | Sequence[Any], *,
               num_workers: int, timeout_s: float | None = DEFAULT_TIMEOUT_S,
               host: str | None = None):
    """Pickles the functions and starts the workers.

    Args:
      reward_fns: a reward function or a list of them, as Tunix's learner
        takes them.
      num_workers: worker processes, >= 1.
      timeout_s: the most one call may take, > 0; None: no limit.
      host: how errors name this host; default: `host_label()`.

    Raises:
      ValueError: a function cannot be pickled (named), num_workers < 1 or
        timeout_s <= 0.
      RewardWorkerDiedError: a worker died while starting.
    """
    if num_workers < 1:
      raise ValueError(f"num_workers must be >= 1, got {num_workers}.")
    check_timeout(timeout_s)
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
    self.timeout_s = timeout_s
    self.host = host or host_label()
    self._names = [_name(fn) for fn in fns]
    self._fns_pickled = pickle.dumps(fns)
    self._ctx = multiprocessing.get_context("spawn")
    self._lock = threading.Lock()
    self._closed = False
    self._workers = [_Worker(self._ctx, self._fns_pickled)
                     for _ in range(num_workers)]
    # Before multiprocessing's own exit handler, which would wait for
    # (non-daemon) workers forever.
    atexit.register(self.close)
    # Start every worker now, not during the first step.
    try:
      with self._lock:
        self._wait_ready()
    except BaseException:
      self.close()
      raise
    self.fns = [self._pooled(i, fn) for i, fn in enumerate(fns)]

  def _pooled(self, index: int, fn: Callable[..., Any]) -> Callable[..., Any]:

    @functools.wraps(fn)
    def pooled(prompts, completions, **kwargs):
      return self.score(index, prompts, completions, **kwargs)

    return pooled

  @property
  def pids(self) -> list[int | None]:
    """The workers' process ids, in chunk order."""
    return [w.pid for w in self._workers]

  def _wait_ready(self) -> None:
    """Replaces dead workers and waits until every worker is ready."""
    for i, w in enumerate(self._workers):
      if w.ready and not w.process.is_alive():
        # Died while idle (e.g. the out-of-memory killer): no row to name.
        w.stop(kill=True)
        self._workers[i] = _Worker(self._ctx, self._fns_pickled)
    deadline = time.monotonic() + _START_TIMEOUT_S
    for i, w in enumerate(self._workers):
      if w.ready:
        continue
      remaining = deadline - time.monotonic()
      mp_connection.wait([w.conn, w.process.sentinel],
                         timeout=max(remaining, 0))
      message = None
      if w.conn.poll():
        try:
          message = w.conn.recv()
        except (EOFError, OSError):
          pass
      if message and message[0] == "ready":
        w.ready = True
        continue
      alive = w.process.is_alive()
      w.stop(kill=True)
      self._workers[i] = _Worker(self._ctx, self._fns_pickled)
      if alive:
        raise RewardTimeoutError(
            f"reward worker {w.pid} did not start within"
            f" {_START_TIMEOUT_S:g} s on {self.host} (importing and"
            f" unpickling {self._names}); check what the functions' modules"
            " do on import.")
      raise RewardWorkerDiedError(
          f"reward worker {w.pid} died ({_status_text(w.process.exitcode)})"
          f" while starting on {self.host} (importing and unpickling"
          f" {self._names}); its output above says why; fix the functions'"
          " modules, or score rewards in-process (--reward_workers=0).")

  def score(self, index: int, prompts: Sequence[Any],
            completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """Reward function `index` on the rows, in the pool, in row order.

    Raises:
      RewardWorkerError: the function raised (names the row).
      RewardTimeoutError: a chunk took longer than `timeout_s` (its worker
        is killed and replaced).
      RewardWorkerDiedError: a worker died while scoring (replaced).
    """
    n = len(completions)
    if not n:
      return []
    prompts, completions = list(prompts), list(completions)
    # Per-row arguments (batch fields repeated like the prompts) are split
    # with the rows; the rest goes to every chunk.
    row_kwargs = {k: list(v) for k, v in kwargs.items()
                  if not isinstance(v, (str, bytes, dict))
                  and hasattr(v, "__len__") and len(v) == n}
    other = {k: v for k, v in kwargs.items() if k not in row_kwargs}
    size = -(-n // self.num_workers)
    chunks = [(start, min(start + size, n)) for start in range(0, n, size)]
    name = self._names[index]
    try:
      tasks = [pickle.dumps((index, start, prompts[start:end],
                             completions[start:end],
                             {k: v[start:end] for k, v in row_kwargs.items()},
                             other))
               for start, end in chunks]
    except Exception as e:  # pylint: disable=broad-exception-caught
      raise ValueError(
          f"the arguments of reward function {name!r} cannot be pickled for"
          f" the reward pool ({type(e).__name__}: {e}); pass picklable batch"
          " fields, or score rewards in-process (--reward_workers=0).") from e
    with self._lock:
      if self._closed:
        raise RuntimeError("The reward pool is closed.")
      self._wait_ready()
      return self._score_chunks(name, prompts, completions, chunks, tasks)

  def _score_chunks(self, name: str, prompts: list[Any],
                    completions: list[Any], chunks: list[tuple[int, int]],
                    tasks: list[bytes]) -> list[float]:
    """Sends chunk k to worker k and collects every outcome (under lock)."""
    n = len(completions)
    pending: dict[int, tuple[int, int]] = {}  # worker index -> chunk
    outcomes: dict[int, tuple[str, Any]] = {}
    for k, task in enumerate(tasks):
      try:
        self._workers[k].conn.send_bytes(task)
        pending[k] = chunks[k]
      except OSError:
        outcomes[k] = ("died", None)
    deadline = (None if self.timeout_s is None
                else time.monotonic() + self.timeout_s)
    while pending:
      remaining = (None if deadline is None
                   else deadline - time.monotonic())
      if remaining is not None and remaining <= 0:
        break
      waiting = {}
      for k in pending:
        waiting[self._workers[k].conn] = k
        waiting[self._workers[k].process.sentinel] = k
      for ready in mp_connection.wait(list(waiting), timeout=remaining):
        k = waiting[ready]
        if k not in pending:
          continue
        conn = self._workers[k].conn
        # A reply first: a worker may have answered and then died.
        if conn.poll():
          try:
            outcomes[k] = conn.recv()
          except (EOFError, OSError):
            outcomes[k] = ("died", None)
        else:
          outcomes[k] = ("died", None)
        del pending[k]
    for k in pending:
      outcomes[k] = ("timeout", None)
    out: list[float] = []
    errors: list[Exception] = []
    for k, (start, end) in enumerate(chunks):
      kind, value = outcomes[k]
      rows = _rows_text(prompts, completions, start, end, n)
      w = self._workers[k]
      if kind in ("died", "timeout"):
        w.stop(kill=True)
        if not self._closed:  # Not while the process exits (`close`).
          self._workers[k] = _Worker(self._ctx, self._fns_pickled)
      if kind == "ok":
        if len(value) != end - start:
          errors.append(RewardWorkerError(
              f"reward function {name!r} returned {len(value)} rewards for"
              f" rows {start}..{end - 1} ({end - start} rows)."))
        out.extend(value)
      elif kind == "error":
        errors.append(RewardWorkerError(value))
      elif kind == "timeout":
        errors.append(RewardTimeoutError(
            f"reward function {name!r} timed out after {self.timeout_s:g} s"
            f" (--reward_timeout_s) scoring {rows} on {self.host}; its"
            f" reward worker {w.pid} was killed and replaced; make the"
            " function faster or raise --reward_timeout_s."))
      else:
        errors.append(RewardWorkerDiedError(
            f"reward worker {w.pid} died ({_status_text(w.process.exitcode)})"
            f" while scoring {name!r} on {rows} on {self.host}; the function"
            " ended its process (a crash in native code, os._exit, the"
            " out-of-memory killer), not a Python error of the row: fix the"
            " function (the worker was replaced)."))
    if errors:
      # A dead or hung worker first: it says the most about the job.
      errors.sort(key=lambda e: not isinstance(e, RewardCallError))
      raise errors[0]
    return out

  def close(self) -> None:
    """Stops the workers; idempotent.

    A call still scoring on another thread (the process is exiting) does not
    hold this up for long: its workers are killed, and it raises.
    """
    locked = self._lock.acquire(timeout=_CLOSE_WAIT_S)
    try:
      if self._closed:
        return
      self._closed = True
      for w in self._workers:
        w.stop(kill=not locked or not w.ready)
    finally:
      if locked:
        self._lock.release()
    atexit.unregister(self.close)

  def __enter__(self) -> RewardPool:
    return self

  def __exit__(self, *exc: Any) -> None:
    self.close()
