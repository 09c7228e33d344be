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

"""A per-host step watchdog: a step that does not end in time ends the host.

On a real cluster nothing else notices a hang inside a collective: a host
that was stopped (SIGSTOP, a frozen VM) or cut off keeps its heartbeat
connection half-open for JAX's heartbeat timeout at best, and a collective
that waits on it waits for ever. The local launcher has its own `--timeout`
and sees dead hosts; SLURM, a TPU pod or GKE do not. So every host of an
mcjax job runs this watchdog: armed once the first step has ended (that step
compiles, which may take long), it ends the host with one line naming the
host, the step and the phase it is in when the next step end does not come
within `timeout_s`. The other hosts then stop the same way, or through
JAX's heartbeat, or their launcher.

The time between two step ends includes whatever runs between them (an
evaluation, a checkpoint save), so the limit is generous by default.
"""

from __future__ import annotations

from collections.abc import Callable
import os
import sys
import threading
import time

# The default limit between two step ends (--step_timeout_s).
DEFAULT_STEP_TIMEOUT_S = 1800.0
# The exit status of a host the watchdog ends.
EXIT_STATUS = 3


def check_timeout(timeout_s: float | None,
                  flag: str = "--step_timeout_s") -> None:
  """Raises ValueError unless `timeout_s` is None (off) or > 0."""
  if timeout_s is not None and not timeout_s > 0:
    raise ValueError(
        f"{flag} must be > 0 seconds (the most one training step may take"
        f" after the first), got {timeout_s:g}; a huge value all but turns"
        " the watchdog off.")


def _stop_host(message: str) -> None:
  """Prints `message` and ends this process at once.

  No exit handlers: JAX's would wait at a shutdown barrier for the host
  that hangs, and a thread blocked in a collective cannot be unwound.
  """
  print(message, file=sys.stderr, flush=True)
  sys.stdout.flush()
  os._exit(EXIT_STATUS)  # pylint: disable=protected-access


class StepWatchdog:
  """Ends this host when a training step after the first does not end in
  time.

  Attributes:
    timeout_s: the most the time between two step ends may be; None: off
      (no thread is started).
    host: how the message names this host (e.g. "host 1 (node-7)").
  """

  def __init__(self, *, timeout_s: float | None, host: str,
               current_phase: Callable[[], tuple[str, float] | None]
               = lambda: None,
               on_expiry: Callable[[str], None] = _stop_host,
               poll_s: float | None = None):
    """Starts the watchdog's thread (disarmed until the first step end).

    Args:
      timeout_s: the limit, > 0; None: off.
      host: how the message names this host.
      current_phase: the phase this host is in and since when
        (`time.monotonic()`), or None; named in the message.
      on_expiry: called once, on the watchdog's thread, with the message;
        the default prints it and ends the process (exit status
        `EXIT_STATUS`).
      poll_s: how often the thread looks; default: a tenth of the limit,
        at most 5 s.
    """
    check_timeout(timeout_s)
    self.timeout_s = timeout_s
    self.host = host
    self._current_phase = current_phase
    self._on_expiry = on_expiry
    self._lock = threading.Lock()
    self._stop = threading.Event()
    self._last_end: float | None = None
    self._last_step = 0
    self._thread = None
    if timeout_s is None:
      return
    self._poll_s = poll_s if poll_s is not None else min(timeout_s / 10, 5.0)
    self._thread = threading.Thread(target=self._watch, name="step-watchdog",
                                    daemon=True)
    self._thread.start()

  def step_ended(self, step: int) -> None:
    """Step `step` (global steps done) has ended on this host: the next one
    has `timeout_s` from now."""
    with self._lock:
      self._last_end = time.monotonic()
      self._last_step = step

  def close(self) -> None:
    """Stops watching (the job is over or failing on its own)."""
    self._stop.set()
    thread = self._thread
    if thread is not None and thread is not threading.current_thread():
      thread.join(timeout=5.0)

  def _message(self, now: float) -> str:
    with self._lock:
      step, last = self._last_step, self._last_end
    phase = self._current_phase()
    where = ("between steps" if phase is None else
             f"in its {phase[0]!r} phase for {now - phase[1]:.0f} s")
    return (
        f"[mcjax] error: {self.host}: step {step + 1} has not ended"
        f" {now - last:.0f} s after step {step} did (--step_timeout_s"
        f" {self.timeout_s:g}); it is {where}. Another host is likely dead,"
        " stopped or cut off, or a collective hangs: this host stops. If"
        " steps (with the evaluation and checkpoint saves between them)"
        " really take this long, raise --step_timeout_s.")

  def _watch(self) -> None:
    while not self._stop.wait(self._poll_s):
      with self._lock:
        last = self._last_end
      now = time.monotonic()
      if last is not None and now - last > self.timeout_s:
        self._on_expiry(self._message(now))
        return


def check_heartbeat(value: int | None, backend: str) -> None:
  """Raises ValueError unless --heartbeat_timeout_s fits the backend.

  JAX's heartbeat is the other end for a host that dies or hangs: the
  coordination service aborts every host (no one-line report).
  """
  if value is None:
    return
  if isinstance(value, bool) or not isinstance(value, int) or value < 1:
    raise ValueError(
        f"--heartbeat_timeout_s must be an integer >= 1 (seconds), got"
        f" {value!r}.")
  if backend not in ("mcjax", "mcjax_da"):
    raise ValueError(
        f"--heartbeat_timeout_s sets the heartbeat between the hosts of the"
        f" mcjax and mcjax_da backends; --backend={backend} does not take"
        " it.")
