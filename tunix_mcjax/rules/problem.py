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

"""`Problem`: one thing mcjax cannot run, as every support rule reports it."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, kw_only=True)
class Problem:
  """One thing mcjax cannot run.

  Attributes:
    message: What is wrong and how to fix it.
    error: The exception type the cluster raises for it.
  """

  message: str
  error: type[Exception] = ValueError

  def __post_init__(self):
    if not self.message:
      raise ValueError("A Problem needs a message.")
    if not (isinstance(self.error, type) and issubclass(self.error, Exception)):
      raise TypeError(f"error must be an exception type, got {self.error!r}")

  def raise_(self) -> None:
    raise self.error(self.message)


def raise_first(*problems: Problem | None) -> None:
  """Raises the first of `problems` that is not None (the cluster's view)."""
  for problem in problems:
    if problem is not None:
      problem.raise_()
