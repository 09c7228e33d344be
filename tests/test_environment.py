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

"""The main environment has what the project builds on, at the pinned versions."""

import importlib.metadata
import os
import pathlib
import subprocess
import sys

import pytest

LOCK = pathlib.Path(__file__).resolve().parents[1] / "requirements" / "main.lock"
# Imports the modules named in one fresh interpreter and prints OK.
_IMPORTS_TOGETHER = (pathlib.Path(__file__).resolve().parent / "support" /
                     "imports_together.py")


def _pins() -> dict[str, str]:
  pins = {}
  for line in LOCK.read_text().splitlines():
    if line and not line.startswith("#"):
      name, version = line.split("==")
      pins[name.lower().replace("_", "-")] = version
  return pins


@pytest.mark.parametrize("name", ["jax", "flax", "optax", "grain",
                                  "google-tunix", "maxtext", "absl-py",
                                  "pytest", "ray"])
def test_installed_versions_match_the_lock(name):
  assert importlib.metadata.version(name) == _pins()[name]


@pytest.mark.slow
def test_maxtext_and_tunix_import_together():
  # MaxText's Tunix adapter is what the MaxText trainer path builds on.
  proc = subprocess.run(
      [sys.executable, str(_IMPORTS_TOGETHER), "maxtext",
       "maxtext.integration.tunix.tunix_adapter",
       "tunix.rl.grpo.grpo_learner"], capture_output=True, text=True,
      timeout=300, env={**os.environ, "DECOUPLE_GCLOUD": "TRUE",
                        "JAX_PLATFORMS": "cpu"},
  )
  assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]
