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

"""vLLM rollout hosts and MaxText trainer hosts under `--backend=mcjax_da`.

Runs where vLLM and MaxText import together (`.venv-maxtext-vllm`, `make
test-maxtext-vllm`). One module fixture of four GRPO example runs, each a
synchronous DA job (`--max_staleness=0`, 1 trainer host x 2 devices, 1
rollout host: one vLLM engine start per job) and the colocated mcjax job on
the same trainer mesh (1 host x 2 devices) with the same engine:

- "lora": a Tunix trainer with a LoRA actor and vLLM engines: the rollout
  host's first publication is the whole model (base and adapters, installed
  with one reload), every later one the adapters (merged on the rollout
  host).
- "maxtext": a MaxText trainer (full weights) and vLLM engines: the trainer
  maps its parameters into the engines' Tunix Qwen3 layout inside its
  publication program, so the rollout host never builds MaxText.

A fifth run is the "maxtext" DA job at `--max_staleness=1` (Tunix's MaxText
disaggregated recipe's shape): step 2 trains rows generated with the
initial weights, importance-weighted.

Together they cover a full-weights and an adapters-only vLLM publication,
and a whole-model one into a LoRA engine. Each DA run equals its colocated
run exactly: completions and rewards identical (both sides' vLLM runs the
same rows in one call with the same per-row seeds on bit-identical weights,
as the colocated multi-host vLLM runs are with each other), losses and
parameters within 1e-6.

In those runs the rollout host's own initial base equals the trainer's (the
same seed), so one in-process check shows that a whole-model publication
into a LoRA vLLM engine does replace the base the adapters are merged into:
log-probs then equal the native engine's (1e-4, as tests/engines/
test_vllm.py), before and after an adapters-only update.
"""

import dataclasses
import json
import pathlib

import numpy as np
import psutil
import pytest

import example_runs
import launch_utils

pytestmark = [pytest.mark.vllm]

pytest.importorskip("vllm")
pytest.importorskip("maxtext")

RUNS = {
    "lora": (*example_runs.LORA_FLAGS,),
    "maxtext": ("--trainer=maxtext",),
}
DA_FLAGS = ("--backend=mcjax_da", "--trainer_hosts=1", "--rollout_hosts=1",
            "--max_staleness=0")
COLOCATED_FLAGS = ("--backend=mcjax", "--num_hosts=1")


