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

"""A fork server for the suite: Python programs the tests run start as forks
of a process that has imported JAX and Tunix, not as new interpreters.

    proc = zygote.popen([sys.executable, script, *args], env=..., ...)
    done = zygote.run([sys.executable, "-m", module, ...], capture_output=...)

Every example and CLI run used to start an interpreter that imports JAX and
Tunix (2-3 s of CPU each, about 200 times a suite run) before it forks its
hosts (`tunix_mcjax.host_fork`). `popen` and `run` take the arguments of
`subprocess.Popen` and `subprocess.run` and give back objects that behave
alike (pid, poll, wait, communicate, kill, pipes, exit status; the pid is
the program's own, so its descendants are the job's). The program runs in a
child of the server: `runpy` runs the script or module as `__main__`, with
the request's argv, environment, working directory, standard streams and
session, then the interpreter's exit steps.

Where forking would not give what a new interpreter gives, these fall back
to `subprocess`: a command that is not `sys.executable` with a script or
`-m module`, options `subprocess` has and this does not, or
`TUNIX_MCJAX_TEST_ZYGOTE=0`. Variables that the preloaded modules read at
import (`IMPORT_TIME_ENV`) key the server: a request whose values differ
from every running server's gets a server of its own (at most
`MAX_SERVERS`, then `subprocess`). JAX_PLATFORMS and the temp dir are set
again in the child, as `host_fork` does for hosts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import atexit
import contextlib
import json
import os
import re
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, NoReturn

from tunix_mcjax import host_fork

ENV_ZYGOTE = "TUNIX_MCJAX_TEST_ZYGOTE"
# What a server imports before it forks anything: what every example, CLI
# and host program imports first. Not the entry points, nor the modules
# that define absl flags (defined twice when runpy runs them again).
PRELOAD = ("jax", "jax.numpy", "flax.nnx", "optax", "orbax.checkpoint",
           "tunix.rl.rl_cluster", "tunix.rl.grpo.grpo_learner")
# Variables the interpreter or the preloaded modules read at start-up or
# import (site hooks, jax.config, huggingface_hub.constants, thread pools):
# a server only serves requests that agree with it on these.
IMPORT_TIME_ENV = re.compile(
    r"^(JAX_(?!PLATFORMS$)|PYTHON(?!UNBUFFERED$)|LD_|TF_|HF_HUB|HF_HOME$|"
    r"HUGGINGFACE|TRANSFORMERS|TOKENIZERS|OMP_|OPENBLAS|MKL_|GRPC_|"
    r"TENSORSTORE|XDG_|VLLM_|TUNIX_MCJAX_TEST_(SHARE|STATS|CACHE))")
MAX_SERVERS = 3
_HEADER = struct.Struct("!I")
_SUPPORTED_POPEN = frozenset(
    {"env", "cwd", "stdin", "stdout", "stderr", "text", "start_new_session",
     "universal_newlines"})


def import_key(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
  """The part of `env` a server must share with a request it serves."""
  return tuple(sorted((k, v) for k, v in env.items()
                      if IMPORT_TIME_ENV.match(k)))


def _program(args: Sequence[str]) -> tuple[bool, str, list[str]] | None:
  """(is a module, script or module name, its argv[1:]) for `python X ...`
  commands this can run; None for anything else."""
  args = [os.fspath(a) for a in args]
  if len(args) < 2 or not os.path.isabs(args[0]):
    return None
  if os.path.realpath(args[0]) != os.path.realpath(sys.executable):
    return None
  if args[1] == "-m" and len(args) >= 3:
    return True, args[2], args[3:]
  if args[1].endswith(".py") and not args[1].startswith("-"):
    return False, args[1], args[2:]
  return None


# The client side.


class Popen:
  """A program forked by a server; the parts of `subprocess.Popen` tests
  use. Its exit status comes from the server, which reaps it."""

  def __init__(self, server: "_Server", args: Sequence[str], *,
               env: Mapping[str, str], cwd: str | None = None, stdin=None,
               stdout=None, stderr=None, text: bool = False,
               universal_newlines: bool = False,
               start_new_session: bool = False):
    self.args = list(args)
    self.returncode: int | None = None
    self._wait_lock = threading.Lock()  # one reader of the server's replies
    self._buf = b""
    self.stdin = None
    self.stdout = None
    self.stderr = None
    text = text or universal_newlines
    is_module, target, rest = _program(args)
    opened: list[int] = []  # ours to close once the server has its copies
    theirs: list[int] = []
    ours: dict[str, int] = {}
    for name, spec, fallback in (("stdin", stdin, 0), ("stdout", stdout, 1),
                                 ("stderr", stderr, 2)):
      if spec is None:
        theirs.append(fallback)
      elif spec == subprocess.DEVNULL:
        fd = os.open(os.devnull, os.O_RDWR)
        opened.append(fd)
        theirs.append(fd)
      elif spec == subprocess.PIPE:
        r, w = os.pipe()
        child_end, our_end = (r, w) if name == "stdin" else (w, r)
        opened.append(child_end)
        theirs.append(child_end)
        ours[name] = our_end
      elif spec == subprocess.STDOUT and name == "stderr":
        theirs.append(theirs[1])
      elif isinstance(spec, int):
        theirs.append(spec)
      else:
        theirs.append(spec.fileno())
    request = {
        "module": is_module, "target": target, "argv": rest,
        "env": dict(env), "cwd": os.fspath(cwd or os.getcwd()),
        "session": bool(start_new_session),
    }
    try:
      self._conn = server.connect()
      body = json.dumps(request).encode()
      socket.send_fds(self._conn, [_HEADER.pack(len(body)) + body], theirs)
    finally:
      for fd in opened:
        os.close(fd)
    reply = self._reply(None)
    if "pid" not in reply:
      raise OSError(f"zygote could not start {self.args}: {reply}")
    self.pid = int(reply["pid"])
    for name, fd in ours.items():
      mode = "w" if name == "stdin" else "r"
      stream = (open(fd, mode, encoding="utf-8", errors="replace")
                if text else open(fd, mode + "b"))
      setattr(self, name, stream)
    self._readers: dict[str, threading.Thread] = {}
    self._read: dict[str, Any] = {}

  def _reply(self, timeout: float | None) -> dict[str, Any]:
    """The server's next line, waiting at most `timeout` seconds."""
    buf = self._buf
    deadline = None if timeout is None else time.monotonic() + timeout
    while b"\n" not in buf:
      self._conn.settimeout(
          None if deadline is None
          else max(0.0, deadline - time.monotonic()))
      try:
        chunk = self._conn.recv(4096)
      except (socket.timeout, BlockingIOError):
        self._buf = buf
        raise subprocess.TimeoutExpired(self.args, timeout) from None
      if not chunk:
        self._buf = buf
        return {"error": "the zygote closed the connection"}
      buf += chunk
    line, self._buf = buf.split(b"\n", 1)
    return json.loads(line)

  def poll(self) -> int | None:
    # As subprocess does: while another thread waits, that one will see
    # the status.
    if self.returncode is None and self._wait_lock.acquire(blocking=False):
      try:
        with contextlib.suppress(subprocess.TimeoutExpired):
          self._wait_locked(0.0)
      finally:
        self._wait_lock.release()
    return self.returncode

  def wait(self, timeout: float | None = None) -> int:
    if self.returncode is None:
      if not self._wait_lock.acquire(timeout=-1 if timeout is None
                                     else timeout):
        raise subprocess.TimeoutExpired(self.args, timeout)
      try:
        self._wait_locked(timeout)
      finally:
        self._wait_lock.release()
    return self.returncode

  def _wait_locked(self, timeout: float | None) -> None:
    if self.returncode is None:
      reply = self._reply(timeout)
      if "returncode" not in reply:
        raise OSError(f"zygote lost {self.args} (pid {self.pid}): {reply}")
      self.returncode = int(reply["returncode"])
      self._conn.close()

  def communicate(self, input=None, timeout: float | None = None):  # pylint: disable=redefined-builtin
    """As `subprocess.Popen.communicate`; may be called again after a
    timeout."""
    deadline = None if timeout is None else time.monotonic() + timeout
    if self.stdin is not None and not self._readers:
      if input:
        with contextlib.suppress(BrokenPipeError):
          self.stdin.write(input)
      with contextlib.suppress(BrokenPipeError):
        self.stdin.close()
    for name in ("stdout", "stderr"):
      stream = getattr(self, name)
      if stream is not None and name not in self._readers:
        thread = threading.Thread(
            target=lambda n=name, s=stream: self._read.__setitem__(
                n, s.read()), daemon=True)
        thread.start()
        self._readers[name] = thread
    for thread in self._readers.values():
      thread.join(None if deadline is None
                  else max(0.0, deadline - time.monotonic()))
      if thread.is_alive():
        raise subprocess.TimeoutExpired(self.args, timeout)
    self.wait(None if deadline is None
              else max(0.0, deadline - time.monotonic()))
    for name in ("stdout", "stderr"):
      stream = getattr(self, name)
      if stream is not None:
        stream.close()
    return self._read.get("stdout"), self._read.get("stderr")

  def send_signal(self, sig: int) -> None:
    if self.returncode is None:
      with contextlib.suppress(ProcessLookupError):
        os.kill(self.pid, sig)

  def terminate(self) -> None:
    self.send_signal(signal.SIGTERM)

  def kill(self) -> None:
    self.send_signal(signal.SIGKILL)

  def __del__(self):
    # A test that never waited: the server reaps the program anyway.
    conn = getattr(self, "_conn", None)
    if conn is not None:
      conn.close()

  def __enter__(self) -> "Popen":
    return self

  def __exit__(self, *exc) -> None:
    for stream in (self.stdout, self.stderr, self.stdin):
      if stream is not None:
        stream.close()
    self.wait()


