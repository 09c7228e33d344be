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

"""Whole example runs shared by the whole test session, keyed by their flags.

A multi-host run of examples/grpo_qwen3.py costs tens of seconds here; any
test that needs the same job gets the same run (its directory of dumps),
whichever module asks first. Two flag lists that name the same job (the
same flags in another order, or a flag given twice, where the last value
counts as in absl) are one run. Tests read a run's files and must not write
into it. The registry is the session fixture `shared_runs`
(tests/conftest.py).
"""

from __future__ import annotations

import os
import pathlib
from typing import Callable, Sequence

import pytest

import example_runs

# Flags each run gets from run_example itself (its own directory).
_PER_RUN = ("--dump_dir", "--metrics_out", "--timeout")


def job_key(flags: Sequence[str]) -> tuple[str, ...]:
  """The job `flags` name: each flag's last value, in a fixed order."""
  last: dict[str, str] = {}
  for flag in flags:
    if not flag.startswith("--"):
      raise ValueError(f"not a --flag: {flag!r} (write --name=value)")
    name = flag.partition("=")[0]
    if name in _PER_RUN:
      raise ValueError(f"{name} is set per run by the registry")
    last[name] = flag
  return tuple(sorted(last.values()))


class SharedRuns:
  """Runs the example once per distinct job; later asks get the same run."""

  def __init__(self, root: pathlib.Path,
               runner: Callable[..., pathlib.Path] | None = None):
    self._root = root
    self._runner = runner or example_runs.run_example
    self._runs: dict[tuple[str, ...], pathlib.Path] = {}
    self._failed: dict[tuple[str, ...], str] = {}

  @property
  def started(self) -> int:
    """Runs this registry launched (every other ask was reused)."""
    return len(self._runs) + len(self._failed)

  def example(self, *flags: str) -> pathlib.Path:
    """The directory of the run of `flags` (run now if this is the first
    ask for that job); fails the test if the run fails."""
    key = job_key(flags)
    if key in self._failed:
      # Not run again: the first test that asked carries its output.
      pytest.fail(f"this shared run failed earlier ({self._failed[key]}): "
                  + " ".join(key), pytrace=False)
    if key not in self._runs:
      out = self._root / f"run{self.started}"
      try:
        self._runner(out, *key)
      except BaseException:
        self._failed[key] = f"{out}, run for {self._asker()}"
        raise
      (out / "flags.txt").write_text("\n".join(key) + "\n")
      self._runs[key] = out
    return self._runs[key]

  @staticmethod
  def _asker() -> str:
    return os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]
