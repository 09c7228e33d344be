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

"""Publication across real processes: the engine gets exactly the trainer.

A 2-host x 2-device job (real multi-process JAX on CPU) trains nothing but
perturbs the FSDP-sharded trainer parameters, publishes them into each
host's native engine, and checks on every host that the engine's parameters
equal the gathered trainer parameters and that the engine's next-token
logits equal the trainer model's on the same tokens.
"""

import pathlib

import launch_utils
import pytest

pytestmark = [pytest.mark.multihost]

# Runs on each of 2 hosts; prints the host's RESULT record.
_PROGRAM = pathlib.Path(__file__).resolve().parent / "support" / (
    "publication_host.py")


@pytest.fixture(scope="module")
def results():
  return launch_utils.run_on_hosts(_PROGRAM)


def test_engine_params_equal_gathered_trainer_params(results):
  for rec in results.values():
    assert rec["names_equal"]
    assert rec["num_sharded"] > 0  # The trainer really was FSDP-sharded.
    assert rec["on_local"]  # Engine arrays live on this host's devices only.
    assert rec["param_diff"] == 0.0


def test_engine_logits_equal_trainer_logits_and_are_fresh(results):
  for rec in results.values():
    assert rec["logit_diff"] < 1e-5
    assert rec["logit_change"] > 1e-3  # Not the stale, pre-update weights.
    assert rec["no_wait_diff"] < 1e-5  # Without waiting for the gather.


def test_publication_reports_bytes_and_seconds(results):
  for rec in results.values():
    assert rec["stats"]["bytes"] == rec["expected_bytes"] > 0
    assert rec["stats"]["seconds"] > 0
    assert rec["stats"]["num"] > 1


def test_mismatches_name_the_parameter(results):
  for rec in results.values():
    assert "wk" in rec["errors"]["missing"]
    assert "wk" in rec["errors"]["shape"]
    assert "(2, 3)" in rec["errors"]["shape"]
