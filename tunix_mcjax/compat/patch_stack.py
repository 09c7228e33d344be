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

"""Nested installs of one replacement of upstream names, undone in any order.

A job (or a test) installs a replacement for as long as it runs and undoes
it at the end; installs nest: the latest live one is in place, and undoing
the last restores upstream's names (`compat.packing`,
`compat.chunked_logps`).
"""

from __future__ import annotations

from collections.abc import Callable
import threading
from typing import Any


class PatchHandle:
  """Undoes one `PatchStack.push` (idempotent)."""

  def __init__(self, stack: PatchStack, value: Any):
    self._stack = stack
    self.value = value
    self._active = True

  @property
  def active(self) -> bool:
    return self._active

  def undo(self) -> None:
    """Drops this holder; the last one restores upstream's names."""
    self._stack._pop(self)  # pylint: disable=protected-access


class PatchStack:
  """The live installs of one replacement, oldest first.

  `apply(value, first)` puts `value` in place (`first`: nothing of this
  stack was in place before); `restore()` puts upstream's names back.
  """

  def __init__(self, *, apply: Callable[[Any, bool], None],
               restore: Callable[[], None]):
    self._apply = apply
    self._restore = restore
    self._lock = threading.Lock()
    self._handles: list[PatchHandle] = []

  def push(self, value: Any) -> PatchHandle:
    with self._lock:
      self._apply(value, not self._handles)
      self._handles.append(PatchHandle(self, value))
      return self._handles[-1]

  def _pop(self, handle: PatchHandle) -> None:
    with self._lock:
      if not handle.active:
        return
      handle._active = False  # pylint: disable=protected-access
      self._handles.remove(handle)
      if self._handles:
        self._apply(self._handles[-1].value, False)
      else:
        self._restore()
