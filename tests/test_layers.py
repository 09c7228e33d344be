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

"""Imports go only down the tiers, with no circle (tunix_mcjax.layers)."""

import pathlib
import textwrap

import tunix_mcjax
from tunix_mcjax import layers

PACKAGE = pathlib.Path(tunix_mcjax.__file__).parent

# A small tree of its own: pkg.core, pkg.mode, pkg.entry.
_TIERS = (("core", ()), ("modes", ("pkg.mode",)), ("entry", ("pkg.entry",)))


def _tree(tmp_path, files):
  root = tmp_path / "pkg"
  for name, text in {"__init__.py": "", **files}.items():
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
  return root


def test_the_package_imports_only_downward_without_circles():
  found = layers.check(PACKAGE)
  assert not found, "\n".join(v.describe() for v in found)


def test_tiers_are_assigned_by_package():
  assert layers.tier_of("tunix_mcjax.cluster") == 0
  assert layers.tier_of("tunix_mcjax.da.launcher") == 1
  assert layers.tier_of("tunix_mcjax") == 1  # create_rl_cluster: every backend
  assert layers.tier_of("tunix_mcjax.cli.grpo_main") == 2
  assert layers.tier_of("tunix_mcjax.bench.harness") == 3


def test_an_upward_import_is_named_even_inside_a_function(tmp_path):
  root = _tree(tmp_path, {
      "core.py": """
          def f():
            from pkg.mode import runner  # deferred, still an edge
          """,
      "mode/__init__.py": "",
      "mode/runner.py": "from pkg import core\n",
  })
  found = layers.check(root, _TIERS)
  assert [v.describe(_TIERS) for v in found if v.kind == "upward"] == [
      "pkg.core (core) imports pkg.mode.runner (modes): a tier may import"
      " only its own and the ones below"]


def test_a_circle_is_named_with_its_path(tmp_path):
  root = _tree(tmp_path, {
      "entry/__init__.py": "",
      "entry/a.py": "from . import b\n",
      "entry/b.py": "import pkg.entry.c\n",
      "entry/c.py": "from pkg.entry import a\n",
      "entry/d.py": "from pkg import core\n",  # downward: fine
      "core.py": "",
  })
  found = layers.check(root, _TIERS)
  assert [v.describe(_TIERS) for v in found] == [
      "import circle: pkg.entry.a -> pkg.entry.b -> pkg.entry.c ->"
      " pkg.entry.a"]


def test_a_clean_tree_has_nothing_to_report(tmp_path):
  root = _tree(tmp_path, {
      "core.py": "import os\n",
      "mode/__init__.py": "from pkg import core\n",
      "entry/__init__.py": "from pkg import mode, core\n",
  })
  assert layers.check(root, _TIERS) == []


# A module that outgrows this does more than one job: split it.
_MAX_MODULE_LINES = 600


def test_no_module_is_over_600_lines():
  root = pathlib.Path(tunix_mcjax.__file__).parent
  sizes = {str(p.relative_to(root)): len(p.read_text().splitlines())
           for p in root.rglob("*.py")}
  assert sizes  # The walk found the package.
  long = {name: n for name, n in sizes.items() if n > _MAX_MODULE_LINES}
  assert not long, f"split these modules, one job each: {long}"
