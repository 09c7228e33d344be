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

"""Per-process JAX compile statistics for the test suite's timings report.

sitecustomize.py (next to this file) imports this module only when
TUNIX_MCJAX_TEST_STATS_DIR is set. It then waits, without importing jax, for
the process to import jax (_tunix_mcjax_jax_watch), and from then on counts
`jax.monitoring` events: compiles, their trace, lowering and backend seconds,
persistent compilation cache requests and hits.

Each process that imported jax leaves one JSON record in the stats dir,
`<pid>-<start ms>.json` (the start time because pids get reused within a
suite: pid_max is often 32768). The record is rewritten after every backend
compile and at exit, through a temporary file and os.replace, so a reader
never sees half a file and a killed process still leaves its numbers up to
its last compile. Processes that never import jax write nothing.

The pytest process loads this module too (tests/support/suite_stats.py) and
switches to per-test records, `<pid>-pytest-<n>.json`, one per test that
compiled anything (`enable`, `begin_test`).

Record fields: version, role ("process" or "pytest"), pid, ppid, argv,
test_id (TUNIX_MCJAX_TEST_ID, or None), start, end (time.time()), complete
(False until the exit flush), jax_imported, jax_import_s, cache_dir
(jax_compilation_cache_dir at the write), compiles (backend compile events),
requests (compiles that asked the persistent cache; jax 0.12 asks even with
no cache dir), hits, misses (requests - hits), misses_recorded (JAX's own
cache_misses event, only counted when an entry is written), backend_compile_s,
trace_s, lower_s (jaxpr to MLIR), cache_retrieval_s, compile_time_saved_s.

Nothing here may ever fail the process it measures: every hook swallows its
exceptions.
"""

import os
import sys
import time

import _tunix_mcjax_jax_watch

STATS_DIR_ENV = "TUNIX_MCJAX_TEST_STATS_DIR"
TEST_ID_ENV = "TUNIX_MCJAX_TEST_ID"
RECORD_VERSION = 1

# jax.monitoring event names, as of jax 0.12 (jax/_src/compiler.py,
# compilation_cache.py, dispatch.py); a renamed event just counts nothing.
_COUNTED_EVENTS = {
    "/jax/compilation_cache/compile_requests_use_cache": "requests",
    "/jax/compilation_cache/cache_hits": "hits",
    "/jax/compilation_cache/cache_misses": "misses_recorded",
}
_BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_SUMMED_DURATIONS = {
    _BACKEND_COMPILE_EVENT: "backend_compile_s",
    "/jax/core/compile/jaxpr_trace_duration": "trace_s",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s",
    "/jax/compilation_cache/cache_retrieval_time_sec": "cache_retrieval_s",
    "/jax/compilation_cache/compile_time_saved_sec": "compile_time_saved_s",
}
_COUNTERS = ("compiles", *_COUNTED_EVENTS.values(),
             *_SUMMED_DURATIONS.values())
_ARGV_CHARS = 300

_state = {
    "dir": os.environ.get(STATS_DIR_ENV) or None,
    "test_id": os.environ.get(TEST_ID_ENV) or None,
    "start": time.time(),
    "pid": os.getpid(),
    "role": "process",  # "pytest" once per-test records are on
    "bucket": 0,  # the pytest process's record number
    "jax_imported": False,
    "jax_import_s": None,
    "listening": False,
    "lock": None,  # a threading.Lock once jax is imported
    "json": None,  # json and threading.get_ident, imported with the
    "thread_id": None,  # listeners: no imports inside a listener
    "counts": dict.fromkeys(_COUNTERS, 0),
}


def _file_name() -> str:
  if _state["role"] == "pytest":
    return f"{_state['pid']}-pytest-{_state['bucket']}.json"
  return f"{_state['pid']}-{int(_state['start'] * 1000)}.json"


def _cache_dir() -> str | None:
  try:
    return sys.modules["jax"].config.jax_compilation_cache_dir or None
  except Exception:  # pylint: disable=broad-exception-caught
    return None


def _record(complete: bool) -> dict[str, object]:
  counts = dict(_state["counts"])
  counts["misses"] = max(0, counts["requests"] - counts["hits"])
  return {
      "version": RECORD_VERSION,
      "role": _state["role"],
      "pid": _state["pid"],
      "ppid": os.getppid(),
      "argv": " ".join(sys.argv)[:_ARGV_CHARS],
      "test_id": _state["test_id"],
      "start": _state["start"],
      "end": time.time(),
      "complete": complete,
      "jax_imported": _state["jax_imported"],
      "jax_import_s": _state["jax_import_s"],
      "cache_dir": _cache_dir(),
      **counts,
  }


def _empty() -> bool:
  return not any(_state["counts"].values())


