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

"""Starts and stops the Ray cluster a disaggregated job runs on.

  with ray_local.RaySession(ray_local.RaySessionConfig(num_cpus=4)):
    ...  # ray.remote actors, ray.get, ...

`address=None` starts a Ray head on this machine, owned by this process and
bound to loopback only; any other address connects to an existing cluster,
which `close()` leaves running (it only disconnects; the job's launcher kills
its own actors first). An address on loopback (e.g. 127.0.0.1:6379, a cluster
on this machine bound to loopback) is connected to on loopback.

What keeps a local head on loopback (ray 2.60; tests/da/test_ray_local.py
checks every listening socket of the job's processes):
  * Ray binds its servers (GCS, raylet, core workers, runtime-env and
    dashboard agents, the autoscaler's metrics) to the node IP, or to the
    loopback address when the node IP is loopback. But ray.init turns a
    loopback `_node_ip_address` into the machine's routable address, unless
    `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` (read when ray is imported, hence
    also the flag Ray keeps of it, which `compat.ray_cluster` turns off
    around ray.init; the private Ray names used here all live there, and a
    Ray that stops reading the flag fails the node-IP check after start-up).
  * include_dashboard=False: no dashboard HTTP server.
  * AUTOSCALER_METRIC_PORT=0: the monitor's metrics port is a free one, not
    the fixed 44217 that two heads on one machine would fight over.
  * RAY_USAGE_STATS_ENABLED=0; a per-session RAY_AUTH_TOKEN (Ray's token
    authentication, on by default, would otherwise write ~/.ray/auth_token).
  * The temp dir is short (/tmp/mcjray_XXXXXXXX): Ray's sockets live at
    TEMP/session_<date>_<pid>/sockets/plasma_store and an AF_UNIX path has at
    most 107 bytes.

Ray ties its processes' lifetime to the *thread* that started them (Linux
parent-death signal), so a local head is started from the main thread, which
must outlive the session; Ray also installs a SIGTERM handler there that
turns SIGTERM into SystemExit, so the `with` block, close() and the atexit
hook run on SIGTERM too.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import logging as std_logging
import os
import secrets
import shutil
import signal
import threading
import time
from types import TracebackType
from typing import Any, Mapping

from absl import logging

from tunix_mcjax.compat import ray_cluster as compat_ray
from tunix_mcjax import temp_dirs
from tunix_mcjax.da import options as options_lib
from tunix_mcjax.da import ray_processes
from tunix_mcjax.rules.values import is_int

# Every process Ray starts for a local head inherits SESSION_ENV (set in
# this process only while ray.init runs), which is how close() finds the
# session's processes even after Ray re-parents them (`ray_processes`).
SESSION_ENV = ray_processes.SESSION_ENV
session_pids = ray_processes.session_pids
# Set (to anything but "" or "0"): a local head's temp dir (Ray's logs) is
# kept when the job fails; by default it is removed on every exit path.
KEEP_LOGS_ENV = "TUNIX_MCJAX_KEEP_RAY_LOGS"
# ray.init's address that always starts a new local head (None or "auto"
# would first follow RAY_ADDRESS or a cluster started by `ray start`).
_LOCAL = "local"
# TEMP/session_YYYY-MM-DD_HH-MM-SS_UUUUUU_PPPPPPP/sockets/plasma_store.NN is
# 67 bytes after TEMP; AF_UNIX paths hold 107.
MAX_TEMP_ROOT_CHARS = 40
# Ray refuses object stores below 75 MiB.
_MIN_OBJECT_STORE_BYTES = 75 * 1024 * 1024
_LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})
_AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


class RayStartTimeout(TimeoutError):
  """Ray did not come up (or could not be reached) within start_timeout_s."""


class _Deadline(BaseException):
  """start_timeout_s passed while ray.init ran (raised by the SIGALRM handler).

  A BaseException so that Ray's own `except Exception` retries do not swallow
  it.
  """


@dataclasses.dataclass(frozen=True, kw_only=True)
class RaySessionConfig:
  """Where the job's Ray cluster comes from and how long to wait for it.

  Attributes:
    address: None starts a Ray head on this machine, bound to 127.0.0.1 only,
      and stops it with the session. Otherwise the address of a running
      cluster ("auto", "HOST:PORT" of its GCS, or "ray://HOST:PORT" of its
      Ray Client server), which the session only connects to.
    num_cpus: logical CPUs the local head offers to actors (None: all of the
      machine's). Local head only.
    object_store_memory: bytes of the local head's object store (None: Ray's
      default, 30% of memory). Local head only.
    namespace: the Ray namespace the job's named actors live in (the DA
      launcher passes each launch's own, `launcher.job_namespace`).
    start_timeout_s: how long start() waits for Ray to come up or to connect.
    stop_timeout_s: how long close() waits for the local head's processes to
      exit after ray.shutdown() before it kills them.
    temp_root: Ray's temp dir for a local head (logs, sockets, spilled
      objects); absolute and at most MAX_TEMP_ROOT_CHARS long. None: a fresh
      /tmp/mcjray_XXXXXXXX, removed by close() (kept when Ray failed to
      start or to stop, or the job failed and KEEP_LOGS_ENV is set; a kept
      or SIGKILLed driver's directory goes when the next local head starts:
      `ray_processes.sweep_abandoned`).
      One session per temp_root at a time: close() stops every Ray process
      started under it.
    env_vars: environment variables of every task and actor of the job (the
      job's runtime_env); an actor's own runtime_env can add more.
    log_to_driver: forward the actors' stdout/stderr to this process. Ray's
      own messages in this process are shown from WARNING up either way.
  """

  address: str | None = None
  num_cpus: int | None = None
  object_store_memory: int | None = None
  namespace: str = options_lib.DEFAULT_NAMESPACE
  start_timeout_s: float = 120.0
  stop_timeout_s: float = 15.0
  temp_root: str | None = None
  env_vars: Mapping[str, str] = dataclasses.field(default_factory=dict)
  log_to_driver: bool = True

  def __post_init__(self):
    if self.address is not None:
      if not isinstance(self.address, str) or not self.address.strip():
        raise ValueError(
            f"address must be None (start a local head) or a cluster address,"
            f" got {self.address!r}."
        )
      if self.address == _LOCAL:
        raise ValueError(
            'address="local" would start a head without the loopback-only'
            " settings; use address=None for a local head."
        )
      for name in ("num_cpus", "object_store_memory", "temp_root"):
        if getattr(self, name) is not None:
          raise ValueError(
              f"{name} applies to a local head only; leave it None when"
              f" connecting to {self.address!r} (the cluster's own settings"
              " apply)."
          )
    if self.num_cpus is not None and (
        not is_int(self.num_cpus) or self.num_cpus < 1):
      raise ValueError(f"num_cpus must be an integer >= 1 or None, got"
                       f" {self.num_cpus!r}.")
    if self.object_store_memory is not None and (
        not is_int(self.object_store_memory)
        or self.object_store_memory < _MIN_OBJECT_STORE_BYTES):
      raise ValueError(
          f"object_store_memory must be None or at least"
          f" {_MIN_OBJECT_STORE_BYTES} bytes (75 MiB, Ray's minimum), got"
          f" {self.object_store_memory!r}."
      )
    if not isinstance(self.namespace, str) or not self.namespace:
      raise ValueError(f"namespace must be a non-empty string, got"
                       f" {self.namespace!r}.")
    for name in ("start_timeout_s", "stop_timeout_s"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, (int, float)) or (
          not value > 0):
        raise ValueError(f"{name} must be a number > 0, got {value!r}.")
    if self.temp_root is not None:
      if not isinstance(self.temp_root, str) or not os.path.isabs(
          self.temp_root):
        raise ValueError(f"temp_root must be an absolute path, got"
                         f" {self.temp_root!r}.")
      if len(self.temp_root) > MAX_TEMP_ROOT_CHARS:
        raise ValueError(
            f"temp_root {self.temp_root!r} has {len(self.temp_root)}"
            f" characters; at most {MAX_TEMP_ROOT_CHARS} fit, because Ray's"
            " sockets live under TEMP/session_<date>_<pid>/sockets/ and an"
            " AF_UNIX socket path holds at most 107 bytes. Use a shorter path"
            " (e.g. under /tmp) or None."
        )
    if not isinstance(self.env_vars, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str)
        for k, v in self.env_vars.items()):
      raise ValueError(f"env_vars must map str to str, got"
                       f" {self.env_vars!r}.")
    if not isinstance(self.log_to_driver, bool):
      raise ValueError(f"log_to_driver must be a bool, got"
                       f" {self.log_to_driver!r}.")

  @property
  def local(self) -> bool:
    return self.address is None


class RaySession:
  """One Ray cluster connection for the job: start() ... close().

  A context manager: `with RaySession(config) as session:` starts Ray and
  closes it on the way out, exceptions and SIGTERM included (an atexit hook
  covers a process that exits without leaving the block). One session per
  process at a time.

  Attributes:
    config: the RaySessionConfig.
    temp_dir: the local head's temp dir (None when connected to a cluster).
    start_s: seconds start() took (None before).
    stop_s: seconds the last close() took (None before).
  """

  def __init__(self, config: RaySessionConfig | None = None):
    self.config = config or RaySessionConfig()
    self.temp_dir: str | None = None
    self.start_s: float | None = None
    self.stop_s: float | None = None
    self._started = False
    self._own_temp_dir = False
    self._saved_env: dict[str, str | None] = {}

  # --- start ------------------------------------------------------------------

  def start(self) -> RaySession:
    """Starts (address None) or connects to (otherwise) the job's Ray.

    Returns:
      self.

    Raises:
      RuntimeError: a Ray is already initialized in this process, a local head
        is started outside the main thread, or the head came up on an address
        other than loopback.
      RayStartTimeout: Ray was not up within start_timeout_s; the message says
        what to check.
    """
    if self._started:
      raise RuntimeError("This RaySession is started already.")
    if threading.current_thread() is not threading.main_thread():
      raise RuntimeError(
          "Start the RaySession from the main thread: Ray ties the lifetime"
          " of the processes it starts to the thread that started them, and"
          " its SIGTERM handling and the start timeout need the main thread."
      )
    import ray  # pylint: disable=g-import-not-at-top

    if ray.is_initialized():
      raise RuntimeError(
          "Ray is initialized in this process already (ray.init was called"
          " outside RaySession); call ray.shutdown() first or use that"
          " connection."
      )
    config = self.config
    t0 = time.perf_counter()
    kwargs: dict[str, Any] = dict(
        namespace=config.namespace,
        log_to_driver=config.log_to_driver,
        logging_level=std_logging.WARNING,
    )
    if config.env_vars:
      kwargs["runtime_env"] = {"env_vars": dict(config.env_vars)}
    if config.local:
      self._prepare_local_env()
      kwargs.update(
          address=_LOCAL,
          include_dashboard=False,
          num_cpus=config.num_cpus,
          object_store_memory=config.object_store_memory,
          **compat_ray.temp_dir_kwargs(self.temp_dir),
      )
    else:
      kwargs["address"] = config.address
    atexit.register(self._atexit_close)
    self._started = True
    try:
      self._init_with_deadline(ray, kwargs)
      if config.local:
        self._check_loopback(ray)
    except BaseException as e:
      # Nothing to wait for: what a failed start left is killed at once.
      self._close(keep_logs=True, grace_s=0.5)
      if isinstance(e, _Deadline):
        raise RayStartTimeout(self._timeout_message()) from None
      raise
    finally:
      os.environ.pop(SESSION_ENV, None)
    self.start_s = time.perf_counter() - t0
    if config.local:
      logging.info("Ray head up on 127.0.0.1 in %.1f s (temp dir %s).",
                   self.start_s, self.temp_dir)
    else:
      logging.info("Connected to Ray at %s in %.1f s.", config.address,
                   self.start_s)
    return self

  def _prepare_local_env(self) -> None:
    """Temp dir and the environment the local head's processes inherit."""
    config = self.config
    if config.temp_root is None:
      # What killed drivers left (their heads' processes too) goes first.
      ray_processes.sweep_abandoned()
      self.temp_dir = temp_dirs.make(ray_processes.TEMP_PREFIX, parent="/tmp")
      self._own_temp_dir = True
    else:
      os.makedirs(config.temp_root, exist_ok=True)
      self.temp_dir = config.temp_root
    env = {
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
        "AUTOSCALER_METRIC_PORT": "0",
        # Every actor of a job has a runtime env of its own (its devices),
        # which no prestarted idle worker has: the one per CPU Ray starts
        # with the head, and again for the first driver, would only take
        # CPU while the job starts.
        "RAY_enable_worker_prestart": "0",
        "RAY_prestart_worker_first_driver": "0",
    }
    if not any(name in os.environ for name in _AUTH_ENV):
      # Ray turns token authentication on for a new local head and would
      # store a token under ~/.ray; a per-session token keeps it here. Stays
      # set while the session is open so that processes this one starts can
      # connect.
      env["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    for name, value in env.items():
      self._saved_env.setdefault(name, os.environ.get(name))
      os.environ[name] = value
    # Ray sets RAY_AUTH_MODE itself when it turns authentication on.
    self._saved_env.setdefault("RAY_AUTH_MODE", os.environ.get("RAY_AUTH_MODE"))
    os.environ[SESSION_ENV] = self.temp_dir

  def _init_with_deadline(self, ray: Any, kwargs: dict[str, Any]) -> None:
    """ray.init, interrupted by SIGALRM at start_timeout_s."""
    timeout = float(self.config.start_timeout_s)
    armed = [True]

    def on_alarm(signum, frame):
      del signum, frame
      # Not once the finally clause below has begun: raising there would skip
      # the restoring of the old handler.
      if armed[0]:
        raise _Deadline()

    # If ray.init is stuck in C++ (where a Python signal handler cannot run),
    # killing the head's processes makes that call fail and return.
    backstop = None
    if self.config.local:
      backstop = threading.Timer(timeout + 5.0, self._kill_stuck_start)
      backstop.daemon = True
    # See the module docstring: keeps the node IP on loopback even when ray
    # was imported before RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER was set. For a
    # cluster reached on loopback (one on this machine bound to 127.0.0.1) it
    # also stops ray.init from rewriting the address into the machine's
    # routable one, where nothing listens. Undone once the alarm is off.
    flags = contextlib.ExitStack()
    flags.enter_context(compat_ray.loopback_node_ip(
        self.config.local or _on_loopback(self.config.address)))
    old_handler = signal.signal(signal.SIGALRM, on_alarm)
    # Again every 0.25 s until disarmed: an alarm that lands where Python
    # ignores exceptions (logging's at-fork hook while ray.init starts a
    # process) would otherwise be lost, and the deadline with it.
    old_delay, _ = signal.setitimer(signal.ITIMER_REAL, timeout, 0.25)
    t0 = time.monotonic()
    try:
      if backstop is not None:
        backstop.start()
      # Quiets Ray's start-up notice that token authentication is on (it is
      # on on purpose; see _prepare_local_env).
      with compat_ray.quiet_auth_notice():
        ray.init(**kwargs)
    finally:
      armed[0] = False
      signal.setitimer(signal.ITIMER_REAL, 0)
      signal.signal(signal.SIGALRM, old_handler)
      flags.close()
      if backstop is not None:
        backstop.cancel()
      if old_delay:
        # Someone else's alarm was pending: give it back its remaining time.
        remaining = old_delay - (time.monotonic() - t0)
        signal.setitimer(signal.ITIMER_REAL, max(remaining, 1e-3))

  def _kill_stuck_start(self) -> None:
    pids = self._session_pids()
    logging.warning("ray.init is stuck past start_timeout_s; killing the"
                    " head's processes: %s", ray_processes.describe(pids))
    ray_processes.kill(pids)

  def _check_loopback(self, ray: Any) -> None:
    addresses = {node["NodeManagerAddress"] for node in ray.nodes()}
    if not addresses <= _LOOPBACK:
      raise RuntimeError(
          f"The local Ray head came up on {sorted(addresses)}, not on"
          " loopback: this Ray version no longer keeps a local node on"
          " 127.0.0.1 the way tunix_mcjax.da.ray_local sets it up (see its"
          " docstring); fix ray_local for this Ray or pin ray==2.60.*."
      )

  def _timeout_message(self) -> str:
    config = self.config
    if config.local:
      return (
          f"The local Ray head did not come up within {config.start_timeout_s}"
          f" s (start_timeout_s). Check the logs of the process that did not"
          f" start in {self.temp_dir}/session_*/logs/ (gcs_server.out,"
          " raylet.out, raylet.err, monitor.log); that /dev/shm has room for"
          " the object store (object_store_memory); that the machine is not"
          " overloaded (raise start_timeout_s on a busy machine); and that"
          " nothing stops Ray processes meanwhile (`ray stop` stops every Ray"
          " on the machine)."
      )
    return (
        f"Could not connect to the Ray cluster at {config.address!r} within"
        f" {config.start_timeout_s} s (start_timeout_s). Check that the"
        f" cluster runs (`ray status --address {config.address}` on a node of"
        " it), that this machine reaches that address and port, and, if the"
        " cluster uses token authentication, that RAY_AUTH_TOKEN (or"
        " RAY_AUTH_TOKEN_PATH) here holds its token."
    )

  # --- stop -------------------------------------------------------------------

  def close(self, *, keep_logs: bool = False) -> None:
    """Stops the local head (or disconnects from the cluster); idempotent.

    Every process of a local head is gone when this returns: what Ray leaves
    behind after ray.shutdown() is killed, with a warning naming it.

    Args:
      keep_logs: keep a temp dir this session created (it is kept anyway when
        processes had to be killed).
    """
    self._close(keep_logs=keep_logs, grace_s=self.config.stop_timeout_s)

  def _close(self, *, keep_logs: bool, grace_s: float) -> None:
    if not self._started:
      return
    self._started = False
    atexit.unregister(self._atexit_close)
    t0 = time.perf_counter()
    import ray  # pylint: disable=g-import-not-at-top

    try:
      ray.shutdown(wait_for_processes=True)
    except Exception:  # pylint: disable=broad-exception-caught
      # A half-started Ray may fail to shut down; what it left is killed below.
      logging.exception("ray.shutdown() failed; killing what is left.")
      keep_logs = True
    if self.config.local:
      if self._reap(grace_s):
        keep_logs = True
      self._end_local(keep_logs)
    self.stop_s = time.perf_counter() - t0
    logging.info("Ray stopped in %.1f s.", self.stop_s)

  def abandon(self) -> None:
    """Leaves a Ray whose head is lost without calling Ray again.

    ray.shutdown() would wait for the lost GCS (up to Ray's reconnect limit,
    then a fatal exit); a local head's processes are killed instead. The
    process then exits through `ray_waits.leave_without_ray`, since Ray's own
    exit hook would wait as well.
    """
    if not self._started:
      return
    self._started = False
    atexit.unregister(self._atexit_close)
    if self.config.local:
      ray_processes.kill(self._session_pids())
      self._end_local(keep_logs=_keep_logs_asked())

  def _end_local(self, keep_logs: bool) -> None:
    """Restores the environment; removes or names the local temp dir."""
    for name, value in self._saved_env.items():
      if value is None:
        os.environ.pop(name, None)
      else:
        os.environ[name] = value
    self._saved_env.clear()
    if self._own_temp_dir and not keep_logs:
      shutil.rmtree(self.temp_dir, ignore_errors=True)
    elif self.temp_dir:
      logging.warning(
          "Ray's logs of this session are kept in %s%s.", self.temp_dir,
          "" if not self._own_temp_dir else
          " (removed when the next local Ray head starts on this machine)")

  def _reap(self, grace_s: float) -> bool:
    """Waits up to grace_s for the head's processes to exit, kills the rest.

    Returns:
      Whether any had to be killed.
    """
    deadline = time.monotonic() + grace_s
    pids = self._session_pids()
    while pids and time.monotonic() < deadline:
      time.sleep(0.1)
      pids = self._session_pids()
    if not pids:
      return False
    logging.warning(
        "Ray left %d process(es) of session %s running %.0f s after"
        " ray.shutdown(): %s; killing them.", len(pids), self.temp_dir,
        grace_s, ray_processes.describe(pids))
    ray_processes.kill(pids)
    return True

  def _atexit_close(self) -> None:
    self.close(keep_logs=_keep_logs_asked())

  def _session_pids(self) -> list[int]:
    return (ray_processes.session_pids(self.temp_dir) if self.temp_dir
            else [])

  def __enter__(self) -> RaySession:
    return self.start()

  def __exit__(self, exc_type: type[BaseException] | None,
               exc: BaseException | None, tb: TracebackType | None) -> None:
    # A failed job's actor errors reached this process's output; Ray's own
    # logs are kept only when asked.
    self.close(keep_logs=exc_type is not None and _keep_logs_asked())


def _keep_logs_asked() -> bool:
  return os.environ.get(KEEP_LOGS_ENV, "") not in ("", "0")


def _on_loopback(address: str | None) -> bool:
  """Whether a cluster address ("auto": RAY_ADDRESS) names a loopback host."""
  if address == "auto":
    address = os.environ.get("RAY_ADDRESS")
  if not address:
    return False
  host = address.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
  return host in _LOOPBACK
