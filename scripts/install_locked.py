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

"""Installs a lock file (--no-deps) and this package into the running venv.

Run with the venv's interpreter. Uses `uv pip install` when uv can be
installed (several times faster than pip on the large lock files), with the
package index settings pip itself uses (`pip config list`: pip.conf files
and PIP_* variables), and pip when uv is unavailable or fails. Either way
exactly the pinned set is installed: nothing is resolved.

  python scripts/install_locked.py requirements/main.lock [--pip-arg=ARG ...]

`TUNIX_MCJAX_INSTALLER=pip` skips uv.

Everything installed is compiled to bytecode at install time (uv's
`--compile-bytecode`, pip's default), this package's sources too: where
PYTHONDONTWRITEBYTECODE is set (as on this project's machines) Python never
writes a .pyc, so without them every process would compile JAX, Tunix and
their dependencies from source again (importing Tunix: 11 s of CPU instead
of 3 s, in every launched host).
"""

from __future__ import annotations

import argparse
import compileall
import os
import pathlib
import shlex
import subprocess
import sys
import time
from typing import Mapping, Sequence

# The uv release this project's environments are built with.
UV_VERSION = "0.13.9"

# pip options that say where packages come from, and uv's spelling.
_INDEX_OPTIONS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "trusted-host": "--allow-insecure-host",
}


def pip_config(python: str) -> dict[str, str]:
  """pip's effective settings: config files, then PIP_* variables on top."""
  out = subprocess.run(
      [python, "-m", "pip", "config", "list"], check=True,
      capture_output=True, text=True).stdout
  # Lines come lowest priority first. pip install reads a file's [global],
  # then its [install] over it (from any file), then PIP_* variables
  # (":env:.find-links" is PIP_FIND_LINKS).
  scopes: dict[str, dict[str, str]] = {"global": {}, "install": {}, "env": {}}
  for line in out.splitlines():
    key, sep, value = line.partition("=")
    if not sep:
      continue
    scope, _, name = key.rpartition(".")
    kind = "env" if scope.startswith(":env:") else scope
    if kind in scopes:
      scopes[kind][name] = value.strip().strip("'\"")
  return {**scopes["global"], **scopes["install"], **scopes["env"]}


def uv_arguments(config: Mapping[str, str],
                 pip_args: Sequence[str]) -> tuple[list[str], dict[str, str]]:
  """uv's flags and environment for pip's `config` and extra pip arguments."""
  args = ["--index-strategy", "unsafe-best-match"]  # pip's: every index
  env: dict[str, str] = {}
  if config.get("no-index", "").lower() in ("1", "true", "yes", "on"):
    args.append("--no-index")
  for name, flag in _INDEX_OPTIONS.items():
    for value in config.get(name, "").split():
      args += [flag, value]
  if config.get("cert"):
    env["SSL_CERT_FILE"] = config["cert"]
  if config.get("timeout") or config.get("default-timeout"):
    env["UV_HTTP_TIMEOUT"] = config.get("timeout") or config["default-timeout"]
  for arg in pip_args:
    if arg == "--no-cache-dir":
      args.append("--no-cache")
    else:
      args.append(arg)
  return args, env


def _run(argv: Sequence[str], env: Mapping[str, str] | None = None) -> bool:
  print("+", shlex.join(argv), flush=True)
  return subprocess.run(argv, env=env).returncode == 0


def _install_with_uv(python: str, lock: str, pip_args: Sequence[str]) -> bool:
  if not _run([python, "-m", "pip", "install", "-q", *pip_args,
               f"uv=={UV_VERSION}"]):
    return False
  uv = str(pathlib.Path(python).parent / "uv")
  args, extra_env = uv_arguments(pip_config(python), pip_args)
  env = {**os.environ, **extra_env}
  base = [uv, "pip", "install", "--python", python, "--no-deps", "-q", *args]
  return (_run([*base, "--compile-bytecode", "-r", lock], env)
          and _run([*base, "--no-build-isolation", "-e", "."], env))


def _install_with_pip(python: str, lock: str, pip_args: Sequence[str]) -> bool:
  base = [python, "-m", "pip", "install", "-q", "--no-deps", *pip_args]
  return (_run([*base, "-r", lock])
          and _run([*base, "--no-build-isolation", "-e", "."]))


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("lock")
  parser.add_argument("--pip-arg", action="append", default=[],
                      help="an extra pip argument (uv gets its equivalent)")
  args = parser.parse_args(argv)
  python = sys.executable
  start = time.monotonic()
  installer = os.environ.get("TUNIX_MCJAX_INSTALLER", "uv")
  if installer not in ("uv", "pip"):
    print(f"error: TUNIX_MCJAX_INSTALLER={installer!r}: use uv or pip",
          file=sys.stderr)
    return 2
  done = False
  if installer == "uv":
    done = _install_with_uv(python, args.lock, args.pip_arg)
    if not done:
      installer = "pip"
      print("uv did not install the lock file; installing with pip instead",
            file=sys.stderr, flush=True)
  if not done:
    done = _install_with_pip(python, args.lock, args.pip_arg)
  if not done:
    print(f"error: installing {args.lock} failed (see above)", file=sys.stderr)
    return 1
  # The editable install's sources: neither installer compiles them.
  root = pathlib.Path(__file__).resolve().parents[1]
  if not compileall.compile_dir(root / "tunix_mcjax", quiet=1, workers=0):
    print("error: compiling tunix_mcjax to bytecode failed (see above)",
          file=sys.stderr)
    return 1
  print(f">> installed {args.lock} with {installer} in "
        f"{time.monotonic() - start:.0f} s", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
