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

"""Tests of the documentation: no reference points nowhere.

Checked references:
- in every Markdown file of the repository: links `[text](target)`
  (relative to the file) and repository paths written in the text or in
  code, such as `docs/cli.md`, `tests/test_compat.py`, `tunix_mcjax/...`,
  `examples/...` (relative to the repository root);
- in the comments and docstrings of the Python code (tunix_mcjax/, tests/,
  examples/): the same repository paths.
A path that leaves the repository (`../shared/...`) is allowed only where
the same paragraph says it is outside the repository.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import pathlib
import re
import tokenize

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]

# Top-level folders whose paths a text may name; a path under one of them
# must exist.
_ROOTS = ("docs", "tests", "tunix_mcjax", "examples", "requirements",
          "maxtext_patches")
_REPO_PATH = re.compile(
    r"(?<![\w./-])((?:%s)/[\w./-]*[\w/])" % "|".join(_ROOTS)
)
# A relative path to outside the repository root, e.g. ../shared/...
_PARENT_PATH = re.compile(r"(?<![\w./-])(\.\./[\w./-]*[\w/])")
_MD_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_OUTSIDE_MARK = re.compile(r"\boutside\b", re.IGNORECASE)
# Folders that hold no documentation of ours: environments, build output,
# caches, run outputs.
_SKIP_DIRS = {"build", "runs", "node_modules", "__pycache__", "dist"}


@dataclasses.dataclass(frozen=True)
class Dangling:
  file: str
  line: int
  target: str
  why: str

  def __str__(self) -> str:
    return f"{self.file}:{self.line}: {self.target!r} {self.why}"


def _walk(root: pathlib.Path, suffix: str) -> list[pathlib.Path]:
  out = []
  for path in sorted(root.rglob(f"*{suffix}")):
    parts = path.relative_to(root).parts[:-1]
    if any(p.startswith(".") or p in _SKIP_DIRS or p.endswith(".egg-info")
           for p in parts):
      continue
    out.append(path)
  return out


def _paragraph(text: str, pos: int) -> str:
  """The paragraph (text between blank lines) around `pos`."""
  start = text.rfind("\n\n", 0, pos)
  end = text.find("\n\n", pos)
  return text[start + 1 if start >= 0 else 0: end if end >= 0 else len(text)]


def _check_target(
    root: pathlib.Path, base: pathlib.Path, target: str, paragraph: str
) -> str | None:
  """Why `target` (relative to `base`) is dangling, or None if it is fine."""
  resolved = (base / target).resolve()
  try:
    resolved.relative_to(root.resolve())
  except ValueError:
    if _OUTSIDE_MARK.search(paragraph):
      return None
    return ("leaves the repository; say in the same paragraph that it is"
            " outside the repository")
  return None if resolved.exists() else "does not exist"


def _scan(
    root: pathlib.Path, rel: str, text: str, first_line: int, *,
    links_from: pathlib.Path | None,
) -> list[Dangling]:
  """Dangling references in one text (a Markdown file, a comment block or a
  docstring) that starts at line `first_line` of file `rel`.

  Markdown links are resolved relative to `links_from` (None: the text is
  not Markdown); repository paths relative to `root`.
  """
  found = []
  line_of = lambda pos: first_line + text.count("\n", 0, pos)
  if links_from is not None:
    spans = []
    for m in _MD_LINK.finditer(text):
      target = m.group(1).split("#", 1)[0].split("?", 1)[0]
      spans.append(m.span(1))
      if not target or re.match(r"^[a-zA-Z][\w+.-]*:", target):
        continue  # Anchors, URLs, mailto.
      why = _check_target(root, links_from, target,
                          _paragraph(text, m.start()))
      if why:
        found.append(Dangling(rel, line_of(m.start()), target, why))
    # Link targets are checked above, relative to their file; blank them
    # out so that the path patterns below do not read them again.
    for a, b in reversed(spans):
      text = text[:a] + " " * (b - a) + text[b:]
  for m in _REPO_PATH.finditer(text):
    path = m.group(1)
    if not (root / path).exists():
      found.append(Dangling(rel, line_of(m.start()), path, "does not exist"))
  for m in _PARENT_PATH.finditer(text):
    why = _check_target(root, root, m.group(1), _paragraph(text, m.start()))
    if why:
      found.append(Dangling(rel, line_of(m.start()), m.group(1), why))
  return found


def _python_texts(source: str) -> list[tuple[int, str]]:
  """(first line, text) of every comment block and docstring."""
  texts = []
  block: list[str] = []
  block_start = 0
  last = -1
  for tok in tokenize.generate_tokens(io.StringIO(source).readline):
    if tok.type != tokenize.COMMENT:
      continue
    row = tok.start[0]
    if block and row != last + 1:
      texts.append((block_start, "\n".join(block)))
      block = []
    if not block:
      block_start = row
    block.append(tok.string.lstrip("#").strip())
    last = row
  if block:
    texts.append((block_start, "\n".join(block)))
  tree = ast.parse(source)
  for node in ast.walk(tree):
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                         ast.AsyncFunctionDef)):
      body = node.body
      if (body and isinstance(body[0], ast.Expr)
          and isinstance(body[0].value, ast.Constant)
          and isinstance(body[0].value.value, str)):
        texts.append((body[0].value.lineno, body[0].value.value))
  return texts


def dangling_references(root: pathlib.Path) -> list[Dangling]:
  """Every dangling reference in the Markdown files and Python comments and
  docstrings under `root`."""
  found = []
  for path in _walk(root, ".md"):
    rel = str(path.relative_to(root))
    found += _scan(root, rel, path.read_text(encoding="utf-8"), 1,
                   links_from=path.parent)
  for top in ("tunix_mcjax", "tests", "examples"):
    if not (root / top).is_dir():
      continue
    for path in _walk(root / top, ".py"):
      rel = str(path.relative_to(root))
      for line, text in _python_texts(path.read_text(encoding="utf-8")):
        found += _scan(root, rel, text, line, links_from=None)
  return found


# --- the checker itself -------------------------------------------------------


def _write(root: pathlib.Path, rel: str, text: str) -> None:
  path = root / rel
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(text)


def test_checker_finds_dangling_links_and_paths(tmp_path):
  _write(tmp_path, "docs/real.md", "# real\n")
  _write(tmp_path, "tests/test_real.py", '"""Real; see docs/real.md."""\n')
  _write(tmp_path, "README.md", "\n".join([
      "# x",
      "[ok](docs/real.md) [ok too](docs/real.md#part) [web](https://a.b/c)",
      "[gone](docs/gone.md) and `tests/test_gone.py` and `tests/test_real.py`",
      "",
      "Data in `../shared/data` (outside the repository).",
      "",
      "Notes in `../shared/notes.md`.",
  ]))
  _write(tmp_path, "docs/sub.md",
         "[up](../README.md) [bad](real.md/x) [nope](missing.md)\n")
  _write(tmp_path, "tunix_mcjax/mod.py", "\n".join([
      '"""Module; see tunix_mcjax/mod.py and docs/nowhere.md."""',
      "",
      "# A comment naming tests/test_missing.py.",
      "X = 'docs/not_a_comment.md'  # strings in code are not read",
      "",
      "def f():",
      '  """Uses tunix_mcjax/other.py."""',
  ]))
  found = {(d.file, d.line, d.target) for d in dangling_references(tmp_path)}
  assert found == {
      ("README.md", 3, "docs/gone.md"),
      ("README.md", 3, "tests/test_gone.py"),
      ("README.md", 7, "../shared/notes.md"),
      ("docs/sub.md", 1, "real.md/x"),
      ("docs/sub.md", 1, "missing.md"),
      ("tunix_mcjax/mod.py", 1, "docs/nowhere.md"),
      ("tunix_mcjax/mod.py", 3, "tests/test_missing.py"),
      ("tunix_mcjax/mod.py", 7, "tunix_mcjax/other.py"),
  }


def test_checker_passes_a_clean_tree(tmp_path):
  _write(tmp_path, "docs/a.md", "See [b](b.md) and `tunix_mcjax/m.py`.\n")
  _write(tmp_path, "docs/b.md", "Back to [a](a.md).\n")
  _write(tmp_path, "tunix_mcjax/m.py", '"""See docs/a.md."""\n')
  assert dangling_references(tmp_path) == []


# --- the repository -----------------------------------------------------------


def test_no_dangling_references_in_the_repository():
  found = dangling_references(REPO)
  assert not found, "Dangling references:\n" + "\n".join(map(str, found))


RECIPE = REPO / "examples/rl/grpo/gsm8k/run_qwen3.sh"


def test_cli_doc_shows_the_one_line_switch_and_links_the_recipe():
  doc = (REPO / "docs/cli.md").read_text()
  assert "-python3 -m tunix.cli.grpo_main \\\n" in doc
  assert "+python3 -m tunix_mcjax.cli.grpo_main --backend=mcjax \\\n" in doc
  assert "(../examples/rl/grpo/gsm8k/run_qwen3.sh)" in doc


@pytest.mark.parametrize(
    "path", [str(p.relative_to(REPO)) for p in _walk(REPO, ".md")]
)
def test_no_markdown_file_pastes_the_recipe(path):
  # The recipe's command is its distinctive part; a doc links the script.
  command = '"${PYTHON}" -m tunix_mcjax.cli.grpo_main --backend="${BACKEND}"'
  assert command in RECIPE.read_text()
  assert command not in (REPO / path).read_text()


def test_readme_stays_a_front_door():
  lines = (REPO / "README.md").read_text().splitlines()
  assert len(lines) <= 250, (
      f"README.md has {len(lines)} lines; move detail to docs/.")
