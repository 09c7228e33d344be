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

"""The job's host processes, from start to the last one stopped.

`run` starts one process per host (a new interpreter, or a fork from this
process with `host_fork`), each leading its own process group and dying
with the launcher (Linux), forwards every output line prefixed with
`[host i] `, and waits for the job's end: every host exiting 0, the first
host that fails, the timeout (a collective joined by only some hosts hangs
forever, so this timeout is the only guard) or SIGINT/SIGTERM/SIGHUP. Then
it stops every host's whole process group (SIGTERM, then SIGKILL after the
grace period) and reaps them, so nothing a host started outlives it.

`launch` decides what runs where (the hosts' environments, the checks before
anything starts); this module only supervises. It must not import jax.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
import ctypes
import dataclasses
import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import BinaryIO, TextIO

from tunix_mcjax import host_fork

EXIT_TIMEOUT = 124

_PR_SET_PDEATHSIG = 1
_POLL_S = 0.05
_LOG_PREFIX = "[launch] "


def log(message: str) -> None:
  """One line of the launcher's own, on stderr."""
  print(_LOG_PREFIX + message, file=sys.stderr, flush=True)


def _death_signal_preexec() -> Callable[[], None] | None:
  """Makes a host die with SIGKILL when the launcher dies (Linux only)."""
  if not sys.platform.startswith("linux"):
    return None
  try:
    prctl = ctypes.CDLL(None, use_errno=True).prctl
  except (OSError, AttributeError):
    return None
  prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
  prctl.restype = ctypes.c_int
  launcher_pid = os.getpid()

  def preexec() -> None:
    prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    # The launcher may have died between fork and prctl; then nobody would
    # deliver the death signal.
    if os.getppid() != launcher_pid:
      os.kill(os.getpid(), signal.SIGKILL)

  return preexec


def _describe(status: int) -> str:
  """'exited with status 3' / 'was killed by SIGKILL' for a Popen status."""
  if status >= 0:
    return f"exited with status {status}"
  try:
    name = signal.Signals(-status).name
  except ValueError:
    name = f"signal {-status}"
  return f"was killed by {name}"


def _exit_code(status: int) -> int:
  return status if status >= 0 else 128 - status


@dataclasses.dataclass(kw_only=True)
class _Host:
  index: int
  proc: subprocess.Popen[bytes] | host_fork.ForkedProcess
  status: int | None = None  # Known once exited; the pid stays unreaped.
  readers: list[threading.Thread] = dataclasses.field(default_factory=list)

  def exited(self) -> bool:
    """Checks for exit without reaping, so the pid (= pgid) stays ours."""
    if self.status is None:
      info = os.waitid(
          os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT
      )
      if info is not None and info.si_pid == self.proc.pid:
        if info.si_code == os.CLD_EXITED:
          self.status = info.si_status
        else:
          self.status = -info.si_status
    return self.status is not None

  def signal_group(self, sig: int) -> None:
    # Safe while the leader is unreaped: its pid cannot have been reused.
    try:
      os.killpg(self.proc.pid, sig)
    except (ProcessLookupError, PermissionError):
      pass


# Gloo's C++ code prints connection notices straight to the process's stdout.
# Under PYTHONUNBUFFERED, print() writes its text and its newline separately,
# so such a notice can land inside a Python line ("REPORT {...}[Gloo] Rank 1
# is connected ..."). The forwarder gives each notice its own line.
_GLOO_NOTICE = re.compile(rb"\[Gloo\] [^\n]*?ranks is : \d+")


def _split_gloo_notices(line: bytes) -> list[bytes]:
  """`line` with every embedded gloo notice moved onto a line of its own."""
  parts = []
  rest = line
  while (m := _GLOO_NOTICE.search(rest)) is not None and (
      m.start() > 0 or m.end() < len(rest.rstrip(b"\n"))
  ):
    before, notice, rest = rest[:m.start()], m.group(0), rest[m.end():]
    if before:
      parts.append(before + b"\n")
    parts.append(notice + b"\n")
  if rest.strip(b"\n") or not parts:
    parts.append(rest if rest.endswith(b"\n") else rest + b"\n")
  return parts


def _prefixed(prefix: bytes, text: bytes) -> bytes:
  return b"".join(prefix + l for l in text.splitlines(keepends=True))


class _Forwarder:
  """Copies host output line by line, prefixed, one stream per thread."""

  def __init__(self):
    self._lock = threading.Lock()

  def start(self, index: int, pipe: BinaryIO, out: TextIO) -> threading.Thread:
    prefix = f"[host {index}] ".encode()
    # Bytes pass through untouched where the stream has a buffer; a stream
    # without one (e.g. a test's capture) gets decoded text.
    binary = getattr(out, "buffer", None)

    def forward() -> None:
      with pipe:
        for raw in iter(pipe.readline, b""):
          text = b"".join(_split_gloo_notices(raw))
          with self._lock:
            try:
              if binary is not None:
                binary.write(_prefixed(prefix, text))
                binary.flush()
              else:
                out.write(_prefixed(prefix, text).decode(errors="replace"))
                out.flush()
            except Exception:  # pylint: disable=broad-exception-caught
              # Our own output is gone; keep draining, or the host would
              # block on a full pipe.
              pass

    thread = threading.Thread(target=forward, daemon=True,
                              name=f"host{index}-io")
    thread.start()
    return thread


