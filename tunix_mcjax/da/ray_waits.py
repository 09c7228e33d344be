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

"""The DA driver's waits on Ray: within the job's time limit, watching the head.

Every wait takes what is left of one `Deadline`, the job's `--timeout` from
its start, so that the job ends within it whichever phase is slow.

Without its head (the GCS) a Ray cluster cannot go on: Ray's own processes
notice only after `gcs_rpc_server_reconnect_timeout_s` (60 s in Ray 2.60),
and then the driver dies with a fatal C++ log, and calls that need the GCS
(killing actors, removing a placement group, ray.shutdown) block until then.
The DA driver therefore probes the GCS port itself while it waits: a head
that refuses or does not take connections for `HeadWatch.lost_after_s` is
one error line, and the driver leaves without calling Ray again
(`leave_without_ray`). The job's actors end with their nodes' raylets, which
Ray stops once they lost the GCS.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any, Callable

# How long one ray.wait may block before the head is probed again.
POLL_S = 0.5
# Well below Ray's own 60 s limit, well above a GCS restart's blip.
HEAD_LOST_S = 15.0
# How often the GCS port is tried, and how long one try may take.
PROBE_EVERY_S = 2.0
PROBE_TIMEOUT_S = 2.0


class RayHeadLost(RuntimeError):
  """The Ray head stopped answering; the job cannot go on."""


class Deadline:
  """The job's time limit, counted from its start: what each wait may take."""

  def __init__(self, total_s: float, *,
               clock: Callable[[], float] = time.monotonic):
    if isinstance(total_s, bool) or not isinstance(
        total_s, (int, float)) or not total_s > 0:
      raise ValueError(f"the job's time limit must be a number > 0, got"
                       f" {total_s!r}.")
    self.total_s = float(total_s)
    self._clock = clock
    self._end = clock() + self.total_s

  def left(self) -> float:
    """Seconds until the limit (0 once it passed)."""
    return max(0.0, self._end - self._clock())

  def message(self, what: str) -> str:
    """The error when the limit passed while waiting for `what`."""
    return (f"Timed out waiting for {what}: the job's time limit of"
            f" {self.total_s:.0f} s (--timeout) passed")


def split_address(address: str) -> tuple[str, int]:
  """("host", port) of a GCS address "host:port" (IPv6 in brackets)."""
  host, sep, port = address.rpartition(":")
  if not sep or not host or not port.isdigit():
    raise ValueError(f"not a GCS address host:port: {address!r}")
  return host.strip("[]"), int(port)


def answers(address: str, *, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
  """Whether a TCP connection to the GCS at `address` is taken now."""
  host, port = split_address(address)
  try:
    with socket.create_connection((host, port), timeout=timeout_s):
      return True
  except OSError:
    return False


class HeadWatch:
  """Probes the GCS while the driver waits; `check()` raises once it is lost.

  Attributes:
    address: the GCS "host:port".
    lost_after_s: how long the GCS may not answer before the head counts as
      lost.
  """

  def __init__(self, address: str, *, lost_after_s: float = HEAD_LOST_S,
               probe_every_s: float = PROBE_EVERY_S,
               clock: Callable[[], float] = time.monotonic):
    split_address(address)  # Fails early on a malformed address.
    if not lost_after_s > 0:
      raise ValueError(f"lost_after_s must be > 0, got {lost_after_s!r}")
    self.address = address
    self.lost_after_s = lost_after_s
    self._probe_every_s = probe_every_s
    self._clock = clock
    self._last_probe: float | None = None
    self._silent_since: float | None = None
    self.lost = False

  def check(self) -> None:
    """Probes (at most every probe_every_s); raises RayHeadLost once lost."""
    now = self._clock()
    if (not self.lost and self._last_probe is not None
        and now - self._last_probe < self._probe_every_s):
      return
    self._last_probe = now
    if answers(self.address, timeout_s=min(PROBE_TIMEOUT_S,
                                           self.lost_after_s)):
      self._silent_since = None
      return
    if self._silent_since is None:
      self._silent_since = now
    if self.lost or now - self._silent_since >= self.lost_after_s:
      self.lost = True
      raise RayHeadLost(self.message(now - self._silent_since))

  def confirm_lost(self) -> bool:
    """After another error: whether the head is gone too (one probe)."""
    if not self.lost and not answers(self.address):
      self.lost = True
    return self.lost

  def message(self, silent_s: float | None = None) -> str:
    silent = (f" for {silent_s:.0f} s" if silent_s is not None
              else "")
    return (
        f"the Ray cluster's head (GCS at {self.address}) does not answer"
        f"{silent}: the Ray cluster is gone and the job cannot go on. Its"
        " actors end with their nodes, which Ray stops once they lost the"
        " head. Start the cluster again and resume from the last checkpoint"
        " (--checkpoint_dir)."
    )


def leave_without_ray(status: int) -> None:
  """Exits now, without Ray's exit hook (which would wait for the lost GCS).

  Python's own buffers are flushed first; atexit hooks do not run (what
  this project's hooks leave, temporary directories, goes with the next
  job's sweep: `temp_dirs`).
  """
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except (OSError, ValueError):
      pass
  os._exit(status)  # pylint: disable=protected-access


def wait_all(refs: list[Any], *, deadline: Deadline, what: str,
             names: list[str], watch: HeadWatch | None) -> list[Any]:
  """Results of every ref; the first failure, the deadline or a lost head
  (`watch`; None: not watched) is an error."""
  import ray  # pylint: disable=g-import-not-at-top

  index = {ref: i for i, ref in enumerate(refs)}
  results: list[Any] = [None] * len(refs)
  pending = list(refs)
  while pending:
    if watch is not None:
      watch.check()
    left = deadline.left()
    if left <= 0:
      raise RuntimeError(
          f"{deadline.message(what)}; {[names[index[r]] for r in pending]}"
          " did not finish."
      )
    ready, pending = ray.wait(pending, num_returns=1,
                              timeout=min(POLL_S, left))
    for ref in ready:
      try:
        results[index[ref]] = ray.get(ref)
      except Exception as e:  # pylint: disable=broad-exception-caught
        raise RuntimeError(
            f"{names[index[ref]]} failed while waiting for {what}:"
            f" {type(e).__name__}: {last_line(e)}"
        ) from e
  return results


def last_line(e: BaseException) -> str:
  text = str(e).strip().splitlines()
  return text[-1] if text else ""