class _Server:
  """One running zygote process and where to reach it."""

  def __init__(self, env: Mapping[str, str]):
    self._dir = tempfile.mkdtemp(prefix="mcjax-zygote.")
    self.path = os.path.join(self._dir, "socket")
    self._log = os.path.join(self._dir, "server.log")
    with open(self._log, "w") as log:
      self.process = subprocess.Popen(
          [sys.executable, os.path.abspath(__file__), self.path],
          env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
          stderr=log, text=True, start_new_session=True)
    line = self.process.stdout.readline().strip()
    if line != "ready":
      with open(self._log) as log:
        why = log.read()[-2000:]
      self.close()
      raise OSError(f"zygote did not start: {line!r} {why}")

  def connect(self) -> socket.socket:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(self.path)
    return conn

  def close(self) -> None:
    if self.process.poll() is None:
      self.process.terminate()
      try:
        self.process.wait(10)
      except subprocess.TimeoutExpired:
        self.process.kill()
        self.process.wait()
    self.process.stdout.close()
    for name in (self.path, self._log):
      with contextlib.suppress(OSError):
        os.remove(name)
    with contextlib.suppress(OSError):
      os.rmdir(self._dir)


_servers: dict[tuple[tuple[str, str], ...], _Server | None] = {}
_lock = threading.Lock()


