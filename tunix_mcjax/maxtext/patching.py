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

"""Applies the MaxText patches (`maxtext_patches/`) to a copy of MaxText.

  python -m tunix_mcjax.maxtext.patching --out build/maxtext_patched
  PYTHONPATH=build/maxtext_patched python -m maxtext.trainers.post_train.rl.train_rl ...

The installed `maxtext` package (it must be the pinned release) is copied to
OUT/maxtext and the patches are applied there in order with `patch -p1`; the
environment itself is never modified. Re-running replaces OUT/maxtext.
"""

from __future__ import annotations

from collections.abc import Sequence
import importlib.metadata
import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys

from absl import app
from absl import flags

MAXTEXT_VERSION = "0.2.5"


def _find_patch_dir() -> pathlib.Path:
  """The installed package's patches, else the source checkout's."""
  here = pathlib.Path(__file__).resolve().parent
  # The wheel ships the repository's top-level maxtext_patches/ as package
  # data next to this module (pyproject.toml maps it there); a source
  # checkout (editable install, PYTHONPATH=repo) has only the top-level one.
  for folder in (here / "patches", here.parents[1] / "maxtext_patches"):
    if folder.is_dir():
      return folder
  return here / "patches"  # Absent: patches() names what is missing.


PATCH_DIR = _find_patch_dir()

_OUT = flags.DEFINE_string(
    "out", "build/maxtext_patched", "Folder to put the patched maxtext in."
)


def patches() -> list[pathlib.Path]:
  """The patch files, in the order they apply."""
  found = sorted(PATCH_DIR.glob("[0-9][0-9][0-9][0-9]-*.patch"))
  if not found:
    raise FileNotFoundError(
        f"No patches in {PATCH_DIR} (nor in a source checkout's"
        " maxtext_patches/); the tunix_mcjax installation is incomplete"
        " (reinstall it)."
    )
  return found


def installed_maxtext() -> pathlib.Path:
  """The installed maxtext package folder; checks the pinned version."""
  version = importlib.metadata.version("maxtext")
  if version != MAXTEXT_VERSION:
    raise RuntimeError(
        f"maxtext {version} is installed; the patches are written against"
        f" {MAXTEXT_VERSION}. Install maxtext=={MAXTEXT_VERSION}."
    )
  spec = importlib.util.find_spec("maxtext")
  if spec is None or not spec.submodule_search_locations:
    raise RuntimeError("maxtext is not importable in this environment.")
  return pathlib.Path(list(spec.submodule_search_locations)[0])


def apply(out: str | os.PathLike[str], upto: int | None = None) -> pathlib.Path:
  """Copies maxtext into `out`/maxtext and applies the patches.

  Args:
    out: destination folder (put it first on PYTHONPATH to use the copy).
    upto: apply only the first `upto` patches (tests of single patches).

  Returns:
    The patched package folder.

  Raises:
    RuntimeError: if a patch does not apply cleanly (nothing is half-applied
      silently: the copy is removed).
  """
  src = installed_maxtext()
  dst = pathlib.Path(out) / "maxtext"
  if dst.exists():
    shutil.rmtree(dst)
  shutil.copytree(
      src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
  )
  for patch in patches()[:upto]:
    proc = subprocess.run(
        ["patch", "-p1", "--forward", "--no-backup-if-mismatch", "-s",
         "-d", str(dst), "-i", str(patch)],
        capture_output=True, text=True, check=False,
    )
    if proc.returncode:
      shutil.rmtree(dst)
      raise RuntimeError(
          f"{patch.name} does not apply to maxtext {MAXTEXT_VERSION}:\n"
          f"{proc.stdout}{proc.stderr}"
      )
    print(f"[maxtext_patching] applied {patch.name}", flush=True)
  return dst


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  dst = apply(_OUT.value)
  print(
      f"[maxtext_patching] patched maxtext in {dst}; use it with\n"
      f"  PYTHONPATH={dst.parent.resolve()} python -m"
      " maxtext.trainers.post_train.rl.train_rl <rl.yml> rl_cluster_backend=mcjax"
      " use_pathways=false ...",
      flush=True,
  )


if __name__ == "__main__":
  sys.exit(app.run(main))
