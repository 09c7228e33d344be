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


"""LoRA actors under mcjax: the same run as stock Tunix, adapters only.

LoRA rank 4, alpha 8, on all seven projections (the example's default
--lora_modules), in two shared runs (tests/conftest.py; each pair is also
the run of other tests, to keep `make test` time):

* `lora_drgrpo_runs`: 2 hosts x 2 devices (fsdp) vs stock Tunix on 1
  process x 4 devices, with Tunix's Dr.GRPO learner (also
  tests/test_equivalence_variants.py). Everything within the usual 1e-6.
* `three_host_runs`: 3 hosts x 2 devices vs stock on 1 process x 2 devices,
  with gradient accumulation (micro 3 < mini 6 < batch 12); the tiny
  model's 64-wide embedding does not divide over 6 devices, so the
  example's default mesh is hsdp (also tests/test_hsdp.py and
  tests/test_equivalence_variants.py). Tolerance: see
  `test_same_numbers_as_stock_three_hosts_hsdp`.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

import example_runs
from tunix_mcjax import rules
from tunix_mcjax.recipes import grpo_job


@pytest.fixture(name="runs")
def runs_fixture(lora_drgrpo_runs, three_host_runs) -> dict[str, pathlib.Path]:
  return {"tunix2": lora_drgrpo_runs["tunix"],
          "mcjax2": lora_drgrpo_runs["mcjax"],
          "tunix3": three_host_runs["tunix"],
          "mcjax3": three_host_runs["mcjax"]}


def _is_adapter(name: str) -> bool:
  return "_lora_a" in name or "_lora_b" in name


def assert_lora_params_close(ref: pathlib.Path, got: pathlib.Path) -> None:
  """The frozen base equal; the adapters as the 3-host test's doc says."""
  pa, pb = np.load(ref / "params.npz"), np.load(got / "params.npz")
  assert sorted(pa.files) == sorted(pb.files)
  adapters = [k for k in pa.files if _is_adapter(k)]
  for k in pa.files:
    if not _is_adapter(k):
      np.testing.assert_array_equal(pb[k], pa[k], err_msg=k)
  beyond = sum(int((np.abs(pa[k] - pb[k]) > 1e-6).sum()) for k in adapters)
  total = sum(pa[k].size for k in adapters)
  assert beyond <= 1e-3 * total, (beyond, total)
  for k in adapters:
    np.testing.assert_allclose(pb[k], pa[k], atol=1e-3, rtol=0, err_msg=k)


@pytest.mark.multihost
@pytest.mark.e2e
def test_same_numbers_as_stock_two_hosts(runs):
  example_runs.assert_same_rollouts_and_rewards(runs["tunix2"], runs["mcjax2"])
  names = example_runs.assert_same_losses_and_parameters(
      runs["tunix2"], runs["mcjax2"])
  adapters = {n for n in names if _is_adapter(n)}
  # Rank 4 A and B on 7 projections of each of the tiny model's 2 layers.
  assert len(adapters) == 2 * 7 * 2, sorted(adapters)


@pytest.mark.multihost
@pytest.mark.e2e
def test_same_numbers_as_stock_three_hosts_hsdp(runs):
  """hsdp's cross-host all-reduce sums gradients in another order.

  Completions, rewards and losses are still identical (1e-6), and the
  frozen base exactly. Adapters: Adam divides each update by sqrt(v), so an
  element whose gradient is almost zero turns summation-order noise (~1e-9)
  into an update difference of up to lr (1e-2) per step. Observed on CPU:
  3 hosts without accumulation, 5 of 83k elements beyond 1e-6, the largest
  by 1.6e-4; this run, 1 element, by 1.1e-6. Checked: at most 0.1% of
  adapter elements beyond 1e-6, none beyond 1e-3 (a tenth of one step's
  largest move); tests/test_hsdp.py checks the same run's parameters
  within its atol 1e-4.
  """
  ref, got = runs["tunix3"], runs["mcjax3"]
  example_runs.assert_same_rollouts_and_rewards(
      ref, got, calls=2 * example_runs.THREE_HOST_CALLS_PER_STEP, group=2)
  a = json.loads((ref / "records.json").read_text())
  b = json.loads((got / "records.json").read_text())
  np.testing.assert_allclose([r["loss"] for r in b], [r["loss"] for r in a],
                             rtol=1e-6, atol=1e-6)
  assert_lora_params_close(ref, got)


