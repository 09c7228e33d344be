# Copyright 2026 The tunix_mcjax Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""Runs one command as the N processes of a multi-controller JAX job here.

  python -m tunix_mcjax.launch --num_hosts 2 --devices_per_host 4 \\
      [--timeout 3600] [--grace 5] -- python train.py --flag ...

Each host is a child process with its devices (from the command line: K
fake CPU devices; from the entry points: `platforms.LocalPlan`, which may
give each process its share of this machine's GPUs or TPU chips) and the
variables that `tunix_mcjax.runtime.initialize()` reads. The launcher
forwards every output line prefixed with `[host i] `, and stops the whole
job as soon as one host fails, on --timeout (a collective joined by only
some hosts hangs forever, so this timeout is the only guard), and on
SIGINT/SIGTERM. No host process, nor
anything a host started in its process group, outlives the launcher.

Exit status: 0 when every host exits 0; 2 for bad input (nothing started);
the failing host's status (128 + signal number if it was killed); 124 on
timeout; 128 + signal number when the launcher itself is interrupted.

This module must not import jax: it only starts processes.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
import ctypes
import dataclasses
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import BinaryIO, TextIO

from tunix_mcjax import host_fork
from tunix_mcjax import platforms
from tunix_mcjax.runtime import ENV_COORDINATOR
from tunix_mcjax.runtime import ENV_DEVICES_PER_HOST
from tunix_mcjax.runtime import ENV_HOST_ID
from tunix_mcjax.runtime import ENV_NUM_HOSTS
from tunix_mcjax.runtime import xla_flags_with_device_count

# The contract between this launcher and tunix_mcjax.runtime (which owns
# the environment-variable names and imports no jax at module level).

EXIT_USAGE = 2
EXIT_TIMEOUT = 124
MIN_PYTHON = (3, 11)
LOOPBACK = "127.0.0.1"
# Seconds between SIGTERM and SIGKILL when the hosts are stopped.
DEFAULT_GRACE_S = 5

_PR_SET_PDEATHSIG = 1
_POLL_S = 0.05
_PYTHON_NAME = re.compile(r"python(\d+(\.\d+)*)?")
_LOG_PREFIX = "[launch] "


class LaunchError(ValueError):
  """Bad launcher input, detected before any host starts."""


def free_port(host: str = LOOPBACK) -> int:
  """A TCP port that is free on `host` right now.

  A busy coordinator port makes the coordinator crash with SIGSEGV and the
  peers abort only after the init timeout, so every run picks a fresh one.

  Args:
    host: Interface to probe.

  Returns:
    The port number.
  """
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
    sock.bind((host, 0))
    return sock.getsockname()[1]


def host_env(
    base: Mapping[str, str],
    *,
    coordinator: str,
    num_hosts: int,
    host_id: int,
    devices_per_host: int | None,
    plan: platforms.LocalPlan | None = None,
) -> dict[str, str]:
  """The environment of host `host_id`: `base` plus the job's variables.

  The devices are `plan`'s; without a plan, `devices_per_host` fake CPU
  devices, or (None) whatever the process is given otherwise (a Ray actor's
  accelerators) on the platform JAX finds.
  """
  env = dict(base)
  env.update({
      ENV_COORDINATOR: coordinator,
      ENV_NUM_HOSTS: str(num_hosts),
      ENV_HOST_ID: str(host_id),
      "PYTHONUNBUFFERED": "1",
  })
  # An enclosing job's devices are not this one's.
  for name in (ENV_DEVICES_PER_HOST, platforms.ENV_LOCAL_DEVICE_IDS):
    env.pop(name, None)
  if plan is None and devices_per_host is not None:
    plan = platforms.simulated(num_hosts, devices_per_host)
  if plan is not None:
    env.update(plan.host_env(host_id))
    if plan.simulated:
      env["XLA_FLAGS"] = xla_flags_with_device_count(
          env.get("XLA_FLAGS", ""), plan.devices_per_host)
  return env


def _resolve_executable(exe: str, path: str | None) -> str:
  if os.sep in exe:
    if os.path.isfile(exe) and os.access(exe, os.X_OK):
      return exe
    raise LaunchError(f"command not found: {exe!r} is not an executable file.")
  found = shutil.which(exe, path=path)
  if found is None:
    raise LaunchError(
        f"command not found: {exe!r} is not on PATH; give a full path or fix"
        " PATH."
    )
  return found


def _looks_like_python(exe: str) -> bool:
  names = {os.path.basename(exe), os.path.basename(os.path.realpath(exe))}
  return any(_PYTHON_NAME.fullmatch(name) for name in names)


def _check_python_version(exe: str, env: Mapping[str, str]) -> None:
  try:
    result = subprocess.run(
        [exe, "-c", "import sys;print(sys.version_info[:2])"],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
  except (OSError, subprocess.TimeoutExpired) as e:
    raise LaunchError(f"cannot run the Python interpreter {exe!r}: {e}") from e
  match = re.fullmatch(r"\((\d+), (\d+)\)", result.stdout.strip())
  if result.returncode != 0 or match is None:
    detail = (result.stderr or result.stdout).strip().splitlines()[-1:] or [""]
    raise LaunchError(
        f"cannot tell the version of the Python interpreter {exe!r} (exit"
        f" {result.returncode}: {detail[0]!r}); use a working Python >="
        f" {MIN_PYTHON[0]}.{MIN_PYTHON[1]}."
    )
  version = (int(match.group(1)), int(match.group(2)))
  if version < MIN_PYTHON:
    raise LaunchError(
        f"{exe} is Python {version[0]}.{version[1]}, but tunix_mcjax needs"
        f" Python >= {MIN_PYTHON[0]}.{MIN_PYTHON[1]}; run the project's"
        f" interpreter instead (e.g. .venv/bin/python, or {sys.executable})."
    )


def _check_sizes(*, num_hosts: int, devices_per_host: int, timeout_s: float,
                 grace_s: float) -> None:
  """The numeric part of `check_launch` (no process started)."""

  def positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise LaunchError(f"{name} must be an integer >= 1, got {value!r}.")

  positive_int("num_hosts", num_hosts)
  positive_int("devices_per_host", devices_per_host)
  if not timeout_s > 0:
    raise LaunchError(f"--timeout must be > 0 seconds, got {timeout_s!r}.")
  if not grace_s >= 0:
    raise LaunchError(f"grace must be >= 0 seconds, got {grace_s!r}.")


def check_launch(
    command: Sequence[str],
    *,
    num_hosts: int,
    devices_per_host: int,
    timeout_s: float,
    grace_s: float,
    env: Mapping[str, str],
) -> None:
  """Raises LaunchError if the job cannot start; starts nothing itself."""
  _check_sizes(num_hosts=num_hosts, devices_per_host=devices_per_host,
               timeout_s=timeout_s, grace_s=grace_s)
  if not command or not command[0]:
    raise LaunchError(
        "no command given: put it after '--', e.g."
        " `python -m tunix_mcjax.launch --num_hosts 2 --devices_per_host 4"
        " -- python train.py`."
    )
  exe = _resolve_executable(command[0], env.get("PATH"))
  if _looks_like_python(exe):
    _check_python_version(exe, env)


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

    def run() -> None:
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

    thread = threading.Thread(target=run, daemon=True, name=f"host{index}-io")
    thread.start()
    return thread


def _log(message: str) -> None:
  print(_LOG_PREFIX + message, file=sys.stderr, flush=True)


def launch(
    command: Sequence[str],
    *,
    num_hosts: int | None = None,
    devices_per_host: int | None = None,
    plan: platforms.LocalPlan | None = None,
    timeout_s: float = 3600,
    grace_s: float = DEFAULT_GRACE_S,
    env: Mapping[str, str] | None = None,
    host_main: Callable[[], object] | None = None,
) -> int:
  """Runs `command` as `num_hosts` hosts and waits for the job to end.

  Args:
    command: The program and its arguments, run once per host.
    num_hosts: Number of simulated hosts (processes), without `plan`.
    devices_per_host: Fake CPU devices per host, without `plan`.
    plan: The processes and their devices (`platforms.plan_local_hosts`);
      given, it replaces `num_hosts` and `devices_per_host`.
    timeout_s: Stop the whole job after this many seconds.
    grace_s: Seconds between SIGTERM and SIGKILL when stopping hosts.
    env: Extra variables for the hosts, on top of the launcher's environment.
    host_main: What `command` runs once it finds the job's variables, as a
      function of this process (returning the exit status or None). Given,
      simulated hosts are forked from this process where
      `host_fork.fork_blocker` allows,
      and skip the interpreter's start-up and imports; else `command` runs.

  Returns:
    The job's exit status (see the module docstring).

  Raises:
    LaunchError: bad input; no host was started.
  """
  command = list(command)
  base_env = dict(os.environ)
  base_env.update(env or {})
  if plan is not None:
    num_hosts, devices_per_host = plan.num_hosts, plan.devices_per_host
  check_launch(
      command,
      num_hosts=num_hosts,
      devices_per_host=devices_per_host,
      timeout_s=timeout_s,
      grace_s=grace_s,
      env=base_env,
  )
  if plan is None:
    plan = platforms.simulated(num_hosts, devices_per_host)
  coordinator = f"{LOOPBACK}:{free_port()}"
  envs = [
      host_env(
          base_env,
          coordinator=coordinator,
          num_hosts=num_hosts,
          host_id=index,
          devices_per_host=None,
          plan=plan,
      )
      for index in range(num_hosts)
  ]
  how = ""
  if host_main is not None:
    # Forking is proven on CPU only; an accelerator's runtime is safer
    # started by a fresh interpreter.
    blocker = (host_fork.fork_blocker(envs) if plan.simulated
               else f"hosts on {plan.platform.upper()}s")
    if blocker is None:
      how = " (forked from this process)"
    else:
      host_main = None
      how = f" (new interpreters: {blocker})"
  _log(
      f"{plan.describe()}, coordinator {coordinator}, timeout"
      f" {timeout_s:g} s: {' '.join(command)}{how}"
  )

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
    for index in range(num_hosts):
      if host_main is not None:
        proc = host_fork.fork_host(host_main, envs[index], preexec)
      else:
        proc = subprocess.Popen(
            command,
            env=envs[index],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=preexec,
        )
      hosts.append(_Host(index=index, proc=proc))
    # Which process is which host (a forked host's /proc/PID/environ still
    # shows the launcher's variables).
    _log("host pids: " + " ".join(f"{h.index}={h.proc.pid}" for h in hosts))
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
      _log(f"received {name}; stopping all hosts.")
      _stop(hosts, grace_s)
      _summarize(hosts)
      return 128 + received[0]
    for host in hosts:
      if host.exited() and host.status != 0:
        reason = f"host {host.index} {_describe(host.status)}"
        _log(f"error: {reason}; stopping the other hosts.")
        _stop(hosts, grace_s)
        _summarize(hosts)
        _log(f"error: job failed: {reason}.")
        return _exit_code(host.status)
    if all(host.exited() for host in hosts):
      return 0
    if time.monotonic() >= deadline:
      running = [str(h.index) for h in hosts if not h.exited()]
      _stop(hosts, grace_s)
      _summarize(hosts)
      _log(
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
    _log(f"host {host.index} {_describe(status)}")


def this_program() -> list[str]:
  """The command that runs this Python program again (without arguments).

  `python -m pkg.mod` re-runs as `-m pkg.mod` (its imports resolve as
  before); a script re-runs by its absolute path.
  """
  main_module = sys.modules.get("__main__")
  spec = getattr(main_module, "__spec__", None)
  if spec is not None and spec.name:
    return [sys.executable, "-m", spec.name.removesuffix(".__main__")]
  path = getattr(main_module, "__file__", None) or sys.argv[0]
  return [sys.executable, os.path.abspath(path)]


def relaunch_as_local_hosts(
    argv: Sequence[str],
    *,
    num_hosts: int | None = None,
    devices_per_host: int | None = None,
    plan: platforms.LocalPlan | None = None,
    timeout_s: float = 3600,
    fresh_files: Sequence[str | None] = (),
    note: str = "",
    host_main: Callable[[], object] | None = None,
) -> int:
  """Re-runs this program as the job's processes here; returns its status.

  For entry points that, without a detected cluster, run the job on this
  machine: each host runs `this_program()` with `argv` and finds the
  cluster through the variables `launch` sets.

  Args:
    argv: The program's arguments (typically `sys.argv[1:]`).
    num_hosts: Number of simulated hosts (processes), without `plan`.
    devices_per_host: Fake CPU devices per host, without `plan`.
    plan: The processes and their devices (`platforms.plan_local_hosts`).
    timeout_s: Stop the whole job after this many seconds.
    fresh_files: Files the job appends to (e.g. a metrics file), removed
      first: one run per file, and only this process (not every host) may
      remove them. None entries are skipped.
    note: Printed in the start-up line, e.g. "backend=mcjax".
    host_main: What a host of this program runs once it finds the job's
      variables (see `launch`): given, the hosts are forked from this
      process where that is safe.

  Returns:
    The job's exit status (see the module docstring).

  Raises:
    LaunchError: bad input; no host was started.
  """
  if plan is None:
    plan = platforms.simulated(num_hosts, devices_per_host)
  program = this_program()
  command = [*program, *argv]
  # Refused before anything is deleted (launch checks the rest).
  _check_sizes(num_hosts=plan.num_hosts,
               devices_per_host=plan.devices_per_host, timeout_s=timeout_s,
               grace_s=DEFAULT_GRACE_S)
  for path in fresh_files:
    if path and os.path.isdir(path):
      raise LaunchError(f"{path!r} is a directory, not a file the job can"
                        " write; give a file path.")
  for path in fresh_files:
    if path and os.path.exists(path):
      os.remove(path)
  if program[1] == "-m":
    name = program[2].rsplit(".", 1)[-1]
  else:
    name = os.path.splitext(os.path.basename(program[1]))[0]
  print(f"[{name}] on this machine: {note + ', ' if note else ''}"
        f"{plan.describe()}", flush=True)
  return launch(
      command,
      plan=plan,
      timeout_s=timeout_s,
      host_main=host_main,
  )


def main(argv: Sequence[str] | None = None) -> int:
  """Command-line entry point; returns the exit status."""
  argv = list(sys.argv[1:] if argv is None else argv)
  if "--" in argv:
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1 :]
  else:
    options, command = argv, []
  parser = argparse.ArgumentParser(
      prog="python -m tunix_mcjax.launch",
      usage=(
          "%(prog)s --num_hosts N --devices_per_host K [--timeout SECONDS]"
          " [--grace SECONDS] -- command [args ...]"
      ),
      description=(
          "Run a command as N simulated hosts of a multi-controller JAX job"
          " on this machine (CPU devices, loopback coordinator)."
      ),
  )
  parser.add_argument(
      "--num_hosts",
      type=int,
      required=True,
      help="number of host processes (>= 1)",
  )
  parser.add_argument(
      "--devices_per_host",
      type=int,
      required=True,
      help="fake CPU devices per host (>= 1)",
  )
  parser.add_argument(
      "--timeout",
      type=float,
      default=3600,
      help=(
          "stop the job after this many seconds (default 3600); the only"
          " guard against a collective joined by only some hosts"
      ),
  )
  parser.add_argument(
      "--grace",
      type=float,
      default=DEFAULT_GRACE_S,
      help=f"seconds between SIGTERM and SIGKILL (default {DEFAULT_GRACE_S})",
  )
  args, unknown = parser.parse_known_args(options)
  if unknown:
    parser.error(
        f"unrecognized arguments {unknown}; put the command after '--'."
    )
  try:
    return launch(
        command,
        num_hosts=args.num_hosts,
        devices_per_host=args.devices_per_host,
        timeout_s=args.timeout,
        grace_s=args.grace,
    )
  except LaunchError as e:
    _log(f"error: {e}")
    return EXIT_USAGE


if __name__ == "__main__":
  sys.exit(main())
