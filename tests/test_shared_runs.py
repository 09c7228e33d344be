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

"""The registry of shared example runs (tests/support/shared_runs.py).

The runner here writes a file instead of launching the example (the
registry's keying and reuse are under test; the multi-host suites use the
real runner through the `shared_runs` fixture).
"""

import pytest

import shared_runs


def test_one_job_is_one_key_whatever_the_order_or_repeats():
  a = shared_runs.job_key(["--steps=2", "--backend=mcjax", "--seed=3"])
  b = shared_runs.job_key(["--seed=3", "--steps=5", "--backend=mcjax",
                           "--steps=2"])  # The last value counts (absl).
  assert a == b
  assert a != shared_runs.job_key(["--steps=2", "--backend=tunix",
                                   "--seed=3"])


@pytest.mark.parametrize("flag", ["--dump_dir=/x", "--metrics_out=m.jsonl",
                                  "--timeout=5", "steps=2"])
def test_per_run_and_malformed_flags_are_refused(flag):
  with pytest.raises(ValueError, match="per run|not a --flag"):
    shared_runs.job_key(["--steps=2", flag])


def test_the_same_job_runs_once_and_a_failed_one_is_not_rerun(tmp_path):
  calls = []

  def runner(out, *flags):
    calls.append(flags)
    if "--fail=1" in flags:
      raise AssertionError("the run failed")
    out.mkdir(parents=True)
    (out / "metrics.jsonl").write_text("{}\n")
    return out

  registry = shared_runs.SharedRuns(tmp_path, runner=runner)
  first = registry.example("--backend=mcjax", "--steps=2")
  again = registry.example("--steps=2", "--backend=mcjax")
  other = registry.example("--backend=tunix", "--steps=2")
  assert first == again != other
  assert len(calls) == registry.started == 2
  assert (first / "flags.txt").read_text().split() == [
      "--backend=mcjax", "--steps=2"]
  with pytest.raises(AssertionError, match="the run failed"):
    registry.example("--fail=1")
  with pytest.raises(pytest.fail.Exception, match="failed earlier"):
    registry.example("--fail=1")
  assert len(calls) == 3