@pytest.fixture(name="runs", scope="module")
def runs_fixture(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("da_vllm")
  common = (*example_runs.EQUIVALENCE_FLAGS, "--engine=vllm",
            "--devices_per_host=2")
  out = {}
  for name, flags in RUNS.items():
    out[name] = {
        kind: example_runs.run_example(tmp / f"{name}_{kind}", *common,
                                       *flags, *kind_flags)
        for kind, kind_flags in (("da", DA_FLAGS),
                                 ("colocated", COLOCATED_FLAGS))
    }
  return out


def _records(out: pathlib.Path) -> list[dict]:
  return [json.loads(line)
          for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("name", list(RUNS))
@pytest.mark.multihost
@pytest.mark.e2e
def test_synchronous_vllm_job_equals_colocated(runs, name):
  colocated, da = runs[name]["colocated"], runs[name]["da"]
  example_runs.assert_same_rollouts_and_rewards(colocated, da)
  example_runs.assert_same_losses_and_parameters(colocated, da)
  example_runs.assert_parameters_moved(da)
  records = _records(da)
  assert [r["backend"] for r in records] == ["mcjax_da"] * 2
  # Each batch was generated after the previous update was installed.
  assert [r["policy_version"] for r in records] == [0, 1]
  assert [r["staleness"] for r in records] == [0, 0]


@pytest.mark.multihost
@pytest.mark.e2e
def test_maxtext_trainer_with_vllm_rollout_host_at_staleness_one(
    tmp_path_factory):
  # As the MaxText disaggregated recipe runs: the next batch is generated
  # on the rollout host's vLLM while the MaxText trainer trains this one.
  out = example_runs.run_example(
      tmp_path_factory.mktemp("da_vllm_stale") / "maxtext_k1",
      *example_runs.EQUIVALENCE_FLAGS, "--engine=vllm", "--devices_per_host=2",
      *RUNS["maxtext"], *DA_FLAGS[:-1], "--max_staleness=1")
  records = _records(out)
  assert [r["backend"] for r in records] == ["mcjax_da"] * 2
  # Step 2's rows were generated with the initial weights, before step 1's
  # update was published: one version stale, importance-weighted.
  assert [r["policy_version"] for r in records] == [0, 0]
  assert [r["staleness"] for r in records] == [0, 1]
  stale = records[1]
  assert 0 < stale["is_weight_min"] <= stale["is_weight_mean"]
  assert stale["is_weight_mean"] <= stale["is_weight_max"]
  for r in records:
    assert np.isfinite(r["loss"]) and r["grad_norm"] > 0, r
  example_runs.assert_parameters_moved(out)


@pytest.mark.multihost
@pytest.mark.e2e
def test_lora_sends_adapters_maxtext_the_mapped_model(runs):
  lora = [r["weights_bytes"] for r in _records(runs["lora"]["da"])]
  full = [r["weights_bytes"] for r in _records(runs["maxtext"]["da"])]
  # The same tiny Qwen3 shape on the engine side: the MaxText trainer sends
  # the whole (mapped) model every step, the LoRA trainer its adapters.
  assert 0 < max(lora) < min(full) / 4, (lora, full)


@pytest.mark.multihost
@pytest.mark.e2e
def test_no_ray_process_outlives_the_jobs(runs):
  del runs  # Every run of this module has ended.
  left = [p.info for p in psutil.process_iter(["pid", "cmdline"])
          if launch_utils.in_this_network_namespace(p.info["pid"])
          and any(part.startswith("ray::") or "raylet" in part
                  or "gcs_server" in part
                  for part in (p.info["cmdline"] or ()))]
  assert not left, left


def test_whole_model_publication_replaces_a_lora_engines_base():
  # pylint: disable=g-import-not-at-top
  from flax import nnx
  import jax
  import numpy as np
  from tunix_mcjax import runtime
  from tunix_mcjax.engines import base
  from tunix_mcjax.engines import native
  from tunix_mcjax.engines import vllm as vllm_engine
  from tunix_mcjax.recipes import grpo_job
  # pylint: enable=g-import-not-at-top

  job = grpo_job.GrpoJobConfig(engine="vllm", lora_rank=4, lora_alpha=8,
                               seed=3)
  mesh = runtime.local_mesh()
  # As a rollout host builds it (seed 3), and the trainer's policy: another
  # base (seed 4) with non-zero adapters.
  local, _, tokenizer = grpo_job._build_models(job, mesh)  # pylint: disable=protected-access
  policy, _, _ = grpo_job._build_models(  # pylint: disable=protected-access
      dataclasses.replace(job, seed=4), mesh)
  rng = np.random.default_rng(0)
  replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())

  def perturb_adapters():
    state = nnx.state(policy, nnx.LoRAParam)
    nnx.update(policy, jax.tree.map(
        lambda x: x + 0.3 * rng.standard_normal(x.shape).astype(x.dtype),
        state))

  def published(kind):
    return jax.tree.map(lambda x: jax.device_put(np.asarray(x), replicated),
                        nnx.state(policy, kind))

  perturb_adapters()
  engine = vllm_engine.VllmEngine(
      tokenizer=tokenizer, rollout_config=grpo_job.train_rollout_config(job),
      context=base.EngineContext(engine_mesh=mesh, initial_model=local,
                                 row_ids=base.CounterRowIds(), seed=3))
  try:
    prompts = rng.integers(3, 16, (4, 5)).astype(np.int32)
    completions = rng.integers(3, 16, (4, 6)).astype(np.int32)
    before = np.asarray(engine.get_per_token_logps(prompts, completions))
    engine.update_params(published(nnx.Param))
    for step in range(2):
      want = np.asarray(native.NativeEngine(
          tokenizer=tokenizer, rollout_config=grpo_job.train_rollout_config(
              job),
          context=base.EngineContext(engine_mesh=mesh, initial_model=policy,
                                     row_ids=base.CounterRowIds())
      ).get_per_token_logps(prompts, completions))
      got = np.asarray(engine.get_per_token_logps(prompts, completions))
      np.testing.assert_allclose(got, want, atol=1e-4, rtol=0,
                                 err_msg=f"update {step}")
      assert np.abs(want - before).max() > 1e-2  # Not the local weights.
      if step == 0:
        # Adapters only: merged into the published base, not the local one.
        perturb_adapters()
        engine.update_params(published(nnx.LoRAParam),
                             filter_types=(nnx.LoRAParam,))
  finally:
    engine.close()
