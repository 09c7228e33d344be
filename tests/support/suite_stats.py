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

"""Compile statistics per test, for scripts/test_timings.py (conftest's side).

    suite_stats.enable_from_env()          # at conftest import
    suite_stats.set_current_test(nodeid)   # around each test's protocol
    suite_stats.set_current_test(None)

`enable` points TUNIX_MCJAX_TEST_STATS_DIR at the stats dir and puts
tests/support/sitehook on PYTHONPATH, so that every Python process a test
starts records its compiles there (sitehook/sitecustomize.py, which loads
sitehook/_tunix_mcjax_stats_hook.py), and records the
pytest process's own compiles per test, as `<pid>-pytest-<n>.json` (role
"pytest"; one file per test that compiled anything). `set_current_test` sets
TUNIX_MCJAX_TEST_ID, which those processes inherit and write into their
records. The counting code is the sitehook's, loaded from its file: one copy.

Start each run with an empty stats dir: records of earlier runs would be
counted again.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import sys
import types

SITEHOOK_DIR = pathlib.Path(__file__).resolve().parent / "sitehook"
STATS_DIR_ENV = "TUNIX_MCJAX_TEST_STATS_DIR"
TEST_ID_ENV = "TUNIX_MCJAX_TEST_ID"
SHARE_CPU_CACHE_ENV = "TUNIX_MCJAX_TEST_SHARE_CPU_CACHE"
_MODULE_NAME = "_tunix_mcjax_stats_hook"
_CACHE_MODULE_NAME = "_tunix_mcjax_cache_hook"

_hook: types.ModuleType | None = None


def _load_hook(name: str = _MODULE_NAME) -> types.ModuleType:
  """A sitehook module: the one loaded at start-up, else from its file.

  One copy per process, whichever way it came: two would count twice.
  """
  if name in sys.modules:
    return sys.modules[name]
  if str(SITEHOOK_DIR) not in sys.path:
    sys.path.append(str(SITEHOOK_DIR))  # the hooks import each other
  spec = importlib.util.spec_from_file_location(
      name, SITEHOOK_DIR / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  sys.modules[name] = module
  try:
    spec.loader.exec_module(module)
  except BaseException:
    del sys.modules[name]
    raise
  return module


def share_cpu_cache() -> None:
  """Every simulated host of every process the tests start reads and writes
  the suite's compilation cache, and so does this one
  (sitehook/_tunix_mcjax_cache_hook.py). TUNIX_MCJAX_TEST_SHARE_CPU_CACHE=0
  leaves JAX's own rule (host 0 only)."""
  if os.environ.get(SHARE_CPU_CACHE_ENV) == "0":
    os.environ.pop(SHARE_CPU_CACHE_ENV)
    return
  os.environ[SHARE_CPU_CACHE_ENV] = "1"
  _put_sitehook_on_pythonpath()
  try:
    _load_hook(_CACHE_MODULE_NAME).start()
  except Exception as e:  # pylint: disable=broad-exception-caught
    print(f"tests/support/suite_stats.py: warning: the pytest process does"
          f" not share its compilation cache entries: {e!r}", file=sys.stderr)


def _put_sitehook_on_pythonpath() -> None:
  parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
  if str(SITEHOOK_DIR) not in parts:
    os.environ["PYTHONPATH"] = os.pathsep.join([str(SITEHOOK_DIR), *parts])


def enable(stats_dir: pathlib.Path) -> None:
  """Records compile statistics of this run (this process and its children)."""
  global _hook
  stats_dir = pathlib.Path(stats_dir).resolve()
  stats_dir.mkdir(parents=True, exist_ok=True)
  os.environ[STATS_DIR_ENV] = str(stats_dir)
  _put_sitehook_on_pythonpath()
  try:
    hook = _load_hook()
    hook.enable(str(stats_dir))
    _hook = hook
  except Exception as e:  # pylint: disable=broad-exception-caught
    # Measurement must not fail the suite; the children still record.
    print(f"tests/support/suite_stats.py: warning: not recording the pytest"
          f" process's compiles: {e!r}", file=sys.stderr)


def enable_from_env() -> bool:
  """`enable` if TUNIX_MCJAX_TEST_STATS_DIR is set; returns whether it is."""
  stats_dir = os.environ.get(STATS_DIR_ENV)
  if not stats_dir:
    return False
  enable(pathlib.Path(stats_dir))
  return True


def enabled() -> bool:
  return _hook is not None


def set_current_test(nodeid: str | None) -> None:
  """Attributes what follows to test `nodeid` (None: between tests).

  A no-op unless `enable` ran.
  """
  if _hook is None:
    return
  if nodeid is None:
    os.environ.pop(TEST_ID_ENV, None)
  else:
    os.environ[TEST_ID_ENV] = nodeid
  _hook.begin_test(nodeid)
