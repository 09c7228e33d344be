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

"""Resolves the base-config argument `base_config.yaml` of Tunix's GRPO CLI.

Tunix maps the literal first argument `base_config.yaml` to a file next to
`tunix/cli/config.py`, which the google-tunix 0.1.7 wheel does not ship and
this project does not carry; `resolve_base_config` finds the file or fails
with the fix before any host starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import metadata as importlib_metadata
import os
import pathlib

from absl import logging
from tunix.cli import config as tunix_config

from tunix_mcjax.cli.options import ConfigError

# The base-config argument Tunix maps to a file next to tunix/cli/config.py,
# and the variable naming that file when the installed Tunix lacks it.
BASE_CONFIG_ARG = "base_config.yaml"
BASE_CONFIG_ENV = "TUNIX_BASE_CONFIG"
# The Tunix release this module is written against (requirements/main.in).
TUNIX_RELEASE = "0.1.7"


def resolve_base_config(
    argv: Sequence[str], environ: Mapping[str, str] | None = None
) -> list[str]:
  """Resolves the literal base-config argument `base_config.yaml`.

  Tunix maps `base_config.yaml` to a file next to `tunix/cli/config.py`, which
  the google-tunix 0.1.7 wheel does not include, and this project does not
  carry a copy of it. So the literal name resolves to, in order:

  1. Tunix's own file, when the installed Tunix ships it (argv unchanged:
     Tunix resolves it itself);
  2. the file named by the environment variable TUNIX_BASE_CONFIG, e.g.
     `tunix/cli/base_config.yaml` of a Tunix checkout of the pinned release;
  3. nothing: ConfigError, raised before any host starts.

  Any other first argument (a path) is left alone.

  Args:
    argv: The program name and positional arguments.
    environ: The environment to read TUNIX_BASE_CONFIG from; os.environ if
      None.

  Returns:
    The arguments to hand to Tunix.

  Raises:
    ConfigError: `base_config.yaml` cannot be resolved to a file.
  """
  argv = list(argv)
  if len(argv) < 2 or argv[1] != BASE_CONFIG_ARG:
    return argv
  shipped = pathlib.Path(tunix_config.__file__).parent / BASE_CONFIG_ARG
  environ = os.environ if environ is None else environ
  configured = environ.get(BASE_CONFIG_ENV, "")
  if shipped.is_file():
    if configured:
      logging.warning(
          "%s=%s is ignored: the installed Tunix ships %s, which the"
          " argument %s names; pass a path as the first argument to use"
          " another base config.",
          BASE_CONFIG_ENV,
          configured,
          shipped,
          BASE_CONFIG_ARG,
      )
    return argv
  if not configured:
    raise ConfigError(
        _missing_base_config_message(f"{BASE_CONFIG_ENV} is unset")
    )
  path = pathlib.Path(os.path.abspath(os.path.expanduser(configured)))
  if not path.is_file():
    raise ConfigError(
        _missing_base_config_message(
            f"{BASE_CONFIG_ENV}={configured!r} is not a file"
        )
    )
  argv[1] = str(path)
  return argv


def _missing_base_config_message(reason: str) -> str:
  """The error for an unresolvable `base_config.yaml`, with the fix."""
  try:
    installed = importlib_metadata.version("google-tunix")
  except importlib_metadata.PackageNotFoundError:
    installed = None
  if installed == TUNIX_RELEASE:
    tunix = f"the google-tunix {TUNIX_RELEASE} wheel"
  else:
    tunix = f"the installed Tunix ({installed or 'version unknown'})"
  return (
      f"cannot resolve the base config {BASE_CONFIG_ARG!r}: {tunix} does not"
      f" ship tunix/cli/{BASE_CONFIG_ARG} and {reason}. Point"
      f" {BASE_CONFIG_ENV} (or the first argument) at"
      f" tunix/cli/{BASE_CONFIG_ARG} of a Tunix checkout of the pinned"
      f" release, e.g. `git clone --branch v{TUNIX_RELEASE}"
      f" https://github.com/google/tunix` then"
      f" {BASE_CONFIG_ENV}=$PWD/tunix/tunix/cli/{BASE_CONFIG_ARG}, or at a"
      " config of your own."
  )