def _server_for(env: Mapping[str, str]) -> _Server | None:
  key = import_key(env)
  with _lock:
    if key not in _servers:
      if len(_servers) >= MAX_SERVERS:
        return None
      try:
        _servers[key] = _Server(env)
      except OSError as e:
        print(f"zygote: falling back to new interpreters: {e}",
              file=sys.stderr)
        _servers[key] = None
    return _servers[key]


@atexit.register
def stop_all() -> None:
  """Stops every server this process started."""
  with _lock:
    for server in _servers.values():
      if server is not None:
        server.close()
    _servers.clear()


def enabled() -> bool:
  return (sys.platform.startswith("linux")
          and os.environ.get(ENV_ZYGOTE, "1") != "0")


def _server_or_none(args: Sequence[str], kwargs: Mapping[str, Any],
                    supported: frozenset[str]):
  if not enabled() or _program(args) is None or set(kwargs) - supported:
    return None
  env = kwargs.get("env")
  return _server_for(os.environ if env is None else env)


def popen(args: Sequence[str], **kwargs):
  """`subprocess.Popen(args, **kwargs)`, forked by a server where it can."""
  server = _server_or_none(args, kwargs, _SUPPORTED_POPEN)
  if server is None:
    return subprocess.Popen(args, **kwargs)
  kwargs.setdefault("env", dict(os.environ))
  return Popen(server, args, **kwargs)


