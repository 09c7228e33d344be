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

"""Tunix's GRPO CLI under `--backend=mcjax_da`: hosts from the role meshes.

End to end (one module fixture, three runs): a stock-style disaggregated
config (Tunix's disagg recipes: the actor and the rollout with meshes of
their own, the reference `same_mesh_as: actor`, rollout and training
micro-batches of their own sizes) with the actor mesh (2,1) and the rollout
mesh (2,2), 2 devices per host -> 1 trainer host and 2 rollout hosts,
`--max_staleness=0`, 2 steps of a tiny local Qwen3 checkpoint; and the same
config colocated (`rollout_model_config.same_mesh_as=actor`) under
`--backend=mcjax` on 1 host x 2 devices. Batches of 4 prompts train in
micro-batches of 1 prompt (gradient accumulation) and generate in rollout
micro-batches of 2 (as Tunix's learner does: two training micro-batches
merged per generate call, each call's rows split over two updates'
micro-batches). Same seed and data: every completion and reward identical,
losses, grad norms and the final parameters (`--params_out`) within 1e-6;
KL on (beta 0.08), so the reference, which runs with the actor, enters the
losses. The third run is the DA one at `--max_staleness=1`: batch 2 is
generated ahead, in the learner's calls, while step 1 trains.

In process (no hosts): the mapping's arithmetic (`map_hosts`), and every
config the mapping refuses, each with the fix in its message; one
subprocess shows a refusal costs no Ray start.
"""

import json
import pathlib
import pickle
import sys

import numpy as np
import pytest

import base_config_fixture
import cli_runs
import launch_utils
import zygote

REWARDS = pathlib.Path(__file__).with_name("reward_recorder.py")
BATCH, STEPS, GENERATIONS = 4, 2, 2
# Prompts per training micro-batch and per rollout micro-batch.
MICRO = ("rl_training_config.train_micro_batch_size=1",
         "rl_training_config.rollout_micro_batch_size=2")

# The roles' meshes of a stock disaggregated recipe (Tunix's
# run_qwen3_vllm_disagg.sh: actor and rollout meshes of their own).
ACTOR_MESH = ("actor_model_config.mesh.shape=(2,1)",
              "actor_model_config.mesh.axis_names=('fsdp','tp')",
              "reference_model_config.mesh=null",
              "reference_model_config.same_mesh_as=actor")
ROLLOUT_MESH = ("rollout_model_config.mesh.shape=(2,2)",
                "rollout_model_config.mesh.axis_names=('fsdp','tp')")
ROLLOUT_WITH_ACTOR = ("rollout_model_config.mesh=null",
                      "rollout_model_config.same_mesh_as=actor")


# --- end to end ----------------------------------------------------------------


@pytest.fixture(scope="module")
def da_inputs(tmp_path_factory):
  return cli_runs.short_gsm8k_inputs(tmp_path_factory.mktemp("cli_da_inputs"),
                                     BATCH * STEPS)


def _cli_run(inputs, base_config, out: pathlib.Path, *args: str):
  env = cli_runs.cli_env(out, base_config)
  model = inputs["model"]
  proc = zygote.run(
      [sys.executable, "-m", "tunix_mcjax.cli.grpo_main", "base_config.yaml",
       "model_config.model_name=qwen3-tiny", f"model_config.model_id={model}",
       "model_config.model_source=huggingface",
       "model_config.mesh.shape=(2,1)",
       "model_config.mesh.axis_names=('fsdp','tp')",
       f"tokenizer_config.tokenizer_path={model}",
       "data_source=huggingface", f"dataset_name={inputs['data']}",
       f"batch_size={BATCH}", f"num_batches={STEPS}", "train_fraction=1.0",
       "rollout_config.max_prompt_length=500",
       # The whole section (a Tunix replace key): one update per batch.
       "rl_training_config.eval_every_n_steps=1000",
       "rl_training_config.actor_optimizer_config.opt_type=sgd",
       "rl_training_config.actor_optimizer_config.learning_rate=0.05",
       f"rl_training_config.mini_batch_size={BATCH}",
       f"rl_training_config.train_micro_batch_size={BATCH}",
       f"rl_training_config.metrics_logging_options.log_dir={out / 'tb'}",
       f"grpo_config.num_generations={GENERATIONS}",
       # KL on: the reference (with the actor on the trainer hosts) counts.
       "grpo_config.beta=0.08",
       f"reward_functions=['tunix.cli.reward_fn.gsm8k', '{REWARDS}']",
       f"--metrics_out={out / 'metrics.jsonl'}",
       f"--params_out={out / 'params.npz'}", "--timeout=600", *args],
      env=env, cwd=out / "cwd", capture_output=True, text=True, timeout=700)
  (out / "console.txt").write_text(proc.stdout + proc.stderr)
  assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
  return out, proc


