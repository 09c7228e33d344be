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

"""Orbax's OCDBT array stores, checked as a restore reads them before the
arrays: the manifest and every B-tree node, without the array data.

A B-tree node names each value's data file, offset and length, so a data
file cut short or missing shows without reading it; and every array the
item's tree metadata lists must be a key of the store. Tensorstore's thread
pools do not survive fork(), and the launching process forks its hosts
after checking (`host_fork`), so `check_stores` runs the check in a fresh
interpreter (this file run as a script: stdlib and tensorstore only, no
package import).

A store under a URI (`gs://bucket/...`) is checked the same way: tensorstore
opens it with its own driver for that scheme (the one Orbax wrote it with),
and data file sizes come from the object store through `etils.epath`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
import dataclasses
import json
import pathlib
import re
import subprocess
import sys
from typing import Any
import urllib.parse

# How long the child may take (it reads a few small index files).
_TIMEOUT_S = 300


@dataclasses.dataclass(frozen=True, kw_only=True)
class Store:
  """One item's OCDBT store.

  Attributes:
    path: the item's directory (it holds manifest.ocdbt).
    arrays: the arrays its tree metadata lists (Orbax's param names).
    zarr3: the arrays are zarr v3 (zarr.json), else v2 (.zarray).
  """

  path: str
  arrays: tuple[str, ...] = ()
  zarr3: bool = False


def _short_error(error: BaseException, limit: int = 300) -> str:
  text = " ".join(str(error).split())
  return text if len(text) <= limit else text[:limit] + "..."


def _tensorstore_problem(error: BaseException, fallback: Any) -> str:
  """What a tensorstore error says, naming the local file it names."""
  files = re.findall(r'local file "([^"]+)"', str(error))
  name = files[-1] if files else str(fallback)
  return f"{name} cannot be read ({_short_error(error)})"


def _references(node: Any) -> Iterator[str]:
  """The OCDBT references (B-tree nodes, version nodes, values) in a dump."""
  if isinstance(node, str):
    if node.startswith(("btreenode:", "versionnode:", "value:")):
      yield node
  elif isinstance(node, Mapping):
    for value in node.values():
      yield from _references(value)
  elif isinstance(node, (list, tuple)):
    for value in node:
      yield from _references(value)


def _reference_range(store: Any, ref: str) -> tuple[Any, int] | None:
  """(file, end of the referenced bytes) of an OCDBT reference
  `KIND:BASE:PATH:OFFSET:LENGTH`; None if it reads otherwise."""
  parts = ref.split(":")
  if len(parts) != 5:
    return None
  _, base, relative, offset, length = parts
  try:
    end = int(offset) + int(length)
  except ValueError:
    return None
  return store / urllib.parse.unquote(base + relative), end


def _is_remote(path: str) -> bool:
  return "://" in path


def _size(path: Any) -> int | None:
  """`path`'s size in bytes; None: there is no such file."""
  try:
    if isinstance(path, pathlib.Path):
      return path.stat().st_size
    return path.stat().length  # An etils.epath path (a remote object).
  except FileNotFoundError:
    return None


def store_problem(store: Store) -> str | None:
  """What a restore would fail on in `store`'s index, naming the file;
  None: every node and value lies within its file and every array is a
  key. Uses tensorstore in this process (see `check_stores`)."""
  import tensorstore as ts  # pylint: disable=g-import-not-at-top

  if _is_remote(store.path):
    from etils import epath  # pylint: disable=g-import-not-at-top

    item = epath.Path(store.path)
    # Tensorstore's URL form (gs://bucket/path/: its gcs driver).
    base = ts.KvStore.Spec(str(item) + "/").to_json()
  else:
    item = pathlib.Path(store.path)
    base = {"driver": "file", "path": str(item) + "/"}
  manifest = item / "manifest.ocdbt"
  try:
    files = ts.KvStore.open(base).result()
    pending = [ts.ocdbt.dump(files).result()]
  except Exception as e:  # pylint: disable=broad-except
    return _tensorstore_problem(e, manifest)
  seen: set[str] = set()
  sizes: dict[Any, int | None] = {}
  while pending:
    for ref in _references(pending.pop()):
      if ref in seen:
        continue
      seen.add(ref)
      where = _reference_range(item, ref)
      if where is not None:
        path, end = where
        if path not in sizes:
          sizes[path] = _size(path)
        what = "array data" if ref.startswith("value:") else "its index"
        if sizes[path] is None:
          return f"{path} is missing (the store {manifest} keeps {what} there)"
        if sizes[path] < end:
          return (f"{path} is truncated ({sizes[path]} bytes; the store"
                  f" {manifest} keeps {what} there up to byte {end})")
      if not ref.startswith("value:"):
        try:
          pending.append(ts.ocdbt.dump(files, ref).result())
        except Exception as e:  # pylint: disable=broad-except
          return _tensorstore_problem(
              e, manifest if where is None else where[0])
  try:
    kv = ts.KvStore.open({"driver": "ocdbt", "base": base}).result()
    keys = {k.decode("utf-8", "replace") for k in kv.list().result()}
  except Exception as e:  # pylint: disable=broad-except
    return _tensorstore_problem(e, manifest)
  suffix = "zarr.json" if store.zarr3 else ".zarray"
  absent = [a for a in store.arrays if f"{a}/{suffix}" not in keys]
  if absent:
    more = f" (and {len(absent) - 3} more)" if len(absent) > 3 else ""
    return (f"{item / '_METADATA'} lists array(s) {', '.join(absent[:3])}"
            f"{more} that its store {manifest} does not hold")
  return None


def check_stores(stores: Sequence[Store]) -> str | None:
  """The first `store_problem` of `stores`, found in a child interpreter
  (this process may fork hosts later, which tensorstore's threads forbid).
  """
  if not stores:
    return None
  request = json.dumps([dataclasses.asdict(s) for s in stores])
  where = ", ".join(s.path for s in stores)
  try:
    proc = subprocess.run(
        [sys.executable, "-I", str(pathlib.Path(__file__).resolve())],
        input=request, capture_output=True, text=True, timeout=_TIMEOUT_S,
        check=False)
  except (OSError, subprocess.TimeoutExpired) as e:
    return f"the array stores {where} could not be checked ({e})"
  try:
    return json.loads(proc.stdout.strip().splitlines()[-1])["problem"]
  except (IndexError, KeyError, TypeError, json.JSONDecodeError):
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return (f"the array stores {where} could not be checked (exit"
            f" {proc.returncode}: {tail})")


def main() -> None:
  """The child of `check_stores`: stores as JSON on stdin, the first
  problem (or null) as JSON on stdout."""
  problem = None
  for fields in json.load(sys.stdin):
    problem = store_problem(Store(path=fields["path"],
                                  arrays=tuple(fields["arrays"]),
                                  zarr3=bool(fields["zarr3"])))
    if problem is not None:
      break
  print(json.dumps({"problem": problem}), flush=True)


if __name__ == "__main__":
  main()
