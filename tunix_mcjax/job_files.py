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

"""What one job owns on disk: its checkpoint directory and its metrics file.

A second job given the same directory would mix its checkpoints with the
first's, and one given the same metrics file would delete the first's
records. `claim` refuses such a job before it touches either: it takes an
advisory lock (`flock`) on each, which the kernel releases however the
owning process ends (a crash leaves nothing to clean up), and it starts the
metrics file afresh only once the file is this job's.

The process that starts the job claims (the example's or the CLI's local
launcher, or the disaggregated driver) and holds the claim until it exits
(hosts it forks close their copies). Not locked: remote paths (`gs://...`; object
stores have no such lock: two jobs given one gs:// directory are not
refused, docs/checkpointing.md#checkpoints-on-gs) and jobs on a detected
cluster, whose hosts start without a launcher.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
import errno
import fcntl
import json
import os
import socket
import time
from typing import IO, Any

# The checkpoint directory's lock: a small file at its top, beside `actor/`
# (Tunix and Orbax read only their own subdirectories).
LOCK_NAME = ".mcjax_job.lock"


class InUseError(ValueError):
  """Another running job holds the checkpoint directory or metrics file."""


@dataclasses.dataclass(eq=False)
class Claim:
  """The locks a job holds until `release` or the process's exit."""

  files: list[IO[Any]]

  def __post_init__(self):
    # Held here, not only by the caller: a dropped Claim would close its
    # files, and with them the locks.
    _HELD.append(self)

  def release(self) -> None:
    for f in self.files:
      f.close()
    self.files = []
    if self in _HELD:
      _HELD.remove(self)


_HELD: list[Claim] = []


def _drop_in_child() -> None:
  # A forked host closes its copies of the lock files: the lock stays with
  # the process that claimed (flock is released when the last copy closes),
  # so it ends with that process, not with the last host to exit.
  for held in _HELD:
    for f in held.files:
      f.close()
  _HELD.clear()


os.register_at_fork(after_in_child=_drop_in_child)


def is_remote(path: str) -> bool:
  """A URI (`gs://...`), which `claim` does not lock."""
  return "://" in path


def _owner(program: str) -> dict[str, Any]:
  return {"program": program, "pid": os.getpid(),
          "host": socket.gethostname(),
          "since": time.strftime("%Y-%m-%d %H:%M:%S")}


def _describe(owner_text: str) -> str:
  try:
    owner = json.loads(owner_text)
    return (f"{owner['program']}, pid {owner['pid']} on {owner['host']},"
            f" since {owner['since']}")
  except (ValueError, KeyError, TypeError):
    return "owner unknown"


def _lock(f: IO[Any]) -> bool:
  try:
    fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    return True
  except OSError as e:
    if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
      return False
    raise


def claim(
    *,
    program: str,
    checkpoint_dir: str | None = None,
    metrics_out: str | None = None,
    flag_names: Sequence[str] = ("--checkpoint_dir", "--metrics_out"),
) -> Claim:
  """Locks the job's checkpoint directory and metrics file, or refuses.

  Args:
    program: Named in the lock, for the message another job gets.
    checkpoint_dir: Created if missing; a lock file is kept at its top.
    metrics_out: Locked, then emptied (one run per file).
    flag_names: How the caller's users name the two paths.

  Raises:
    InUseError: another job holds either; this one touched neither.
    OSError: a path cannot be created or opened.
  """
  dir_flag, metrics_flag = flag_names
  files: list[IO[Any]] = []
  try:
    if checkpoint_dir and not is_remote(checkpoint_dir):
      os.makedirs(checkpoint_dir, exist_ok=True)
      f = open(os.path.join(checkpoint_dir, LOCK_NAME), "a+")
      files.append(f)
      if not _lock(f):
        f.seek(0)
        raise InUseError(
            f"{dir_flag}={checkpoint_dir!r} is in use by another job"
            f" ({_describe(f.read())}); wait for it to end, or pass another"
            f" {dir_flag}.")
      f.seek(0)
      f.truncate()
      f.write(json.dumps(_owner(program)) + "\n")
      f.flush()
    if metrics_out:
      parent = os.path.dirname(os.path.abspath(metrics_out))
      os.makedirs(parent, exist_ok=True)
      # Appending: opening must not empty another job's file.
      f = open(metrics_out, "a")
      files.append(f)
      if not _lock(f):
        raise InUseError(
            f"{metrics_flag}={metrics_out!r} is being written by another"
            f" running job; wait for it to end, or pass another"
            f" {metrics_flag}.")
      f.truncate(0)  # A fresh record of this job.
  except BaseException:
    for f in files:
      f.close()
    raise
  return Claim(files)