@pytest.fixture(scope="module")
def da_runs(da_inputs, base_config, tmp_path_factory):
  launch_utils.require_markers("multihost", "e2e")
  tmp = tmp_path_factory.mktemp("cli_da_runs")
  return {
      "mcjax": _cli_run(da_inputs, base_config, tmp / "mcjax",
                        *ACTOR_MESH, *ROLLOUT_WITH_ACTOR, *MICRO,
                        "--backend=mcjax", "--num_hosts=1",
                        "--devices_per_host=2"),
      "da": _cli_run(da_inputs, base_config, tmp / "da",
                     *ACTOR_MESH, *ROLLOUT_MESH, *MICRO, "--backend=mcjax_da",
                     "--devices_per_host=2", "--max_staleness=0"),
      "da_k1": _cli_run(da_inputs, base_config, tmp / "da_k1",
                        *ACTOR_MESH, *ROLLOUT_MESH, *MICRO,
                        "--backend=mcjax_da", "--devices_per_host=2",
                        "--max_staleness=1"),
  }


def _records(out: pathlib.Path) -> list[dict]:
  return [json.loads(l)
          for l in (out / "metrics.jsonl").read_text().splitlines()]


def _calls(out: pathlib.Path) -> list[dict]:
  (host,) = sorted((out / "rows").glob("rows_host*.jsonl"))
  return [json.loads(l) for l in host.read_text().splitlines()]


@pytest.mark.multihost
@pytest.mark.e2e
def test_cli_maps_role_meshes_onto_hosts(da_runs):
  out, proc = da_runs["da"]
  assert ("actor mesh (2,1) -> 1 trainer host(s); rollout mesh (2,2) -> 2"
          " rollout host(s), one engine each (engine tp 2)") in proc.stdout
  assert "starting 2 rollout hosts and 1 trainer hosts" in proc.stderr
  records = _records(out)
  assert [r["step"] for r in records] == list(range(1, STEPS + 1))
  assert {r["backend"] for r in records} == {"mcjax_da"}
  assert {r["staleness"] for r in records} == {0}
  assert not list((out / "cwd").iterdir())


@pytest.mark.multihost
@pytest.mark.e2e
def test_cli_da_equals_colocated_mcjax(da_runs):
  (ref, _), (got, _) = da_runs["mcjax"], da_runs["da"]
  a, b = _calls(ref), _calls(got)
  # One reward call per merge of two training micro-batches (here one
  # generate call of 2 prompts x G): two per step.
  assert len(a) == len(b) == 2 * STEPS
  assert [len(c["completions"]) for c in a] == [2 * GENERATIONS] * 4
  assert a == b  # Prompts, completions and rewards, in order.
  assert len(set(a[0]["completions"])) > 1
  ra, rb = _records(ref), _records(got)
  for key in ("loss", "grad_norm", "reward_mean"):
    np.testing.assert_allclose([r[key] for r in rb], [r[key] for r in ra],
                               rtol=1e-6, atol=1e-6, err_msg=key)
  # Not vacuous: training moved the policy, and step 2's loss (its KL to
  # the reference) is not 0.
  assert min(r["grad_norm"] for r in ra) > 0
  assert abs(ra[1]["loss"]) > 1e-6
  pa, pb = np.load(ref / "params.npz"), np.load(got / "params.npz")
  assert sorted(pa.files) == sorted(pb.files) and pa.files
  for name in pa.files:
    np.testing.assert_allclose(pb[name], pa[name], rtol=1e-6, atol=1e-6,
                               err_msg=name)