def run(args: Sequence[str], *, capture_output: bool = False,
        timeout: float | None = None, check: bool = False, input=None,  # pylint: disable=redefined-builtin
        **kwargs) -> subprocess.CompletedProcess:
  """`subprocess.run(args, ...)`, forked by a server where it can; past
  `timeout` as `communicate_or_kill`."""
  if capture_output:
    kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  if input is not None:
    kwargs["stdin"] = subprocess.PIPE
  proc = popen(args, **kwargs)
  try:
    stdout, stderr = communicate_or_kill(proc, input=input, timeout=timeout)
  except TimedOut:
    raise
  except BaseException:
    proc.kill()
    proc.wait()
    raise
  done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout,
                                     stderr)
  if check:
    done.check_returncode()
  return done


class TimedOut(subprocess.TimeoutExpired):
  """A run past its timeout, killed with every process below it; its text
  ends with the tails of what the run printed (all a CI log keeps)."""

  def __str__(self) -> str:
    def tail(text: Any) -> str:
      if isinstance(text, bytes):
        text = text.decode(errors="replace")
      return (text or "")[-_TAIL_CHARS:]
    return (f"{super().__str__()}; killed with its descendants\n"
            f"--- stdout (tail) ---\n{tail(self.output)}\n"
            f"--- stderr (tail) ---\n{tail(self.stderr)}")


# What a timed-out run's error shows of each stream.
_TAIL_CHARS = 6000


def communicate_or_kill(proc, *, timeout: float | None, input=None):  # pylint: disable=redefined-builtin
  """`proc.communicate(input, timeout)`; past `timeout`, SIGKILLs `proc` and
  every process below it (a job's hosts, Ray head or workers hold its
  pipes too) and raises `TimedOut` with what it printed."""
  try:
    return proc.communicate(input, timeout=timeout)
  except subprocess.TimeoutExpired:
    pass
  _kill_tree(proc.pid)
  try:
    stdout, stderr = proc.communicate(timeout=30)
  except subprocess.TimeoutExpired:
    stdout = stderr = "(not readable: a process outside the tree holds it)"
  raise TimedOut(proc.args, timeout, stdout, stderr) from None


def _kill_tree(pid: int) -> None:
  import psutil  # pylint: disable=g-import-not-at-top

  try:
    tree = [psutil.Process(pid)]
    tree += tree[0].children(recursive=True)
  except psutil.Error:
    tree = []
  for proc in tree:
    with contextlib.suppress(psutil.Error):
      proc.kill()


# The server side (run as a script: `python zygote.py SOCKET`).


def _read_request(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
  data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
  while len(data) < _HEADER.size:
    more = conn.recv(1 << 16)
    if not more:
      raise EOFError("short request")
    data += more
  (size,) = _HEADER.unpack_from(data)
  data = data[_HEADER.size:]
  while len(data) < size:
    more = conn.recv(1 << 16)
    if not more:
      raise EOFError("short request")
    data += more
  return json.loads(data[:size]), list(fds)


def _run_child(request: dict[str, Any], fds: list[int]) -> NoReturn:
  """The forked program; never returns."""

  def main() -> None:
    if request["session"]:
      os.setsid()
    for target, fd in enumerate(fds):
      os.dup2(fd, target)
    for fd in set(fds):
      if fd > 2:
        os.close(fd)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
      signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    env = request["env"]
    os.environ.clear()
    os.environ.update(env)
    os.chdir(request["cwd"])
    tempfile.tempdir = None  # gettempdir() looks at TMPDIR again
    if env.get("PYTHONUNBUFFERED"):
      for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True, write_through=True)
    import jax  # pylint: disable=g-import-not-at-top

    jax.config.update("jax_platforms", env.get("JAX_PLATFORMS") or None)
    hook = sys.modules.get("_tunix_mcjax_stats_hook")
    if hook is not None:
      hook.adopt_environment()
    import runpy  # pylint: disable=g-import-not-at-top

    target = request["target"]
    sys.argv = [target, *request["argv"]]
    if request["module"]:
      sys.path[0] = os.getcwd()
      runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
      sys.path[0] = os.path.dirname(os.path.abspath(target))
      runpy.run_path(target, run_name="__main__")

  # As an interpreter: the exit handlers run after an uncaught exception too.
  host_fork.run_as_program(main, exit_handlers_after_error=True)


