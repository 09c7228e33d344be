# Copyright 2026 The tunix_mcjax Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""The step's transfer guard (tunix_mcjax/transfers.py), with real JAX.

The whole jobs under the guard are the shared runs "mcjax2"
(tests/conftest.py `equivalence_runs`: 2 hosts, KL and evaluation on), the
3-host run (`three_host_runs`: LoRA, gradient accumulation, hsdp) and the
disaggregated runs "k0" and "k1" (tests/da/test_disaggregated.py: the
trainer host at max_staleness 0, and 1 with importance weights and LoRA): a
transfer the guard refuses fails them.
"""

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tunix_mcjax import transfers
from tunix_mcjax.cli import options as cli_options
from tunix_mcjax.recipes import job_config


def test_the_guard_is_armed_after_the_first_step_only():
  host = np.arange(6, dtype=np.int32)
  with transfers.step_scope("disallow", 0):  # The first step compiles.
    jnp.array(host).block_until_ready()
  with transfers.step_scope("disallow", 1):
    with pytest.raises(Exception, match="Disallowed host-to-device"):
      jnp.array(host).block_until_ready()
    with transfers.deliberate("host_rows"):
      jnp.array(host).block_until_ready()
    # Explicit transfers are what deliberate code uses.
    jax.device_put(host).block_until_ready()
  with transfers.step_scope("allow", 5):
    jnp.array(host).block_until_ready()


def test_only_listed_transfers_are_deliberate():
  with pytest.raises(ValueError, match="'weights' is not a deliberate"):
    with transfers.deliberate("weights"):
      pass


@pytest.mark.parametrize("make, message", [
    (lambda: job_config.GrpoJobConfig(transfer_guard="deny"),
     "--transfer_guard='deny' must be one of"),
    (lambda: job_config.GrpoJobConfig(backend="tunix",
                                      transfer_guard="disallow"),
     "does not take it"),
    (lambda: cli_options.CliOptions(backend="tunix",
                                    transfer_guard="disallow"),
     "applies to --backend=mcjax and mcjax_da only"),
])
def test_the_level_is_checked_before_anything_starts(make, message):
  with pytest.raises(ValueError, match=message):
    make()


@pytest.mark.parametrize("backend", ["mcjax", "mcjax_da"])
def test_both_mcjax_backends_take_the_guard(backend):
  cfg = job_config.GrpoJobConfig(backend=backend, transfer_guard="disallow")
  assert cfg.transfer_guard == "disallow"
  options = cli_options.CliOptions(backend=backend, transfer_guard="log")
  assert options.transfer_guard == "log"


def test_every_deliberate_transfer_is_in_the_design_doc():
  # The disaggregated trainer's host data by design (tunix_mcjax/da/) too.
  assert {"da_rows", "da_importance", "da_publish"} <= set(
      transfers.DELIBERATE)
  design = (pathlib.Path(__file__).resolve().parents[1] / "docs"
            / "design.md").read_text()
  missing = [w for w in transfers.DELIBERATE if f"| `{w}` |" not in design]
  assert not missing, f"not in docs/design.md's transfer table: {missing}"
