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

"""Imports modules together in one fresh interpreter and prints OK
(tests/test_environment.py; run by path):

  imports_together.py MODULE...

For packages whose pinned versions must work side by side (MaxText's Tunix
adapter with Tunix's GRPO learner); an import error fails the process.
"""

import importlib
import sys


def main(argv: list[str]) -> None:
  for name in argv[1:]:
    importlib.import_module(name)
  print("OK")


if __name__ == "__main__":
  main(sys.argv)
