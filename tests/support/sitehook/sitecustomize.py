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

"""Start-up hook of every Python process the tests start (via PYTHONPATH).

Does nothing unless TUNIX_MCJAX_TEST_STATS_DIR or
TUNIX_MCJAX_TEST_SHARE_CPU_CACHE is set (not 0). The first loads
_tunix_mcjax_stats_hook (same folder), which records the process's JAX
compile statistics for scripts/test_timings.py; the second
_tunix_mcjax_cache_hook, which lets every simulated host read and write the
suite's compilation cache. Kept tiny on purpose: every process pays for it,
and most (the launcher) never import jax.
"""

import os
import sys


def _start_stats() -> None:
  try:
    import _tunix_mcjax_stats_hook  # pylint: disable=g-import-not-at-top

    _tunix_mcjax_stats_hook.start()
  except Exception:  # pylint: disable=broad-exception-caught
    pass  # measurement must never fail the process


def _chain_shadowed_sitecustomize() -> None:
  """Runs the sitecustomize this one shadows on sys.path, if there is one.

  Some Pythons (Debian's, coverage set-ups) ship their own; putting this
  folder on PYTHONPATH must not switch it off.
  """
  try:
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    # A stat per entry first: importlib.util only where there is one.
    if not any(os.path.exists(os.path.join(p or os.curdir, name))
               for p in paths
               for name in ("sitecustomize.py", "sitecustomize")):
      return
    from importlib import machinery  # pylint: disable=g-import-not-at-top
    from importlib import util  # pylint: disable=g-import-not-at-top

    spec = machinery.PathFinder.find_spec("sitecustomize", paths)
    if spec is None or spec.loader is None:
      return
    spec.loader.exec_module(util.module_from_spec(spec))
  except Exception:  # pylint: disable=broad-exception-caught
    pass


def _start_cache_sharing() -> None:
  try:
    import _tunix_mcjax_cache_hook  # pylint: disable=g-import-not-at-top

    _tunix_mcjax_cache_hook.start()
  except Exception:  # pylint: disable=broad-exception-caught
    pass  # the cache is an optimization: never fail the process


if os.environ.get("TUNIX_MCJAX_TEST_STATS_DIR"):
  _start_stats()
if os.environ.get("TUNIX_MCJAX_TEST_SHARE_CPU_CACHE", "0") != "0":
  _start_cache_sharing()
_chain_shadowed_sitecustomize()
