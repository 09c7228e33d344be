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

"""Runs the sitehooks' callbacks once a process has imported jax.

Most processes the tests start (launchers, Ray's own) never import jax, and
the hooks must not make them: a sys.meta_path finder that finds nothing
notices `import jax` and, once jax's code has run, calls each callback with
the import's seconds. Callbacks must not raise; their errors are swallowed.
"""

import sys
import time

_callbacks = []


def after_jax_import(callback) -> None:
  """Calls `callback(import_seconds)` once jax is imported (now if it is;
  then with None)."""
  if "jax" in sys.modules:
    _call(callback, None)
    return
  _callbacks.append(callback)
  if not any(isinstance(f, _JaxImportWatcher) for f in sys.meta_path):
    sys.meta_path.insert(0, _JaxImportWatcher())


def _call(callback, seconds) -> None:
  try:
    callback(seconds)
  except Exception:  # pylint: disable=broad-exception-caught
    pass


class _HookedLoader:
  """jax's own loader; runs the callbacks once jax has executed."""

  def __init__(self, spec, loader):
    self._spec = spec
    self._loader = loader

  def create_module(self, spec):
    return self._loader.create_module(spec)

  def exec_module(self, module) -> None:
    # Back to jax's real loader before its code runs: nothing should see us.
    self._spec.loader = self._loader
    try:
      module.__loader__ = self._loader
    except Exception:  # pylint: disable=broad-exception-caught
      pass
    start = time.perf_counter()
    self._loader.exec_module(module)
    seconds = time.perf_counter() - start
    _JaxImportWatcher.stop()
    while _callbacks:
      _call(_callbacks.pop(0), seconds)

  def __getattr__(self, name):
    return getattr(self._loader, name)


class _JaxImportWatcher:
  """A sys.meta_path finder that finds nothing but notices `import jax`."""

  _busy = False

  def find_spec(self, fullname, path=None, target=None):
    if fullname != "jax" or _JaxImportWatcher._busy:
      return None
    try:
      _JaxImportWatcher._busy = True
      for finder in list(sys.meta_path):
        find = getattr(finder, "find_spec", None)
        if finder is self or find is None:
          continue
        spec = find(fullname, path, target)
        if spec is not None:
          break
      else:
        return None
      if spec.loader is None or not hasattr(spec.loader, "exec_module"):
        return spec
      spec.loader = _HookedLoader(spec, spec.loader)
      return spec
    except Exception:  # pylint: disable=broad-exception-caught
      return None  # the import goes on through the other finders
    finally:
      _JaxImportWatcher._busy = False

  @staticmethod
  def stop() -> None:
    # After jax's import, not during a finder loop over sys.meta_path.
    sys.meta_path[:] = [f for f in sys.meta_path
                        if not isinstance(f, _JaxImportWatcher)]
