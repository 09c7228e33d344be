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

"""Temporary directories that do not outlive their job.

The package's temporary directories (a local Ray head's, the vLLM and
tpu-inference engines' model configs) are removed by the process that made
them on every exit it runs code on. A process that is SIGKILLed runs none,
so each directory carries an owner file naming the process that made it (pid
and start time, so a reused pid is not taken for it), and whenever the
package makes a new one it first removes those of owners that are gone
(`sweep`). A directory without an owner file is never touched: nothing
proves it is ours and abandoned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
import contextlib
import json
import os
import pathlib
import shutil
import socket
import tempfile

# The owner file inside each directory.
OWNER_FILE = ".tunix_mcjax_owner"
# The prefixes of the package's temporary directories (in /tmp and the
# platform's temporary directory).
PREFIXES = ("mcjray_", "tunix_mcjax_vllm_", "tunix_mcjax_tpu_")


def _start_time(pid: int) -> str | None:
  """The process's start time in clock ticks since boot (/proc), or None if
  there is no such process."""
  try:
    stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
  except OSError:
    return None
  # The command name (field 2) may hold spaces: fields after its ')'.
  return stat.rpartition(")")[2].split()[19]


def mark(path: str | os.PathLike[str], pid: int | None = None) -> None:
  """Writes `path`'s owner file: this process (or `pid`) owns it."""
  pid = os.getpid() if pid is None else pid
  owner = {"pid": pid, "start": _start_time(pid), "host": socket.gethostname()}
  (pathlib.Path(path) / OWNER_FILE).write_text(json.dumps(owner))


def make(prefix: str, *, parent: str | None = None) -> str:
  """A new directory `<parent>/<prefix>XXXXXXXX`, owned by this process,
  after sweeping the abandoned ones of that prefix."""
  sweep([prefix], parents=[parent] if parent else None)
  path = tempfile.mkdtemp(prefix=prefix, dir=parent)
  mark(path)
  return path


def abandoned(path: str | os.PathLike[str]) -> bool:
  """Whether `path` is one of ours whose owner process is gone."""
  try:
    owner = json.loads((pathlib.Path(path) / OWNER_FILE).read_text())
    pid, start, host = owner["pid"], owner["start"], owner["host"]
  except (OSError, ValueError, KeyError, TypeError):
    return False  # No (readable) owner file: not provably ours.
  if host != socket.gethostname():
    return False  # A shared /tmp: the owner's machine would know.
  now = _start_time(int(pid))
  return now is None or (start is not None and now != start)


def sweep(prefixes: Sequence[str] = PREFIXES,
          parents: Sequence[str] | None = None, *,
          before_removal: Callable[[str], None] | None = None) -> list[str]:
  """Removes the abandoned directories with one of `prefixes` directly in
  `parents` (default: /tmp and the platform's temporary directory);
  returns what it removed.

  Args:
    prefixes: the directories' name prefixes.
    parents: where to look.
    before_removal: called with each abandoned directory before it is
      removed (e.g. to end processes the dead owner left running there).
  """
  parents = parents or sorted({"/tmp", tempfile.gettempdir()})
  removed = []
  for parent in parents:
    try:
      entries = list(os.scandir(parent))
    except OSError:
      continue
    for entry in entries:
      if (entry.name.startswith(tuple(prefixes))
          and entry.is_dir(follow_symlinks=False)
          and abandoned(entry.path)):
        if before_removal is not None:
          before_removal(entry.path)
        shutil.rmtree(entry.path, ignore_errors=True)
        if not os.path.exists(entry.path):
          removed.append(entry.path)
  return removed


def temporary(prefix: str, *,
              before_removal: Callable[[str], None] | None = None
              ) -> tempfile.TemporaryDirectory:
  """`tempfile.TemporaryDirectory(prefix=...)` (removed when closed or
  collected), owned by this process, after sweeping the abandoned ones of
  that prefix (`before_removal`: as in `sweep`)."""
  sweep([prefix], before_removal=before_removal)
  directory = tempfile.TemporaryDirectory(prefix=prefix)
  mark(directory.name)
  return directory


@contextlib.contextmanager
def as_tempdir(path: str | os.PathLike[str]) -> Iterator[None]:
  """Makes `path` this process's temp dir (`tempfile.gettempdir()`) inside
  the block: what a library leaves there (vLLM's rendezvous file) then goes
  with `path`. Not for blocks other threads make temp files during."""
  saved = tempfile.tempdir
  tempfile.tempdir = os.fspath(path)
  try:
    yield
  finally:
    tempfile.tempdir = saved
