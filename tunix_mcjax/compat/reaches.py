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

"""Where the package reaches private upstream names (compat's rule, checked).

Only `tunix_mcjax.compat` may reach a private upstream name. `private_reaches`
reads the rest of the package's source (AST; nothing is imported) and lists
every reach: imports of private upstream modules (`jax._src`,
`ray._private`, ...) or of underscore names from upstream modules, such
module paths as whole strings, and the restricted names (`INTERNAL_NAMES`
and the private names of every `touch_points` row) as attributes, keyword
arguments or getattr strings. tests/test_compat.py keeps the package clean
with it.
"""

from __future__ import annotations

import ast
import pathlib
import re

from tunix_mcjax.compat import touch_points

# Packages whose private parts (a dotted name with a part that starts with
# "_") only `tunix_mcjax.compat` may import or name in a string.
UPSTREAM_PACKAGES = frozenset({
    "flax", "jax", "jaxlib", "maxtext", "MaxText", "qwix", "ray", "torch",
    "tpu_inference", "transformers", "tunix", "vllm",
})

# Upstream internals without a leading underscore, reached only in compat;
# each is named by a `touch_points` row (tests/test_compat.py checks). Names
# that only a private module holds (jax._src's) need no entry: importing
# that module is already a reach.
INTERNAL_NAMES = frozenset({
    "ENABLE_RAY_CLUSTER", "cpu_attn", "current_platform", "driver_worker",
    "get_supported_head_sizes", "llm_engine", "model_executor",
    "process_weights_after_loading", "quant_method", "ray_constants",
    "reload_weights",
})


def _private_part(part: str) -> bool:
  return part.startswith("_") and not (
      part.startswith("__") and part.endswith("__"))


def is_private_upstream(dotted: str) -> bool:
  """Whether `dotted` (e.g. "jax._src.clusters") is a private upstream path."""
  parts = dotted.split(".")
  return parts[0] in UPSTREAM_PACKAGES and any(
      _private_part(p) for p in parts[1:])


_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")


def restricted_names() -> frozenset[str]:
  """INTERNAL_NAMES and the private names of every row."""
  names = set(INTERNAL_NAMES)
  for row in touch_points.TOUCH_POINTS:
    names |= touch_points.private_names(row)
  return frozenset(names)


def _on_self(node: ast.AST) -> bool:
  """`self`, `cls` or `super()`: a subclass's own (overriding) members."""
  if isinstance(node, ast.Name):
    return node.id in ("self", "cls")
  return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
          and node.func.id == "super")


def _reaches(tree: ast.AST, names: frozenset[str]) -> list[tuple[int, str]]:
  """(line, what) for each reach of a private upstream name in `tree`."""
  found = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      found += [(node.lineno, f"import {a.name}") for a in node.names
                if is_private_upstream(a.name)]
    elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
      upstream = node.module.split(".")[0] in UPSTREAM_PACKAGES
      for a in node.names:
        if (upstream and (is_private_upstream(node.module)
                          or _private_part(a.name))) or a.name in names:
          found.append((node.lineno, f"from {node.module} import {a.name}"))
    elif isinstance(node, ast.Attribute):
      if node.attr in names and not _on_self(node.value):
        found.append((node.lineno, f".{node.attr}"))
    elif isinstance(node, ast.keyword):
      if node.arg in names:
        found.append((node.value.lineno, f"{node.arg}="))
    elif isinstance(node, ast.Call):
      func = node.func
      if (isinstance(func, ast.Name)
          and func.id in ("getattr", "setattr", "hasattr", "delattr")
          and len(node.args) >= 2 and not _on_self(node.args[0])
          and isinstance(node.args[1], ast.Constant)
          and node.args[1].value in names):
        found.append((node.lineno, f"{func.id}(..., {node.args[1].value!r})"))
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
      if _DOTTED.fullmatch(node.value) and is_private_upstream(node.value):
        found.append((node.lineno, repr(node.value)))
  return sorted(found)


def private_reaches(package_dir: str | pathlib.Path,
                    names: frozenset[str] | None = None) -> list[str]:
  """Where the package's source outside compat/ reaches private upstream names.

  Reads the source (AST), imports nothing. Counted: imports of private
  upstream modules (`jax._src`, `ray._private`, ...) or of upstream names
  with a leading underscore, such paths as whole strings (importlib or
  logger names), and `names` (default `restricted_names()`) as attributes
  (not on `self`, `cls` or `super()`, where a subclass overrides them),
  keyword arguments, imported names or getattr-family strings.

  Args:
    package_dir: the package directory (its `compat/` is exempt).
    names: the restricted attribute names.

  Returns:
    "path:line: what" for each reach, sorted; empty when the rule holds.
  """
  root = pathlib.Path(package_dir).resolve()
  names = restricted_names() if names is None else names
  out = []
  for path in sorted(root.rglob("*.py")):
    rel = path.relative_to(root)
    if rel.parts[0] == "compat" or "__pycache__" in rel.parts:
      continue
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out += [f"{root.name}/{rel.as_posix()}:{line}: {what}"
            for line, what in _reaches(tree, names)]
  return out
