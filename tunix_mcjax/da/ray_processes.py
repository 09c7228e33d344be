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

"""The processes of a local Ray head, found through /proc, and its temp dirs.

A local head's processes inherit `SESSION_ENV` (naming its temp dir), which
is how `session_pids` finds them, also after the driver that started them
is gone; `sweep_abandoned` removes the temp dirs of drivers that were killed,
ending what is left of their heads first. Linux only (/proc).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

from tunix_mcjax import temp_dirs

# Set in the environment of a local head's processes: its temp dir.
SESSION_ENV = "TUNIX_MCJAX_RAY_SESSION"
# A local head's temp dir: /tmp/mcjray_XXXXXXXX (short: Ray's sockets live
# there, and a Unix socket path has at most 107 bytes).
TEMP_PREFIX = "mcjray_"


def session_pids(temp_dir: str) -> list[int]:
  """Pids of the live processes of the local head whose temp dir is given.

  The processes that inherited the SESSION_ENV variable, and their
  descendants: Ray's Python processes retitle themselves ("ray::Name"), which
  can overwrite what /proc shows of their environment, but they are children
  of the raylet, which keeps it. Re-parented processes (a worker whose raylet
  died) are found when they still show the variable. Linux only (/proc).

  Args:
    temp_dir: RaySession.temp_dir.
  """
  needle = f"{SESSION_ENV}={temp_dir}".encode()
  table = _proc_table()
  found = set()
  for pid in table:
    try:
      with open(f"/proc/{pid}/environ", "rb") as f:
        environ = f.read().split(b"\0")
    except OSError:  # Gone, or not ours to read.
      continue
    if needle in environ:
      found.add(pid)
  children: dict[int, list[int]] = {}
  for pid, (ppid, _) in table.items():
    children.setdefault(ppid, []).append(pid)
  todo = list(found)
  while todo:
    for child in children.get(todo.pop(), ()):
      if child not in found:
        found.add(child)
        todo.append(child)
  found.discard(os.getpid())
  return sorted(found)


def _proc_table() -> dict[int, tuple[int, bytes]]:
  """{pid: (parent pid, state)} of every live, non-zombie process."""
  table = {}
  for entry in os.listdir("/proc"):
    if not entry.isdigit():
      continue
    try:
      with open(f"/proc/{entry}/stat", "rb") as f:
        # The command name, in parentheses, may itself hold ") ".
        fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
      continue
    if fields and fields[0] != b"Z":
      table[int(entry)] = (int(fields[1]), fields[0])
  return table


def describe(pids: list[int]) -> str:
  parts = []
  for pid in pids:
    try:
      with open(f"/proc/{pid}/cmdline", "rb") as f:
        cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
      cmd = "?"
    parts.append(f"{pid} ({cmd[:80]})")
  return ", ".join(parts)


def kill(pids: list[int]) -> None:
  """SIGTERM, then SIGKILL after 2 s, to the given pids."""
  for sig, wait_s in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)):
    for pid in pids:
      with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
      pids = [pid for pid in pids if _alive(pid)]
      if not pids:
        return
      time.sleep(0.05)


def _alive(pid: int) -> bool:
  try:
    with open(f"/proc/{pid}/stat", "rb") as f:
      # A zombie has exited; only its parent's wait() is missing.
      return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
  except (OSError, IndexError):
    return False


def sweep_abandoned() -> list[str]:
  """Removes the temp dirs of local heads whose driver is gone (SIGKILLed,
  or a failed run that kept its logs), killing their leftover processes
  first; returns the directories removed."""
  return temp_dirs.sweep(
      [TEMP_PREFIX], ["/tmp"],
      before_removal=lambda path: kill(session_pids(path)))