def _write(complete: bool = False) -> None:
  """Writes this process's (or the pytest test's) record; never raises."""
  try:
    stats_dir = _state["dir"]
    if not stats_dir or not _state["jax_imported"]:
      return
    # The pytest process only keeps records of tests that compiled.
    if _state["role"] == "pytest" and _empty():
      return
    name = _file_name()
    text = _state["json"].dumps(_record(complete), sort_keys=True)
    os.makedirs(stats_dir, exist_ok=True)
    # Per thread: the atexit flush takes no lock and may meet a compile's.
    tmp = os.path.join(stats_dir, f".{name}.{_state['thread_id']()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
      f.write(text)
    os.replace(tmp, os.path.join(stats_dir, name))
  except Exception:  # pylint: disable=broad-exception-caught
    pass


def _on_event(event: str, **kwargs) -> None:
  del kwargs
  try:
    key = _COUNTED_EVENTS.get(event)
    if key is not None:
      with _state["lock"]:
        _state["counts"][key] += 1
  except Exception:  # pylint: disable=broad-exception-caught
    pass


def _on_duration(event: str, duration_secs: float, **kwargs) -> None:
  del kwargs
  try:
    key = _SUMMED_DURATIONS.get(event)
    if key is None:
      return
    with _state["lock"]:
      _state["counts"][key] += float(duration_secs)
      if event == _BACKEND_COMPILE_EVENT:
        _state["counts"]["compiles"] += 1
        # A SIGKILLed or os._exit()ed host runs no atexit: flush now.
        _write()
  except Exception:  # pylint: disable=broad-exception-caught
    pass


def _after_fork_in_child() -> None:
  """A forked child is a new process: fresh counters, its own record."""
  try:
    import threading  # pylint: disable=g-import-not-at-top

    _state.update(pid=os.getpid(), start=time.time(), role="process",
                  bucket=0, lock=threading.Lock(),
                  counts=dict.fromkeys(_COUNTERS, 0))
  except Exception:  # pylint: disable=broad-exception-caught
    pass


def adopt_environment() -> None:
  """A process forked by the suite's zygote (tests/support/zygote.py) runs
  for the test that asked for it: its stats dir and test id are in the
  environment it was given, not in the one at the fork."""
  try:
    _state.update(dir=os.environ.get(STATS_DIR_ENV) or None,
                  test_id=os.environ.get(TEST_ID_ENV) or None)
  except Exception:  # pylint: disable=broad-exception-caught
    pass


def install_listeners() -> None:
  """Registers the jax.monitoring listeners, once; needs jax imported."""
  if _state["listening"]:
    return
  import atexit  # pylint: disable=g-import-not-at-top
  import json  # pylint: disable=g-import-not-at-top
  import threading  # pylint: disable=g-import-not-at-top

  from jax import monitoring  # pylint: disable=g-import-not-at-top

  _state.update(lock=threading.Lock(), json=json,
                thread_id=threading.get_ident)
  _state["jax_imported"] = True
  monitoring.register_event_listener(_on_event)
  monitoring.register_event_duration_secs_listener(_on_duration)
  _state["listening"] = True
  atexit.register(_write, True)
  os.register_at_fork(after_in_child=_after_fork_in_child)


def begin_test(test_id: str | None) -> None:
  """The pytest process: closes the running test's record, starts the next.

  Compiles between tests (collection, session teardown) land in records with
  test_id None.
  """
  try:
    lock = _state["lock"]
    if lock is None:  # jax not imported yet: nothing counted so far
      _state.update(test_id=test_id, start=time.time(), role="pytest")
      return
    with lock:
      _write(complete=True)
      if _state["role"] == "pytest" and not _empty():
        _state["bucket"] += 1
      _state.update(test_id=test_id, start=time.time(), role="pytest",
                    counts=dict.fromkeys(_COUNTERS, 0))
  except Exception:  # pylint: disable=broad-exception-caught
    pass


def enable(stats_dir: str) -> None:
  """Turns per-test records on in this process (the pytest process).

  If this process loaded the hook at start-up, it has been counting as a
  plain process: its record so far becomes the first pytest record, so the
  report does not count the pytest process as a started host.
  """
  if _state["role"] != "pytest" and _state["dir"]:
    try:
      os.remove(os.path.join(_state["dir"], _file_name()))
    except OSError:
      pass
  _state.update(dir=stats_dir, role="pytest")
  _tunix_mcjax_jax_watch.after_jax_import(_on_jax_imported)


def _on_jax_imported(import_s) -> None:
  if import_s is not None:
    _state["jax_import_s"] = import_s
  install_listeners()


def start() -> None:
  """sitecustomize's entry point: watch for `import jax`; never raises."""
  try:
    _tunix_mcjax_jax_watch.after_jax_import(_on_jax_imported)
  except Exception:  # pylint: disable=broad-exception-caught
    pass
