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

"""The package's tiers, declared once, and the check that imports go down.

    core          runtime, launch, admission, engines, cluster, publication,
                  telemetry, checkpointing, packing, rules, compat, ...
      ^
    modes         da/ (the disaggregated mode), backends (every backend by
                  name), the package's create_rl_cluster
      ^
    entry points  recipes/ (the example's job), cli/ (Tunix's command line)
      ^
    tools         bench/, advisor/

A module may import its own tier and the tiers below, never above, and no
two modules may import each other through any chain (a circle). `check`
reads the imports from the source (every `import`, also inside functions,
where this package defers heavy ones), so it runs without importing
anything; tests/test_layers.py keeps the package clean with it.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
import dataclasses
import pathlib

# Lowest first. A module belongs to the first tier one of whose names is
# the module or a package above it; every other module is core.
TIERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core", ()),
    ("modes", ("tunix_mcjax", "tunix_mcjax.backends", "tunix_mcjax.da")),
    ("entry points", ("tunix_mcjax.recipes", "tunix_mcjax.cli")),
    ("tools", ("tunix_mcjax.bench", "tunix_mcjax.advisor")),
)


def tier_of(module: str,
            tiers: Sequence[tuple[str, tuple[str, ...]]] = TIERS) -> int:
  """The index in `tiers` of `module` (a dotted name)."""
  for index in range(len(tiers) - 1, 0, -1):
    for name in tiers[index][1]:
      # The package root names only itself (its __init__), not everything.
      if module == name or ("." in name and module.startswith(name + ".")):
        return index
  return 0


def _module_name(path: pathlib.Path, root: pathlib.Path) -> str:
  parts = list(path.relative_to(root.parent).with_suffix("").parts)
  if parts[-1] == "__init__":
    parts.pop()
  return ".".join(parts)


def import_graph(package_dir: str | pathlib.Path) -> dict[str, set[str]]:
  """Module -> the package's modules it imports (from the source)."""
  root = pathlib.Path(package_dir).resolve()
  files = {_module_name(p, root): p for p in root.rglob("*.py")
           if "__pycache__" not in p.parts}

  def resolve(name: str) -> str | None:
    while name and name not in files:
      name = name.rpartition(".")[0]
    return name or None

  graph: dict[str, set[str]] = {}
  for module, path in files.items():
    package = module if path.name == "__init__.py" else module.rpartition(
        ".")[0]
    targets = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
      if isinstance(node, ast.Import):
        targets += [alias.name for alias in node.names]
      elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
          anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
          base = ".".join([*anchor, *([node.module] if node.module else [])])
        # `from pkg import sub` imports the submodule, not only pkg.
        targets += [f"{base}.{a.name}" if f"{base}.{a.name}" in files
                    else base for a in node.names]
    edges = {resolve(t) for t in targets}
    graph[module] = {t for t in edges if t and t != module}
  return graph


@dataclasses.dataclass(frozen=True)
class Violation:
  """An import that goes up a tier, or a circle of imports."""

  kind: str  # "upward" or "circle"
  modules: tuple[str, ...]

  def describe(self,
               tiers: Sequence[tuple[str, tuple[str, ...]]] = TIERS) -> str:
    if self.kind == "upward":
      a, b = self.modules
      return (f"{a} ({tiers[tier_of(a, tiers)][0]}) imports {b}"
              f" ({tiers[tier_of(b, tiers)][0]}): a tier may import only its"
              " own and the ones below")
    return "import circle: " + " -> ".join(self.modules)


def _circles(graph: Mapping[str, set[str]]) -> list[tuple[str, ...]]:
  """One circle (closed path) per strongly connected component."""
  index: dict[str, int] = {}
  low: dict[str, int] = {}
  stack: list[str] = []
  on_stack: set[str] = set()
  components = []

  def visit(v: str) -> None:  # Tarjan's algorithm; the package is shallow.
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in sorted(graph.get(v, ())):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while True:
        w = stack.pop()
        on_stack.discard(w)
        component.append(w)
        if w == v:
          break
      if len(component) > 1:
        components.append(set(component))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  circles = []
  for component in components:
    # A shortest way back to the component's first module, by breadth.
    start = min(component)
    paths = {start: (start,)}
    frontier = [start]
    found = None
    while frontier and found is None:
      nxt = []
      for v in frontier:
        for w in sorted(graph.get(v, ()) & component):
          if w == start:
            found = (*paths[v], start)
            break
          if w not in paths:
            paths[w] = (*paths[v], w)
            nxt.append(w)
        if found:
          break
      frontier = nxt
    circles.append(found)
  return circles


def check(package_dir: str | pathlib.Path,
          tiers: Sequence[tuple[str, tuple[str, ...]]] = TIERS
          ) -> list[Violation]:
  """Every upward import and every circle in the package, sorted."""
  graph = import_graph(package_dir)
  found = [Violation("upward", (a, b)) for a, targets in sorted(graph.items())
           for b in sorted(targets) if tier_of(b, tiers) > tier_of(a, tiers)]
  found += [Violation("circle", c) for c in _circles(graph)]
  return found