@pytest.mark.multihost
@pytest.mark.e2e
@pytest.mark.parametrize("run", ["tunix2", "mcjax2", "mcjax3"])
def test_only_the_adapters_trained(runs, run):
  init = np.load(runs[run] / "params_init.npz")
  final = np.load(runs[run] / "params.npz")
  moved = {k: float(np.abs(final[k] - init[k]).max()) for k in final.files}
  assert max(v for k, v in moved.items() if _is_adapter(k)) > 1e-3
  frozen = {k: v for k, v in moved.items() if not _is_adapter(k)}
  assert frozen and max(frozen.values()) == 0.0, frozen


@pytest.mark.multihost
@pytest.mark.e2e
@pytest.mark.parametrize("run, hosts", [("mcjax2", 2), ("mcjax3", 3)])
def test_every_engine_holds_the_trained_adapters(runs, run, hosts):
  final = np.load(runs[run] / "params.npz")
  dumps = sorted(runs[run].glob("engine_params_host*.npz"))
  assert len(dumps) == hosts
  for dump in dumps:
    engine = np.load(dump)
    assert sorted(engine.files) == sorted(final.files)
    for k in final.files:
      # The engine's model (base + adapters) is the trainer's after the
      # last publication: its log-probs are the trainer's.
      np.testing.assert_array_equal(engine[k], final[k], err_msg=f"{dump} {k}")


@pytest.mark.multihost
@pytest.mark.e2e
def test_publication_sends_only_the_adapters(runs):
  final = np.load(runs["mcjax2"] / "params.npz")
  adapter_bytes = sum(final[k].nbytes for k in final.files if _is_adapter(k))
  full_bytes = sum(final[k].nbytes for k in final.files)
  records = [json.loads(line) for line in
             (runs["mcjax2"] / "metrics.jsonl").read_text().splitlines()]
  assert [r["publish_bytes"] for r in records] == [adapter_bytes] * 2
  assert adapter_bytes < full_bytes / 5, (adapter_bytes, full_bytes)


# --- bad input: refused before any host starts (no devices used) -----------


@pytest.mark.parametrize("kwargs, message", [
    (dict(lora_rank=0), "lora_rank=0: a LoRA rank must be an integer >= 1"),
    (dict(lora_rank=4, lora_modules=".*nothing"),
     "lora_modules='.*nothing' matches no module"),
    (dict(lora_rank=4, lora_modules="(unclosed"), "is not a valid regex"),
    (dict(lora_rank=4, lora_alpha=0.0), "lora_alpha=0.0: LoRA alpha"),
    (dict(lora_alpha=8.0), "lora_alpha needs lora_rank"),
])
def test_bad_lora_settings_are_refused(kwargs, message):
  with pytest.raises(ValueError, match="") as e:
    grpo_job.GrpoJobConfig(**kwargs)
  assert message in str(e.value)


def test_lora_engines():
  # Every registered engine takes a LoRA actor (vllm_tpu: merged by its
  # mapping, tests/engines/experimental/test_tpu_inference.py) ...
  grpo_job.GrpoJobConfig(lora_rank=4, engine="vllm_tpu")
  from tunix_mcjax import engines  # pylint: disable=g-import-not-at-top,unused-import
  from tunix_mcjax.registry import ENGINES  # pylint: disable=g-import-not-at-top
  for name in ENGINES.names():
    assert rules.lora_engine(name, True) is None, name
  # ... and one that is not listed is refused, naming the engines that do.
  problem = rules.lora_engine("other", True)
  assert problem.error is NotImplementedError
  assert "engine='other' with a LoRA actor" in problem.message
  assert "'vllm_tpu'" in problem.message


def test_lora_job_check_without_devices():
  config = {"actor_model_config": {"lora_config": {
      "rank": 0, "alpha": 8.0, "module_path": ".*q_proj"}}}
  check = rules.check_job(config, num_hosts=2, devices_per_host=2,
                            engine_names=("native", "vllm"))
  assert any("lora_config.rank=0" in p for p in check.problems), check
  ok = {"actor_model_config": {"lora_config": {
      "rank": 64, "alpha": 64.0, "module_path": rules.DEFAULT_LORA_MODULES}}}
  check = rules.check_job(ok, num_hosts=2, devices_per_host=2,
                            engine_names=("native", "vllm"))
  assert not any("LoRA" in p or "lora" in p for p in check.problems), check


def test_default_modules_select_the_seven_projections():
  import re  # pylint: disable=g-import-not-at-top
  pattern = re.compile(rules.DEFAULT_LORA_MODULES)
  selected = [p for p in rules.lora_module_paths(1) if pattern.fullmatch(p)]
  assert [p.split("/")[-1] for p in selected] == [
      "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
      "down_proj"]
