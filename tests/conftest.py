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

"""Test set-up shared by every test module.

Single-process tests get four CPU devices, set through jax.config before any
test starts a JAX backend (the first device query). Not through XLA_FLAGS or
JAX_PLATFORMS: environment variables would leak into the processes that tests
launch, and those (launched hosts, example runs) set up their own devices
through tunix_mcjax.runtime. Works with jax 0.10.2 (.venv-vllm) and 0.12
(.venv). The compilation cache is the one setting that is meant to leak: see
below.

Shared test helpers (launch_utils, example_runs, ...) live in tests/support/,
which is put on sys.path here. So do the programs tests run in processes of
their own (host programs, probes): modules with a main(), launched by path,
so that Python puts tests/support/ first on their sys.path and they import
the helpers the same way. The launch helpers refuse to start hosts for a
test without the multihost (and, for example runs, e2e) marker, so that the
markers `make test-fast` selects on stay true.
"""

import os
import pathlib
import sys

import jax
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "support"))

# pylint: disable=g-import-not-at-top,g-bad-import-order
import launch_utils
import suite_stats
from tunix_mcjax import compilation_cache
# pylint: enable=g-import-not-at-top,g-bad-import-order

# If a JAX backend had started already, jax_num_cpu_devices raises here: a
# loud failure rather than tests that silently see one device.
jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_num_cpu_devices", 4)

# One persistent compilation cache for the whole run, shared by this process
# and (through the environment, which they inherit) every host, example run
# and Ray actor a test starts: the same small programs compile once per run
# instead of once per process. Kept between local runs under .cache/ (`make
# clean` empties it); cold in a fresh clone. TUNIX_MCJAX_TEST_CACHE_DIR
# moves it, "off" turns it off (for cold measurements).
_CACHE_DIR = os.environ.get(
    "TUNIX_MCJAX_TEST_CACHE_DIR",
    str(launch_utils.REPO_ROOT / ".cache" / "test-compilation-cache"))
if _CACHE_DIR != "off":
  compilation_cache.configure(_CACHE_DIR, program="tests/conftest.py")
  suite_stats.share_cpu_cache()

# Compile statistics per test and per process, when TUNIX_MCJAX_TEST_STATS_DIR
# is set (`make test` sets it; scripts/test_timings.py reads them).
suite_stats.enable_from_env()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
  """Tells the launch helpers which markers the running test carries.

  Covers the test's fixtures too (a module-scoped fixture is set up within the
  first test that uses it).
  """
  del nextitem
  launch_utils.current_test_markers = frozenset(
      mark.name for mark in item.iter_markers())
  suite_stats.set_current_test(item.nodeid)
  try:
    yield
  finally:
    launch_utils.current_test_markers = None
    suite_stats.set_current_test(None)


@pytest.fixture(scope="session")
def shared_runs(tmp_path_factory):
  """The session's registry of example runs, keyed by their flags
  (tests/support/shared_runs.py): a job any two tests need runs once."""
  import shared_runs as shared_runs_lib  # pylint: disable=g-import-not-at-top

  return shared_runs_lib.SharedRuns(tmp_path_factory.mktemp("shared_runs"))


@pytest.fixture(scope="session")
def equivalence_runs(shared_runs):
  """The core equivalence runs, shared by every module that compares them.

  The GRPO example, 2 steps with KL on and an evaluation pass before every
  step, as: stock Tunix (1 process x 4 devices), mcjax with 2 hosts x 2
  devices, and mcjax with 1 host x 4 devices; same seed and data
  (tests/test_equivalence.py, tests/test_eval_equivalence.py).
  """
  import example_runs  # pylint: disable=g-import-not-at-top

  # "mcjax2" runs under the transfer guard: step 2 of the backend makes no
  # implicit host-to-device transfer (tunix_mcjax/transfers.py), evaluation
  # on. The flags are example_runs.EQUIVALENCE_RUNS', which other tests
  # (e.g. tests/engines/test_engine_tp.py) ask for run by run.
  return {name: shared_runs.example(*flags)
          for name, flags in example_runs.EQUIVALENCE_RUNS.items()}


def _stock_and_mcjax(shared_runs, flags, stock_hosts, mcjax_hosts):
  return {
      "tunix": shared_runs.example(*flags, "--backend=tunix", *stock_hosts),
      "mcjax": shared_runs.example(*flags, "--backend=mcjax", *mcjax_hosts),
  }


@pytest.fixture(scope="session")
def three_host_runs(shared_runs):
  """One 3-host run for three of issue 12's tests (suite time).

  `example_runs.THREE_HOST_FLAGS` (LoRA, micro 3 < mini 6 < batch 12) as
  stock Tunix on 1 process x 2 devices (fsdp divides the model there) and
  mcjax on 3 hosts x 2 devices (hsdp, chosen by --mesh=auto): the 3-host
  LoRA test (tests/test_lora.py), the hsdp test (tests/test_hsdp.py) and
  the gradient accumulation test (tests/test_equivalence_variants.py).
  mcjax runs under the transfer guard (LoRA, accumulation, hsdp).
  """
  return _stock_and_mcjax(
      shared_runs, _flags("THREE_HOST_FLAGS"),
      ("--num_hosts=1", "--devices_per_host=2"),
      ("--num_hosts=3", "--devices_per_host=2", "--transfer_guard=disallow"))


@pytest.fixture(scope="session")
def lora_drgrpo_runs(shared_runs):
  """One 2-host run for the 2-host LoRA test and the Dr.GRPO test.

  `example_runs.LORA_DRGRPO_FLAGS` as stock Tunix (1 process x 4 devices)
  and mcjax (2 hosts x 2 devices).
  """
  return _stock_and_mcjax(
      shared_runs, _flags("LORA_DRGRPO_FLAGS"),
      ("--num_hosts=2", "--devices_per_host=2"),
      ("--num_hosts=2", "--devices_per_host=2"))


def _flags(name):
  import example_runs  # pylint: disable=g-import-not-at-top

  return getattr(example_runs, name)