@pytest.mark.multihost
@pytest.mark.e2e
def test_cli_da_generates_ahead_in_the_learners_calls(da_runs):
  # At staleness 1 the trainer host prefetches batch 2 in the calls Tunix's
  # learner will make (two of 2 prompts x G); a call the learner makes
  # otherwise would end the job (remote_engine's check).
  (ref, _), (got, _) = da_runs["mcjax"], da_runs["da_k1"]
  records = _records(got)
  assert [r["step"] for r in records] == list(range(1, STEPS + 1))
  # Step 1 on policy; step 2's batch one version old.
  assert [r["staleness"] for r in records] == [0, 1]
  a, b = _calls(ref), _calls(got)
  assert len(b) == 2 * STEPS
  # Batch 1 comes from the initial policy either way; batch 2's prompts are
  # the same, generated from policy version 0 instead of 1.
  assert b[:2] == a[:2]
  assert [c["prompts"] for c in b[2:]] == [c["prompts"] for c in a[2:]]


# --- in process: the mapping and its refusals -----------------------------------


@pytest.fixture(name="da_pipeline")
def da_pipeline_fixture(cli, base_config):
  """A stock-style disaggregated config, parsed (no devices)."""

  def make(*overrides: str, **option_kwargs):
    options = cli.CliOptions(backend="mcjax_da", **option_kwargs)
    argv = ["grpo_main", str(base_config),
            "model_config.model_name=qwen3-0.6b",
            f"model_config.model_id={base_config_fixture.MODEL_ID}",
            "model_config.mesh.shape=(2,1)",
            f"tokenizer_config.tokenizer_path="
            f"{base_config_fixture.TOKENIZER_DIR}",
            *ACTOR_MESH, *overrides]
    if not any(o.startswith("rollout_model_config.") for o in overrides):
      argv += ROLLOUT_MESH
    return cli.GrpoCliPipeline(argv, options=options)

  return make


@pytest.fixture(name="da_lib")
def da_lib_fixture():
  from tunix_mcjax.cli import disaggregated  # pylint: disable=g-import-not-at-top

  return disaggregated


@pytest.mark.parametrize("actor, rollout, kwargs, expected", [
    ((2, 1), (2, 2), dict(devices_per_host=2), (1, 2, 2)),
    ((8, 1), (1, 8), dict(devices_per_host=4), (2, 2, 4)),  # Tunix's 8b disagg.
    ((2, 4), (2, 4), dict(devices_per_host=4), (2, 2, 4)),  # vllm disagg.
    ((2, 1), (2, 2), dict(trainer_hosts=2), (2, 4, 1)),
    ((2, 1), (2, 2), dict(rollout_hosts=4), (2, 4, 1)),
    ((4,), None, dict(devices_per_host=2, rollout_hosts=4), (2, 4, 2)),
])
def test_hosts_from_meshes(da_lib, actor, rollout, kwargs, expected):
  counts = da_lib.map_hosts(actor_shape=actor, rollout_shape=rollout,
                            **kwargs)
  assert not counts.problems
  assert (counts.trainer_hosts, counts.rollout_hosts,
          counts.devices_per_host) == expected