def run(
    command: Sequence[str],
    envs: Sequence[dict[str, str]],
    *,
    host_main: Callable[[], object] | None,
    timeout_s: float,
    grace_s: float,
) -> int:
  """Runs one host per environment in `envs` until the job ends.

  Args:
    command: What each host runs, unless `host_main` is given.
    envs: Each host's whole environment, host 0 first.
    host_main: Given, each host is forked from this process and runs it
      (`host_fork.fork_host`); the caller has checked that forking is safe.
    timeout_s: Stop the whole job after this many seconds.
    grace_s: Seconds between SIGTERM and SIGKILL when stopping hosts.

  Returns:
    0 when every host exits 0; the failing host's status (128 + signal
    number if it was killed); `EXIT_TIMEOUT`; 128 + signal number when this
    process is interrupted.
  """
  received: list[int] = []
  wake = threading.Event()

  def on_signal(signum: int, frame) -> None:
    del frame
    received.append(signum)
    wake.set()

  handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
  previous = {}
  if threading.current_thread() is threading.main_thread():
    previous = {sig: signal.signal(sig, on_signal) for sig in handled}

  hosts: list[_Host] = []
  try:
    preexec = _death_signal_preexec()
    for index, env in enumerate(envs):
      if host_main is not None:
        proc = host_fork.fork_host(host_main, env, preexec)
      else:
        proc = subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=preexec,
        )
      hosts.append(_Host(index=index, proc=proc))
    # Which process is which host (a forked host's /proc/PID/environ still
    # shows the launcher's variables).
    log("host pids: " + " ".join(f"{h.index}={h.proc.pid}" for h in hosts))
    # Readers start after every fork, so no fork happens while they run.
    forwarder = _Forwarder()
    for host in hosts:
      host.readers = [
          forwarder.start(host.index, host.proc.stdout, sys.stdout),
          forwarder.start(host.index, host.proc.stderr, sys.stderr),
      ]
    return _monitor(hosts, timeout_s, grace_s, received, wake)
  finally:
    _stop(hosts, grace_s)
    for sig, handler in previous.items():
      signal.signal(sig, handler)


def _monitor(
    hosts: list[_Host],
    timeout_s: float,
    grace_s: float,
    received: list[int],
    wake: threading.Event,
) -> int:
  """Waits for success, the first failure, the timeout or a signal."""
  deadline = time.monotonic() + timeout_s
  while True:
    if received:
      name = signal.Signals(received[0]).name
      log(f"received {name}; stopping all hosts.")
      _stop(hosts, grace_s)
      _summarize(hosts)
      return 128 + received[0]
    for host in hosts:
      if host.exited() and host.status != 0:
        reason = f"host {host.index} {_describe(host.status)}"
        log(f"error: {reason}; stopping the other hosts.")
        _stop(hosts, grace_s)
        _summarize(hosts)
        log(f"error: job failed: {reason}.")
        return _exit_code(host.status)
    if all(host.exited() for host in hosts):
      return 0
    if time.monotonic() >= deadline:
      running = [str(h.index) for h in hosts if not h.exited()]
      _stop(hosts, grace_s)
      _summarize(hosts)
      log(
          f"timeout: host(s) {', '.join(running)} still running after"
          f" {timeout_s:g} s; a collective joined by only some hosts hangs"
          " forever, and --timeout is the only guard against it: check that"
          " every host issues the same collectives in the same order, or"
          " raise --timeout if the job is merely slow. Stopped all hosts."
      )
      return EXIT_TIMEOUT
    wake.wait(_POLL_S)


def _stop(hosts: list[_Host], grace_s: float) -> None:
  """Stops every host's process group, then reaps; idempotent."""
  if all(h.proc.returncode is not None for h in hosts):
    return
  running = [h for h in hosts if not h.exited()]
  for host in running:
    host.signal_group(signal.SIGTERM)
  deadline = time.monotonic() + grace_s
  while any(not h.exited() for h in running) and time.monotonic() < deadline:
    time.sleep(_POLL_S)
  # Also sweeps what a host left in its group: hosts that already exited and
  # hosts that ignored SIGTERM alike.
  for host in hosts:
    host.signal_group(signal.SIGKILL)
  for host in hosts:
    host.proc.wait()
  for host in hosts:
    for reader in host.readers:
      # Pipes close once every group member is dead; a process that left the
      # group (setsid) could keep one open, so do not wait forever.
      reader.join(timeout=5)


def _summarize(hosts: list[_Host]) -> None:
  for host in hosts:
    status = host.status if host.status is not None else host.proc.returncode
    log(f"host {host.index} {_describe(status)}")
