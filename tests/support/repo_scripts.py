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

"""A script of scripts/ loaded as a module, for the tests of that script
(scripts/ is not a package)."""

import importlib.util
import pathlib
import types

SCRIPTS = pathlib.Path(__file__).resolve().parents[2] / "scripts"


def load(name: str) -> types.ModuleType:
  """Runs scripts/`name`.py as a fresh module named `name`."""
  spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module