@pytest.mark.parametrize("actor, rollout, kwargs, message", [
    ((3, 1), (2, 2), dict(devices_per_host=2),
     "actor_model_config.mesh.shape=(3,1) has 3 devices, not a multiple of"
     " --devices_per_host=2"),
    ((2, 1), (3, 1), dict(devices_per_host=2),
     "rollout_model_config.mesh.shape=(3,1) has 3 devices, not a multiple"),
    ((4, 1), (2, 1), dict(devices_per_host=2),
     "1 rollout hosts do not divide over 2 trainer hosts"),
    ((2, 1), (2, 2), dict(devices_per_host=2, trainer_hosts=2),
     "--trainer_hosts=2 disagrees with actor_model_config.mesh.shape=(2,1)"),
    ((2, 1), (2, 2), dict(devices_per_host=2, rollout_hosts=4),
     "--rollout_hosts=4 disagrees with rollout_model_config.mesh"),
    ((2, 1), (2, 2), {}, "pass --devices_per_host"),
    ((2, 1), None, dict(devices_per_host=2),
     "no rollout mesh of its own"),
])
def test_meshes_that_do_not_map(da_lib, actor, rollout, kwargs, message):
  counts = da_lib.map_hosts(actor_shape=actor, rollout_shape=rollout,
                            **kwargs)
  assert any(message in p for p in counts.problems), counts.problems
  assert counts.rollout_hosts is None or counts.trainer_hosts is None


def test_grpo_staleness_defaults_to_one(da_pipeline, da_lib):
  plan = da_lib.plan(da_pipeline(), devices_per_host=2)
  assert plan.options.max_staleness == 1
  assert plan.options.da_options().max_staleness == 1
  assert plan.describe().endswith("max_staleness 1")


def test_stock_disagg_config_maps(da_pipeline, da_lib):
  plan = da_lib.plan(da_pipeline(max_staleness=0), devices_per_host=2)
  assert (plan.options.trainer_hosts, plan.options.rollout_hosts) == (1, 2)
  # The rollout mesh's tp axis: each rollout host's engine tp.
  assert plan.options.engine_tp == 2
  assert "one engine each (engine tp 2)" in plan.describe()
  da = plan.options.da_options()
  assert (da.trainer_hosts, da.rollout_hosts, da.max_staleness) == (1, 2, 0)
  assert "reference with the actor" in plan.describe()
  # The rollout hosts' source carries only the arguments (Ray pickles it).
  source = plan.rollout_source(["grpo_main", "x.yaml"])
  again = pickle.loads(pickle.dumps(source))
  assert again.argv == ("grpo_main", "x.yaml")
  assert again.options == plan.options


@pytest.mark.parametrize("rollout, kwargs, devices, engine_tp", [
    ("(2,2)", {}, 2, 2),
    ("(4,1)", {}, 2, 1),
    ("(1,2)", {}, 2, 2),  # As Tunix's 8b disagg recipe's (1,8).
    ("(2,2)", dict(engine_tp=1), 2, 1),  # --engine_tp wins.
    ("(4,1)", dict(engine_tp=2), 2, 2),
])
def test_engine_tp_from_the_rollout_mesh(da_pipeline, da_lib, rollout,
                                         kwargs, devices, engine_tp):
  plan = da_lib.plan(da_pipeline(
      f"rollout_model_config.mesh.shape={rollout}",
      "rollout_model_config.mesh.axis_names=('fsdp','tp')",
      max_staleness=0, **kwargs), devices_per_host=devices)
  assert plan.options.engine_tp == engine_tp
  assert plan.rollout_source(["x"]).engine_tp == engine_tp


def test_a_rollout_tp_axis_over_hosts_is_refused(cli, da_pipeline, da_lib):
  with pytest.raises(cli.ConfigError) as e:
    da_lib.plan(da_pipeline("rollout_model_config.mesh.shape=(1,4)",
                            "rollout_model_config.mesh.axis_names="
                            "('fsdp','tp')", max_staleness=0),
                devices_per_host=2)
  assert ("rollout_model_config.mesh's tp axis=4 must divide the devices per"
          " host (2) so that an engine replica stays on one host; use one of"
          " [1, 2] (or pass --engine_tp).") in str(e.value)


