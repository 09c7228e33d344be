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

"""JAX's persistent compilation cache, turned on for a job and its hosts.

A restarted job (or the next job of the same shapes) loads its programs from
the cache instead of compiling them again. `configure` sets JAX's options in
this process and the matching environment variables, so the hosts this
process starts (the local launcher, Ray actors) use the same directory. An
unusable directory is a warning naming it, never a failure: the job compiles
as it would without a cache. Which programs do not cache: docs/testing.md.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
import os
import sys
import tempfile
import warnings

# JAX reads each of its options from the upper-cased environment variable of
# the same name when it is imported, so these reach every process started
# with this environment.
ENV_DIR = "JAX_COMPILATION_CACHE_DIR"
ENV_MIN_COMPILE_S = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"
ENV_MIN_ENTRY_BYTES = "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"
ENV_VARS = (ENV_DIR, ENV_MIN_COMPILE_S, ENV_MIN_ENTRY_BYTES)

# Every program is cached, not only those over JAX's 1 s default: an RL step
# is many small programs (sampling, log-probs, update, publication) whose
# compiles add up, and their entries are small.
_MIN_COMPILE_S = "0"
_MIN_ENTRY_BYTES = "0"


FLAG_HELP = (
    "JAX's persistent compilation cache directory (local path or gs://...),"
    " shared by every host: a restarted or repeated job loads its compiled"
    " programs instead of compiling them again. Off unless set; an unusable"
    " directory is a warning and the job compiles as usual."
)


def problem(cache_dir: str) -> str | None:
  """Why `cache_dir` cannot hold the cache, or None if it can.

  Local directories are created and written to once; remote URIs (gs://...)
  are left to JAX, which reports its own errors as warnings.
  """
  if "://" in cache_dir:
    return None
  try:
    os.makedirs(cache_dir, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=cache_dir, prefix=".probe-"):
      pass
  except OSError as e:
    return e.strerror or type(e).__name__
  return None


def environment(cache_dir: str) -> dict[str, str]:
  """The variables that turn the cache on in processes started with them."""
  return {
      ENV_DIR: cache_dir,
      ENV_MIN_COMPILE_S: _MIN_COMPILE_S,
      ENV_MIN_ENTRY_BYTES: _MIN_ENTRY_BYTES,
  }


def inherited(environ: Mapping[str, str] | None = None) -> dict[str, str]:
  """The cache variables set in `environ` (default: this process's), for
  processes started with an environment of their own (Ray actors)."""
  environ = os.environ if environ is None else environ
  return {name: environ[name] for name in ENV_VARS if name in environ}


def configure(cache_dir: str | None, *,
              environ: MutableMapping[str, str] | None = None,
              program: str = "tunix_mcjax") -> bool:
  """Turns the cache on in `cache_dir` for this process and its children.

  Args:
    cache_dir: The cache directory (local path or URI); None or "" leaves
      the cache off.
    environ: Where to export the variables (default: os.environ).
    program: Prefix of the warning line.

  Returns:
    True if the cache is on; False if it is off or `cache_dir` is unusable
    (then a warning naming the directory went to stderr).
  """
  if not cache_dir:
    return False
  environ = os.environ if environ is None else environ
  why = problem(cache_dir)
  if why is not None:
    print(f"{program}: warning: compilation cache directory {cache_dir} is"
          f" not usable ({why}); compiling without a cache.",
          file=sys.stderr, flush=True)
    return False
  environ.update(environment(cache_dir))
  _name_directory_in_jax_warnings(cache_dir)
  import jax  # pylint: disable=g-import-not-at-top

  jax.config.update("jax_compilation_cache_dir", cache_dir)
  jax.config.update("jax_persistent_cache_min_compile_time_secs",
                    float(_MIN_COMPILE_S))
  jax.config.update("jax_persistent_cache_min_entry_size_bytes",
                    int(_MIN_ENTRY_BYTES))
  return True


# JAX's own warnings for an entry it cannot read or write (a corrupted or
# truncated file, a full disk) name the program but not the directory.
_JAX_CACHE_WARNINGS = ("Error reading persistent compilation cache entry",
                       "Error writing persistent compilation cache entry")


def _name_directory_in_jax_warnings(cache_dir: str) -> None:
  """Adds the cache directory to JAX's cache warnings (once per process)."""
  show = warnings.showwarning
  if getattr(show, "_names_cache_dir", False):
    return

  def showwarning(message, category, filename, lineno, file=None, line=None):
    if str(message).startswith(_JAX_CACHE_WARNINGS):
      message = (f"{message} (compilation cache directory {cache_dir}; the"
                 " program was compiled instead; delete the directory if"
                 " this repeats)")
    show(message, category, filename, lineno, file, line)

  showwarning._names_cache_dir = True  # pylint: disable=protected-access
  warnings.showwarning = showwarning
