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

"""Where tunix_mcjax comes from in an environment (tests/test_packaging.py).

Run by path with the fresh environment's Python: prints one JSON line with
the file and distribution tunix_mcjax is imported from, its backends, the
source files of its `tunix.rl_cluster_backends` entry points and the
MaxText patches it ships. Imports nothing from the checkout (this folder
holds no tunix_mcjax).
"""

import importlib.metadata as md
import inspect
import json

import tunix_mcjax
from tunix_mcjax.maxtext import patching


def main() -> None:
  eps = md.entry_points(group="tunix.rl_cluster_backends")
  out = {
      "file": tunix_mcjax.__file__,
      "dist": str(md.distribution("tunix_mcjax").locate_file("")),
      "backends": tunix_mcjax.backend_names(),
      "entry_points": {
          ep.name: inspect.getsourcefile(ep.load()) for ep in eps},
      "patches": [str(p) for p in patching.patches()],
  }
  print(json.dumps(out))


if __name__ == "__main__":
  main()