def _send(conn: socket.socket, message: dict[str, Any]) -> None:
  with contextlib.suppress(OSError):
    conn.sendall(json.dumps(message).encode() + b"\n")


def _serve(path: str) -> None:
  """Imports PRELOAD, then forks one program per request until its parent
  goes."""
  import importlib  # pylint: disable=g-import-not-at-top
  import importlib.util  # pylint: disable=g-import-not-at-top

  for name in PRELOAD:
    with contextlib.suppress(ImportError):
      importlib.import_module(name)
  if importlib.util.find_spec("vllm") is not None:
    # As a vLLM engine host imports it (its environment first), and its
    # LLM class: 5 s of a host's start-up on this machine.
    from tunix_mcjax.engines import vllm_options  # pylint: disable=g-import-not-at-top

    vllm, _ = vllm_options.import_vllm()
    getattr(vllm, "LLM")
  if threading.active_count() != 1:
    print(f"threads after the imports: {threading.active_count()}",
          flush=True)
    return
  parent = os.getppid()
  listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
  listener.bind(path)
  listener.listen(64)
  sel = selectors.DefaultSelector()
  sel.register(listener, selectors.EVENT_READ, ("accept", None))
  stop = []
  signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
  print("ready", flush=True)
  # pid -> (connection, pidfd); a connection closed early kills the program.
  running: dict[int, tuple[socket.socket | None, int]] = {}
  while not stop and os.getppid() == parent:
    for key, _ in sel.select(timeout=1.0):
      kind, pid = key.data
      if kind == "accept":
        conn, _ = listener.accept()
        try:
          request, fds = _read_request(conn)
        except (OSError, EOFError, ValueError) as e:
          _send(conn, {"error": repr(e)})
          conn.close()
          continue
        sys.stdout.flush()
        sys.stderr.flush()
        child = os.fork()
        if child == 0:
          sel.close()
          listener.close()
          for other, fd in running.values():
            if other is not None:
              other.close()
            os.close(fd)
          conn.close()
          _run_child(request, fds)
        for fd in fds:
          os.close(fd)
        _send(conn, {"pid": child})
        pidfd = os.pidfd_open(child)
        running[child] = (conn, pidfd)
        sel.register(pidfd, selectors.EVENT_READ, ("exit", child))
        sel.register(conn, selectors.EVENT_READ, ("client", child))
      elif kind == "exit":
        conn, pidfd = running.pop(pid)
        _, status = os.waitpid(pid, 0)
        sel.unregister(pidfd)
        os.close(pidfd)
        if conn is not None:
          sel.unregister(conn)
          _send(conn, {"returncode": os.waitstatus_to_exitcode(status)})
          conn.close()
      elif kind == "client":
        conn, pidfd = running[pid]
        if not conn.recv(1):  # the client went away: so does its program
          sel.unregister(conn)
          conn.close()
          running[pid] = (None, pidfd)
          with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
  # The loop can end on its parent's exit before it reads that the same
  # exit closed a client's connection: those programs go too.
  for pid, (conn, _) in running.items():
    if conn is not None and _closed(conn):
      with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _closed(conn: socket.socket) -> bool:
  """Whether the client closed `conn` (without waiting for it)."""
  try:
    return not conn.recv(1, socket.MSG_DONTWAIT)
  except BlockingIOError:
    return False
  except OSError:
    return True


def _remove_own_files(path: str) -> None:
  """The socket, the log and their temp dir, where the client could not
  (its process was killed)."""
  directory = os.path.dirname(path)
  for name in (path, os.path.join(directory, "server.log")):
    with contextlib.suppress(OSError):
      os.remove(name)
  with contextlib.suppress(OSError):
    os.rmdir(directory)


if __name__ == "__main__":
  try:
    _serve(sys.argv[1])
  finally:
    _remove_own_files(sys.argv[1])
