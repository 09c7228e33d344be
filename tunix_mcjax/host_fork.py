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

"""Simulated hosts forked from a process that has imported JAX and Tunix.

The local launcher (`tunix_mcjax.launch`) starts each host either as a new
interpreter or, when the entry point hands it the function a host runs and
`fork_blocker` finds nothing against it, as a fork of the launching
process: the host then skips the interpreter's start-up and imports.

This module must not import jax: it only starts processes.
"""

from __future__ import annotations

import atexit
from collections.abc import Callable, Mapping, Sequence
import os
import signal
import sys
import threading
import traceback
from typing import BinaryIO, NoReturn

# "spawn" starts every host as a new interpreter even where forking is safe.
ENV_HOST_START = "TUNIX_MCJAX_HOST_START"


class ForkedProcess:
  """The parts of `subprocess.Popen` the launcher uses, for a forked host."""

  def __init__(self, pid: int, stdout: BinaryIO, stderr: BinaryIO):
    self.pid = pid
    self.stdout = stdout
    self.stderr = stderr
    self.returncode: int | None = None

  def wait(self) -> int:
    if self.returncode is None:
      _, status = os.waitpid(self.pid, 0)
      self.returncode = os.waitstatus_to_exitcode(status)
    return self.returncode


def fork_blocker(host_envs: Sequence[Mapping[str, str]]) -> str | None:
  """Why hosts cannot be forked from this process, or None if they can.

  A forked host skips the 3-11 s of CPU a new interpreter spends importing
  JAX and Tunix. That is safe only before anything that fork does not copy
  exists: Python threads (the child has only the forking one), a started
  JAX backend (XLA's thread pools, the distributed client), or JAX options
  that were read from the environment at import and differ for the hosts.
  Native threads that imports start (OpenBLAS's pool, the allocator's
  background thread) are fork-aware.

  Args:
    host_envs: The environment each host would get.
  """
  if not sys.platform.startswith("linux"):
    return "forking hosts is done on Linux only"
  if os.environ.get(ENV_HOST_START) == "spawn":
    return f"{ENV_HOST_START}=spawn"
  others = [t.name for t in threading.enumerate()
            if t is not threading.current_thread()]
  if others:
    return (f"this process runs {len(others)} other thread(s):"
            f" {', '.join(sorted(others))}")
  from tunix_mcjax import runtime  # pylint: disable=g-import-not-at-top

  started = runtime.backend_started()
  if started is None:
    return "cannot tell whether JAX's backend has started here"
  if started:
    return "JAX's backend has started in this process"
  for env in host_envs:
    for name in sorted(set(os.environ) | set(env)):
      # JAX reads JAX_* options at import; JAX_PLATFORMS is set again in
      # the child (`_run_forked_host`).
      if (name.startswith("JAX_") and name != "JAX_PLATFORMS"
          and os.environ.get(name) != env.get(name)):
        return f"the hosts' {name} differs from this process's"
  return None


def fork_host(
    host_main: Callable[[], object],
    env: Mapping[str, str],
    preexec: Callable[[], None] | None,
) -> ForkedProcess:
  """Forks one host that runs `host_main()` in `env`, as Popen would run it
  (own session, stdin from /dev/null, stdout and stderr to pipes)."""
  out_r, out_w = os.pipe()
  err_r, err_w = os.pipe()
  # Buffered text would be written twice, once by each process.
  sys.stdout.flush()
  sys.stderr.flush()
  pid = os.fork()
  if pid == 0:
    try:
      os.close(out_r)
      os.close(err_r)
      _run_forked_host(host_main, env, preexec, out_w, err_w)
    finally:
      os._exit(70)  # Not reached: _run_forked_host exits.
  os.close(out_w)
  os.close(err_w)
  return ForkedProcess(pid, os.fdopen(out_r, "rb"), os.fdopen(err_r, "rb"))


def _run_forked_host(
    host_main: Callable[[], object],
    env: Mapping[str, str],
    preexec: Callable[[], None] | None,
    out_w: int,
    err_w: int,
) -> NoReturn:
  """The child's side of `fork_host`; never returns."""

  def main() -> object:
    os.setsid()
    if preexec is not None:
      preexec()
    for sig in (signal.SIGTERM, signal.SIGHUP):
      signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    os.close(out_w)
    os.close(err_w)
    # As PYTHONUNBUFFERED does for a new interpreter: lines leave at once.
    for stream in (sys.stdout, sys.stderr):
      reconfigure = getattr(stream, "reconfigure", None)
      if reconfigure is not None:
        reconfigure(line_buffering=True)
    os.environ.clear()
    os.environ.update(env)
    if "jax" in sys.modules:
      import jax  # pylint: disable=g-import-not-at-top

      jax.config.update("jax_platforms", env.get("JAX_PLATFORMS") or None)
    return host_main()

  # A host that failed skips the exit handlers: JAX's distributed shutdown
  # would wait for the hosts still running, and the job must end at once.
  run_as_program(main, exit_handlers_after_error=False)


def run_as_program(main: Callable[[], object], *,
                   exit_handlers_after_error: bool) -> NoReturn:
  """Runs `main` in a forked child as an interpreter runs its program, then
  ends the child (never returns).

  The status: main's return value (None: 0), a SystemExit's (`sys.exit(
  "message")` prints the message, status 1), or 1 with a traceback for any
  other exception. Then what an interpreter does at exit: threading's exit
  hooks (executors stop their workers), joining non-daemon threads, the
  atexit handlers (after an exception only if `exit_handlers_after_error`);
  then the streams are flushed and the child exits with `os._exit`, so
  nothing of the parent's runs again in it.
  """
  code = 1
  try:
    failed = False
    try:
      result = main()
      code = 0 if result is None else int(result)
    except SystemExit as e:
      if e.code is None or isinstance(e.code, int):
        code = e.code or 0
      else:
        print(e.code, file=sys.stderr)
        code = 1
    except BaseException:  # pylint: disable=broad-exception-caught
      traceback.print_exc()
      code, failed = 1, True
    if exit_handlers_after_error or not failed:
      threading._shutdown()  # pylint: disable=protected-access
      atexit._run_exitfuncs()  # pylint: disable=protected-access
  except BaseException:  # pylint: disable=broad-exception-caught
    traceback.print_exc()
    code = code or 1
  finally:
    try:
      sys.stdout.flush()
      sys.stderr.flush()
    finally:
      os._exit(code & 0xFF)