@pytest.mark.parametrize("overrides, kwargs, devices, messages", [
    # A reference with its own mesh: it runs with the actor.
    (("reference_model_config.same_mesh_as=null",
      "reference_model_config.mesh.shape=(2,1)",
      "reference_model_config.mesh.axis_names=('fsdp','tp')"), {}, 2,
     ["reference_model_config.mesh gives the reference role its own",
      "reference_model_config.same_mesh_as=actor"]),
    # No rollout mesh of its own: host counts, or the colocated backend.
    (ROLLOUT_WITH_ACTOR, {}, 2,
     ["no rollout mesh of its own", "--rollout_hosts",
      "--backend=mcjax"]),
    # Sizes that do not divide.
    ((), {}, 4, ["actor_model_config.mesh.shape=(2,1) has 2 devices, not a"
                 " multiple of --devices_per_host=4"]),
    # A rollout model the rollout hosts cannot build.
    (("rollout_model_config.model_id=Qwen/Qwen3-1.7B", *ROLLOUT_MESH), {}, 2,
     ["rollout_model_config.model_id='Qwen/Qwen3-1.7B' differs from"
      " actor_model_config.model_id", "drop rollout_model_config.model_id"]),
    (("rollout_model_config.lora_config.rank=4", *ROLLOUT_MESH), {}, 2,
     ["drop rollout_model_config.lora_config"]),
    # support.disaggregated's rules.
    (("grpo_config.num_iterations=2",), {}, 2,
     ["--backend=mcjax_da needs --num_iterations=1"]),
    # The trainer hosts' own (mcjax) rules, on T hosts.
    (("batch_size=3",), dict(trainer_hosts=2), None,
     ["batch_size=3 is global and must divide"]),
])
def test_configs_that_cannot_map(cli, da_pipeline, da_lib, overrides,
                                 kwargs, devices, messages):
  with pytest.raises(cli.ConfigError,
                     match="cannot run with --backend=mcjax_da") as e:
    da_lib.plan(da_pipeline(*overrides, **kwargs), devices_per_host=devices)
  for message in messages:
    assert message in str(e.value)


def test_da_options_belong_to_mcjax_da(cli):
  with pytest.raises(cli.ConfigError, match="apply to --backend=mcjax_da"):
    cli.CliOptions(backend="mcjax", trainer_hosts=1)
  with pytest.raises(cli.ConfigError, match="multiple of"):
    cli.CliOptions(backend="mcjax_da", trainer_hosts=2, rollout_hosts=3)
  with pytest.raises(cli.ConfigError, match="max_staleness"):
    cli.CliOptions(backend="mcjax_da", max_staleness=-1)
  assert cli.CliOptions(backend="mcjax_da").deals_prompts


def test_model_sources():
  from tunix_mcjax.recipes import da_job  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.recipes import job_config  # pylint: disable=g-import-not-at-top

  job = job_config.GrpoJobConfig(backend="mcjax_da", max_staleness=0)
  source = da_job.GrpoJobSource(job=job)
  assert (source.engine, source.seed) == ("native", job.seed)
  assert source.cache_size == job.max_prompt_length + job.max_new_tokens + 8
  task = da_job.GrpoJobTask(job=job)
  assert task.da_options() == job.da_options()
  # Both travel to Ray actors.
  assert pickle.loads(pickle.dumps(source)) == source
  assert pickle.loads(pickle.dumps(task)) == task


def test_refused_before_anything_starts(base_config):
  env = launch_utils.launcher_env({"JAX_PLATFORMS": "cpu",
                                   "TUNIX_BASE_CONFIG": str(base_config)})
  proc = zygote.run(
      [sys.executable, "-m", "tunix_mcjax.cli.grpo_main", "base_config.yaml",
       *base_config_fixture.COLOCATED, "--backend=mcjax_da",
       "--devices_per_host=2"],
      env=env, capture_output=True, text=True, timeout=180)
  assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
  assert "cannot run with --backend=mcjax_da" in proc.stderr
  assert "no rollout mesh of its own" in proc.stderr
  assert "[da]" not in proc.stdout + proc.stderr  # No Ray session.
