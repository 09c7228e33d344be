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

"""Fixtures of the CLI tests: the tests' base config, the CLI module, and
parsed pipelines of a colocated config (no devices used)."""

from __future__ import annotations

import pathlib

import pytest

import base_config_fixture

COLOCATED = base_config_fixture.COLOCATED


@pytest.fixture(scope="session")
def base_config(tmp_path_factory) -> pathlib.Path:
  """The tests' own minimal base config (see base_config_fixture.py)."""
  return base_config_fixture.write(
      tmp_path_factory.mktemp("cli_base_config") / "base_config.yaml")


@pytest.fixture(scope="session")
def cli():
  from tunix_mcjax.cli import grpo_main  # pylint: disable=g-import-not-at-top

  return grpo_main


@pytest.fixture
def pipeline(cli, base_config):
  """Parses the base config with COLOCATED and `overrides` (mcjax).

  `make(*overrides, options=None, **option_kwargs)`: `options` is a
  `CliOptions`; without it, `CliOptions(backend="mcjax", **option_kwargs)`.
  """

  def make(*overrides: str, options=None, **option_kwargs):
    if options is None:
      options = cli.CliOptions(backend="mcjax", **option_kwargs)
    argv = ["grpo_main", str(base_config), *COLOCATED, *overrides]
    return cli.GrpoCliPipeline(argv, options=options)

  return make
