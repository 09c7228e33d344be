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

"""Imports modules and fails if that imported any of the named packages
(tests/test_compat.py, tests/test_launch.py, tests/test_rules.py,
tests/test_platforms.py, tests/test_advisor.py, tests/test_test_timings.py;
run by path):

  light_imports.py HEAVY [MODULE...]

HEAVY is a comma-separated list of top-level packages (jax,tunix,...) that
importing every MODULE must leave unimported; a fresh interpreter, so that
nothing the test process imported counts. Prints the sorted list of the
HEAVY packages' modules that are loaded (`[]` when none), then exits with a
message naming the packages if there are any.
"""

import importlib
import sys


def main(argv: list[str]) -> None:
  heavy = set(argv[1].split(","))
  for name in argv[2:]:
    importlib.import_module(name)
  modules = sorted(m for m in sys.modules if m.split(".")[0] in heavy)
  print(modules, flush=True)
  loaded = sorted({m.split(".")[0] for m in modules})
  if loaded:
    sys.exit(f"importing {argv[2:]} imported {loaded}")


if __name__ == "__main__":
  main(sys.argv)
