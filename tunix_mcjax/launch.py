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

Here: each host's environment, the checks before anything starts, the
command line and the re-run of an entry point as local hosts;
`host_processes` starts, supervises and stops the hosts. This module must
not import jax: it only starts processes.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
import os
import re
import shutil
import socket
import subprocess
import sys
from typing import NoReturn

from tunix_mcjax import host_fork
from tunix_mcjax import host_processes
from tunix_mcjax import platforms
from tunix_mcjax.runtime import ENV_COORDINATOR
from tunix_mcjax.runtime import ENV_DEVICES_PER_HOST
from tunix_mcjax.runtime import ENV_HOST_ID
from tunix_mcjax.runtime import ENV_NUM_HOSTS
from tunix_mcjax.runtime import xla_flags_with_device_count

# The contract between this launcher and tunix_mcjax.runtime (which owns
# the environment-variable names and imports no jax at module level).

EXIT_USAGE = 2
EXIT_TIMEOUT = host_processes.EXIT_TIMEOUT
MIN_PYTHON = (3, 11)
LOOPBACK = "127.0.0.1"
# Seconds between SIGTERM and SIGKILL when the hosts are stopped.
DEFAULT_GRACE_S = 5

_PYTHON_NAME = re.compile(r"python(\d+(\.\d+)*)?")


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


def check_timeout(timeout_s: float) -> None:
  """Raises LaunchError unless `timeout_s` (--timeout) is above 0."""
  if not timeout_s > 0:
    raise LaunchError(f"--timeout must be > 0 seconds, got {timeout_s!r}.")


def exit_host(status: int) -> NoReturn:
  """Ends this process with `status` after an error; in a multi-process JAX
  job at once (flushed, no exit handlers).

  JAX's exit handler waits at a shutdown barrier (5 minutes) for every
  host, and the others may be blocked in a collective waiting for this one
  (e.g. a reward call that timed out here): the barrier fails and aborts
  every host. Exiting at once lets the launcher (on a cluster, JAX's
  heartbeat) stop the others, with this host's error the first one seen.
  """
  jax = sys.modules.get("jax")  # Never imported here.
  if jax is not None and jax.distributed.is_initialized():
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # pylint: disable=protected-access
  sys.exit(status)


def _check_sizes(*, num_hosts: int, devices_per_host: int, timeout_s: float,
                 grace_s: float) -> None:
  """The numeric part of `check_launch` (no process started)."""

  def positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise LaunchError(f"{name} must be an integer >= 1, got {value!r}.")

  positive_int("num_hosts", num_hosts)
  positive_int("devices_per_host", devices_per_host)
  check_timeout(timeout_s)
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
  host_processes.log(
      f"{plan.describe()}, coordinator {coordinator}, timeout"
      f" {timeout_s:g} s: {' '.join(command)}{how}"
  )

  return host_processes.run(command, envs, host_main=host_main,
                            timeout_s=timeout_s, grace_s=grace_s)


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
    host_processes.log(f"error: {e}")
    return EXIT_USAGE


if __name__ == "__main__":
  sys.exit(main())
