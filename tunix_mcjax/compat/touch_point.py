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

"""One row of `touch_points.TOUCH_POINTS`, and the checks of a row.

Apart from the table so that the table has room to grow (the package's
600-line limit); `touch_points` re-exports every name here.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from typing import Any

KINDS = ("attr", "source", "literal")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TouchPoint:
  """One upstream name we rely on.

  Attributes:
    module: import path of the upstream module.
    attr: dotted attribute path inside `module` ("" for the module itself).
    kind: one of KINDS.
    needle: the text that must occur, for kinds "source" and "literal".
    wrapper: the `tunix_mcjax.compat` module that wraps this name.
    why: what we use it for, and the public hook that would replace it.
    optional_dependency: a package that may be absent here (e.g.
      "tpu_inference"); the row is then skipped, not failed.
  """

  module: str
  attr: str
  kind: str = "attr"
  needle: str = ""
  wrapper: str
  why: str
  optional_dependency: str | None = None

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
    if self.kind != "attr" and not self.needle:
      raise ValueError(f"kind {self.kind!r} needs a needle ({self.attr}).")


_PRIVATE = re.compile(r"(?<![A-Za-z0-9_])_[A-Za-z][A-Za-z0-9_]*")


def private_names(row: TouchPoint) -> set[str]:
  """The private identifiers a row names (in `attr` or `needle`)."""
  names = set(_PRIVATE.findall(row.attr)) | set(_PRIVATE.findall(row.needle))
  return {n for n in names if not n.endswith("__")}


def resolve(row: TouchPoint) -> Any:
  """Imports `row.module` and returns `module.attr` (AttributeError if not)."""
  obj = importlib.import_module(row.module)
  for part in row.attr.split(".") if row.attr else ():
    obj = getattr(obj, part)
  return obj


def problem(row: TouchPoint) -> str | None:
  """Why `row` does not hold for the installed packages; None if it does.

  Raises:
    ImportError: when `row.module` cannot be imported.
  """
  where = f"{row.module}.{row.attr}" if row.attr else row.module
  try:
    obj = resolve(row)
  except AttributeError as e:
    return f"{where} does not resolve ({e})."
  if row.kind == "attr":
    return None
  target = obj if row.kind == "source" else importlib.import_module(
      row.module
  )
  try:
    source = inspect.getsource(target)
  except (OSError, TypeError) as e:
    return f"the source of {where} cannot be read ({e})."
  if row.needle not in source:
    scope = where if row.kind == "source" else row.module
    return f"{row.needle!r} no longer occurs in {scope}."
  return None
