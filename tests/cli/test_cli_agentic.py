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

"""Tunix's agentic GRPO through the CLI (`training_mode=agentic_grpo`).

End to end: Tunix's agentic learner as `GrpoPipeline._run` builds it (its
default `TaskEnvironment` and `ModelAgent`, the `agentic_grpo_config`
section, the default chat parser of `chat_parser_config`, the config's
reward functions) on GSM8K with a tiny local Qwen3 checkpoint, 2 steps of 8
prompts x 2 agents, KL on, as `--backend=tunix` (one process x 4 devices,
the stock cluster in its comparison mode `--placement_invariant_sampling`,
whose agent turns then take the identities the mcjax cluster gives them:
`admission.route_agent_turns`) and `--backend=mcjax` (2 hosts x 2
devices, prompts dealt over the hosts as in GRPO mode, under the transfer
guard).

Two micro-batches of 4 prompts per step (2 per host under mcjax) and one
agent at a time (`agentic_grpo_config.max_concurrency=1`): Tunix's learner
fills its micro-batches in the order its agents finish, so with concurrent
agents even two stock runs train on other groupings of the same rows (the
same gradient terms summed in another order: not within 1e-6). One at a
time, micro-batch k holds the same groups in both runs (admission deals the
prompts so), as in tests/test_agentic_equivalence.py.

Compared: every agent's prompt, completion and reward (recorded by the
reward function, per group, in agent order) exactly; per-step losses and
reward means, and the final parameters, within rtol = atol = 1e-6 (that
module's 2x2 tolerance; observed: losses 3.6e-7 apart at most, parameters
1.2e-7: not bit-identical as that module's runs are, since here the stock
run sums over one process's 4 devices and mcjax over 2 processes, as
tests/cli/test_grpo_main.py's runs). About 12 s per run with a warm
compilation cache.

At 3 hosts x 2 devices (6 prompts a step, one micro-batch; hsdp, since the
tiny model's widths do not divide over 6 devices) against stock on 1
process x 2 devices: every agent identical, losses and parameters within
`example_runs.DEVICE_COUNT_PARAM_TOLERANCE` (another device count sums the
gradient in another order), as tests/test_agentic_equivalence.py's 3-host
runs.

In process: what mcjax refuses of an agentic config, before any host
starts, each in one line naming what to change.
"""

import json
import pathlib
import sys
import time

import numpy as np
import pytest
import yaml

from tunix_mcjax import rules

import base_config_fixture
import cli_runs
import example_runs
import launch_utils

REWARDS = pathlib.Path(__file__).with_name("reward_recorder.py")
BATCH, MICRO, GENERATIONS, STEPS = 8, 4, 2, 2


def agentic_config(scratch: pathlib.Path) -> dict:
  """The tests' base config with the keys of Tunix's
  base_agentic_config.yaml (a top-level key must exist to be overridden)."""
  config = base_config_fixture.config(scratch)
  config.update({
      "training_mode": "agentic_grpo",
      # As Tunix's agentic base: the chat parser applies the template.
      "apply_chat_template_to_dataset": False,
      # GSM8K's question is the prompt (Tunix's post_init_dataset copies it
      # to "prompts", which its ModelAgent and reward manager read).
      "prompt_key": "question",
      "batch_size": BATCH,
      "num_batches": STEPS,
      "chat_parser_config": {"type": "default"},
      "agent_class_path": None,
      "agent_kwargs": {},
      "env_class_path": None,
      "env_kwargs": {},
      "kubernetes_config": None,
      # One agent at a time: see the module docstring.
      "agentic_grpo_config": {"num_generations": GENERATIONS, "beta": 0.04,
                              "max_concurrency": 1},
      "rl_training_config": {
          "actor_optimizer_config": {"opt_type": "sgd",
                                     "learning_rate": 0.05},
          "eval_every_n_steps": 1000,
          "mini_batch_size": BATCH,
          "train_micro_batch_size": MICRO,
          # Where it trains (mcjax needs it equal to the micro-batch).
          "compute_logps_micro_batch_size": MICRO,
          "checkpoint_root_directory": None,
      },
      "rollout_config": {
          # The rendered chat (template + question) is about 400 tokens.
          "max_prompt_length": 512,
          "total_generation_steps": 12,
          "temperature": 1.0,
          # The agentic learner trains on the sampler's log-probs.
          "return_logprobs": True,
      },
  })
  return config


@pytest.fixture(scope="module")
def agentic_base_config(tmp_path_factory) -> pathlib.Path:
  path = tmp_path_factory.mktemp("agentic_base") / "base_config.yaml"
  path.write_text(yaml.safe_dump(agentic_config(path.parent / "scratch"),
                                 sort_keys=False))
  return path


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
  # 18 rows: the 3-host runs' 3 batches of 6.
  inputs = cli_runs.short_gsm8k_inputs(
      tmp_path_factory.mktemp("cli_agentic_inputs"), BATCH * STEPS + 2)
  inputs["stop_tokens"] = stop_tokens(inputs["model"])
  return inputs


def stop_tokens(model: pathlib.Path) -> list[int]:
  """A turn ends at eos or at a digit. Tunix's agentic learner ends an
  episode that uses up its response budget unscored, without training on
  it (docs/agentic.md); the random tiny model seldom emits eos, so with
  eos alone every episode would, and the loss would be 0."""
  import transformers  # pylint: disable=g-import-not-at-top

  tokenizer = transformers.AutoTokenizer.from_pretrained(model)
  return [tokenizer.eos_token_id, *(
      tokenizer.convert_tokens_to_ids(d) for d in "0123456789")]


# The rollout engines on the trainer's devices (colocated and stock).
WITH_ACTOR = ("rollout_model_config.mesh=null",
              "rollout_model_config.same_mesh_as=actor")
# mcjax_da: 4 rollout devices, 2 per host (one rollout host per trainer
# host); tp 1, as the colocated runs' engines (a tp axis of 2 would give
# each rollout engine tp 2: tests/cli/test_cli_da.py).
OWN_ROLLOUT_MESH = ("rollout_model_config.mesh.shape=(4,1)",
                    "rollout_model_config.mesh.axis_names=('fsdp','tp')")


def cli_run(inputs, base_config, out: pathlib.Path, *args: str,
            rollout_mesh: tuple[str, ...] = WITH_ACTOR,
            overrides: tuple[str, ...] = (), devices: int = 4):
  """The CLI on the agentic base config; `args`: its flags, `overrides`:
  more config overrides; `devices`: the actor mesh's (fsdp) size."""
  env = cli_runs.cli_env(out, base_config)
  # The stock run's one process.
  env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
  model = inputs["model"]
  t0 = time.monotonic()
  proc = cli_runs.run_ok(
      [sys.executable, "-m", "tunix_mcjax.cli.grpo_main", "base_config.yaml",
       f"model_config.model_id={model}",
       f"model_config.mesh.shape=({devices},1)",
       "reference_model_config.mesh=null",
       "reference_model_config.same_mesh_as=actor",
       *rollout_mesh,
       f"tokenizer_config.tokenizer_path={model}",
       f"dataset_name={inputs['data']}",
       f"reward_functions=['{REWARDS}']",
       f"rollout_config.eos_tokens={inputs['stop_tokens']}", *overrides,
       f"--metrics_out={out / 'metrics.jsonl'}",
       f"--params_out={out / 'params.npz'}", *args],
      env, out / "cwd", timeout=700)
  proc.wall_s = time.monotonic() - t0
  return out, proc


# 6 prompts a step in one micro-batch (2 per host at 3 hosts), 3 batches of
# which the third is the test split (--run_eval: an evaluation pass before
# each step); overriding rl_training_config replaces the whole section, so
# it is restated.
THREE_HOSTS = ("batch_size=6", "num_batches=3", "train_fraction=0.67", *(
    f"rl_training_config.{k}={v}" for k, v in (
        ("actor_optimizer_config.opt_type", "sgd"),
        ("actor_optimizer_config.learning_rate", 0.05),
        ("eval_every_n_steps", 1), ("mini_batch_size", 6),
        ("train_micro_batch_size", 6),
        ("compute_logps_micro_batch_size", 6))))


@pytest.fixture(scope="module")
def runs(inputs, agentic_base_config, tmp_path_factory):
  launch_utils.require_markers("multihost", "e2e")
  tmp = tmp_path_factory.mktemp("cli_agentic_runs")
  return {
      "tunix": cli_run(inputs, agentic_base_config, tmp / "tunix",
                        "--backend=tunix", "--placement_invariant_sampling"),
      "mcjax": cli_run(inputs, agentic_base_config, tmp / "mcjax",
                        "--backend=mcjax", "--num_hosts=2",
                        "--devices_per_host=2", "--transfer_guard=disallow",
                        "--timeout=600"),
      # Disaggregated on-policy: the same 2 trainer hosts x 2 devices, the
      # turns generated by 2 rollout hosts x 2 devices.
      # No --max_staleness: agentic mode defaults to 0 (one flag switches).
      "da": cli_run(inputs, agentic_base_config, tmp / "da",
                    "--backend=mcjax_da", "--devices_per_host=2",
                    "--transfer_guard=disallow", "--timeout=600",
                    rollout_mesh=OWN_ROLLOUT_MESH),
      # 3 hosts x 2 devices (hsdp: the tiny model's widths do not divide
      # over 6) against stock on 1 process x 2 devices, 6 prompts a step.
      "tunix3": cli_run(inputs, agentic_base_config, tmp / "tunix3",
                        "--backend=tunix", "--placement_invariant_sampling",
                        "--run_eval", overrides=THREE_HOSTS, devices=2),
      "mcjax3": cli_run(inputs, agentic_base_config, tmp / "mcjax3",
                        "--backend=mcjax", "--num_hosts=3",
                        "--devices_per_host=2", "--transfer_guard=disallow",
                        "--run_eval", "--timeout=600", overrides=THREE_HOSTS,
                        devices=6),
  }


def _records(out: pathlib.Path) -> list[dict]:
  return [json.loads(l)
          for l in (out / "metrics.jsonl").read_text().splitlines()]


def groups(out: pathlib.Path) -> dict[str, list]:
  """Each prompt's agents, in agent order: [(completion, reward), ...] (the
  agentic learner scores each micro-batch's groups in one reward call)."""
  groups = {}
  for host in sorted((out / "rows").glob("rows_host*.jsonl")):
    for line in host.read_text().splitlines():
      call = json.loads(line)
      for prompt, completion, reward in zip(
          call["prompts"], call["completions"], call["rewards"]):
        groups.setdefault(prompt, []).append((completion, reward))
  return groups


@pytest.mark.multihost
@pytest.mark.e2e
def test_same_trajectories(runs):
  ref, got = groups(runs["tunix"][0]), groups(runs["mcjax"][0])
  assert len(ref) == BATCH * STEPS
  assert all(len(g) == GENERATIONS for g in ref.values())
  assert got == ref
  # Both hosts ran agents.
  assert len(list((runs["mcjax"][0] / "rows").glob("rows_host*"))) == 2
  # Not vacuous: some agents answered before their turn's budget ran out
  # (7 of 32 here; the others stopped at once or ran out), and rewards
  # differ within some group (non-zero advantages).
  assert sum(bool(c) for g in ref.values() for c, _ in g) >= 4
  assert any(len({r for _, r in g}) > 1 for g in ref.values())


@pytest.mark.multihost
@pytest.mark.e2e
def test_same_losses_rewards_and_parameters(runs):
  (ref, ref_proc), (got, got_proc) = runs["tunix"], runs["mcjax"]
  a, b = _records(ref), _records(got)
  assert [r["step"] for r in a] == [r["step"] for r in b] == [1, 2]
  assert {r["num_hosts"] for r in b} == {2}
  np.testing.assert_allclose([r["loss"] for r in b], [r["loss"] for r in a],
                             rtol=1e-6, atol=1e-6)
  # The records' reward is the agentic learner's trajectory_rewards/mean:
  # the environments' reward, 0 under the default TaskEnvironment (no
  # reward_fn); the reward functions' part is compared per agent above.
  np.testing.assert_allclose([r["reward_mean"] for r in b],
                             [r["reward_mean"] for r in a], rtol=1e-6)
  pa, pb = np.load(ref / "params.npz"), np.load(got / "params.npz")
  assert sorted(pa.files) == sorted(pb.files) and pa.files
  for name in pa.files:
    np.testing.assert_allclose(pb[name], pa[name], rtol=1e-6, atol=1e-6,
                               err_msg=name)
  # Not vacuous: the policy moved, and step 2's loss (with its KL to the
  # reference) is not 0.
  assert min(r["grad_norm"] for r in a) > 0
  assert abs(a[1]["loss"]) > 1e-6
  for out in (ref, got):
    assert not list((out / "cwd").iterdir())
  print(f"wall: tunix {ref_proc.wall_s:.0f} s, mcjax {got_proc.wall_s:.0f} s")


@pytest.mark.multihost
@pytest.mark.e2e
def test_disaggregated_on_policy_equals_colocated(runs):
  (col, _), (da, da_proc) = runs["mcjax"], runs["da"]
  assert "rollout hosts" in da_proc.stderr + da_proc.stdout
  # The start line names the staleness agentic mode defaults to.
  assert "max_staleness 0" in da_proc.stdout
  assert groups(da) == groups(col)
  assert len(list((da / "rows").glob("rows_host*"))) == 2
  # The same trainer mesh (2 hosts x 2 devices), one agent at a time: the
  # same numbers, bit for bit.
  a, b = _records(col), _records(da)
  assert [r["loss"] for r in b] == [r["loss"] for r in a]
  assert [(r["policy_version"], r["staleness"]) for r in b] == [(0, 0),
                                                                (1, 0)]
  pa, pb = np.load(col / "params.npz"), np.load(da / "params.npz")
  assert sorted(pa.files) == sorted(pb.files)
  for k in pa.files:
    np.testing.assert_array_equal(pb[k], pa[k], err_msg=k)


@pytest.mark.multihost
@pytest.mark.e2e
def test_three_hosts_equal_stock(runs):
  (ref, _), (got, _) = runs["tunix3"], runs["mcjax3"]
  assert groups(got) == groups(ref)
  # 6 training prompts a step (2 agents each), and the test split's 6
  # prompts evaluated before each step (2 passes x 2 agents, the same noise
  # each pass): every agent equal to stock's (above).
  sizes = sorted(len(g) for g in groups(ref).values())
  assert sizes == [GENERATIONS] * 6 * STEPS + [2 * GENERATIONS] * 6, sizes
  assert len(list((got / "rows").glob("rows_host*"))) == 3
  a, b = _records(ref), _records(got)
  assert {r["num_hosts"] for r in b} == {3}
  # Another device count than the stock run's: the gradient is summed in
  # another order (example_runs.DEVICE_COUNT_PARAM_TOLERANCE, as
  # tests/test_agentic_equivalence.py's 3-host runs).
  tol = example_runs.DEVICE_COUNT_PARAM_TOLERANCE
  np.testing.assert_allclose([r["loss"] for r in b], [r["loss"] for r in a],
                             **tol)
  pa, pb = np.load(ref / "params.npz"), np.load(got / "params.npz")
  assert sorted(pa.files) == sorted(pb.files) and pa.files
  for name in pa.files:
    np.testing.assert_allclose(pb[name], pa[name], err_msg=name, **tol)
  # Not vacuous: step 1 moved the policy (step 2 trained nothing here: loss
  # and gradient 0 in both runs).
  assert a[0]["grad_norm"] > 0 and a[0]["loss"] != 0


# --- in process: what mcjax refuses, before any host starts --------------------


@pytest.fixture
def agentic_pipeline(cli, agentic_base_config):
  """Parses the agentic base config with COLOCATED and `overrides`."""

  def make(*overrides: str, **option_kwargs):
    options = cli.CliOptions(**{"backend": "mcjax", **option_kwargs})
    argv = ["grpo_main", str(agentic_base_config),
            *base_config_fixture.COLOCATED, *overrides]
    return cli.GrpoCliPipeline(argv, options=options)

  return make


def test_agentic_config_passes(cli, agentic_pipeline):
  parsed = agentic_pipeline()
  assert parsed.agentic
  assert cli.check_mcjax_config(parsed, num_hosts=2) == 2


@pytest.mark.parametrize("flag", [None, 1])
def test_disaggregated_staleness_is_tunix_off_policy_steps(
    cli, agentic_pipeline, flag):
  parsed = agentic_pipeline("agentic_grpo_config.off_policy_steps=1",
                            backend="mcjax_da", max_staleness=flag)
  # mcjax_da's default staleness in agentic mode is the config's bound.
  assert parsed.off_policy_steps == 1
  assert parsed.options.staleness(off_policy_steps=1) == 1
  assert rules.agentic_job(parsed.config, backend="mcjax_da",
                           engine="native", max_staleness=1) == []


# Every override of rl_training_config replaces the whole section (a Tunix
# "replace key"), so these restate the keys the rule reads.
def _training(mini=8, micro=4, logps=4, *extra):
  return (f"rl_training_config.mini_batch_size={mini}",
          f"rl_training_config.train_micro_batch_size={micro}",
          *(() if logps is None else
            (f"rl_training_config.compute_logps_micro_batch_size={logps}",)),
          *extra)


@pytest.mark.parametrize("overrides, options, message", [
    # Under mcjax_da the staleness bound is Tunix's off_policy_steps (the
    # "da" run: 0 by default); a --max_staleness that disagrees is refused.
    ((), {"backend": "mcjax_da", "max_staleness": 1},
     "with --backend=mcjax_da, --max_staleness=1 and"
     " agentic_grpo_config.off_policy_steps=0 (Tunix's bound on agent turns'"
     " staleness): not supported by mcjax yet (docs/agentic.md); set"
     " off_policy_steps=1, or drop --max_staleness."),
    (("agentic_grpo_config.num_iterations=2",), {},
     "agentic_grpo_config.num_iterations=2"),
    # Colocated, the producer cannot run ahead.
    (("agentic_grpo_config.off_policy_steps=1",), {},
     "with agentic_grpo_config.off_policy_steps=1 on the colocated backend"),
    # Evaluation needs the log-probs on the main thread (2 per host).
    (_training(8, 2, 2), {"run_eval": True},
     "with --run_eval and rl_training_config.train_micro_batch_size=2 over"
     " 2 hosts"),
    (("actor_model_config.lora_config.rank=8",), {},
     "with actor_model_config.lora_config"),
    (_training(8, 4, 4,
               "rl_training_config.max_seq_token_per_tpu=600"), {},
     "rl_training_config.max_seq_token_per_tpu (sequence packing)"),
    # vLLM runs (tests/cli/test_cli_agentic_vllm.py); on TPU not yet.
    (("rollout_engine=sglang_jax",), {}, "engine 'sglang_jax'"),
    ((), {"engine": "vllm_tpu"}, "engine 'vllm_tpu'"),
    (_training(logps=2), {},
     "rl_training_config.compute_logps_micro_batch_size=4 (got 2)"),
    (_training(logps=None), {},
     "compute_logps_micro_batch_size=4 (got None)"),
    (("rollout_config.return_logprobs=false",), {},
     "needs rollout_config.return_logprobs=true"),
])
def test_agentic_combinations_mcjax_cannot_run(cli, agentic_pipeline,
                                               overrides, options, message):
  with pytest.raises(cli.ConfigError, match="cannot run with") as e:
    cli.check_mcjax_config(agentic_pipeline(*overrides, **options),
                           num_hosts=2)
  # One line, naming the mode and what to change.
  assert any(message in line and "training_mode=agentic_grpo" in line
             for line in str(e.value).splitlines()), str(e.value)


def test_agentic_micro_batch_of_one_prompt_per_host_is_accepted(
    cli, agentic_pipeline):
  # Tunix then computes log-probs on its rollout thread, which mcjax orders
  # (agent_turns.AgentTurns.order_logps; tests/test_agentic_equivalence.py).
  assert cli.check_mcjax_config(agentic_pipeline(*_training(8, 2, 2)),
                                num_hosts=2) == 2


def test_agentic_checkpoints_are_checked_like_grpo_ones(
    cli, agentic_pipeline, tmp_path, monkeypatch):
  # Resume is exact (tests/test_agentic_equivalence.py); a named root gets
  # the checks every root gets: --resume_step must name a checkpoint in it.
  root = tmp_path / "ckpt"
  parsed = agentic_pipeline(*_training(
      8, 4, 4, f"rl_training_config.checkpoint_root_directory={root}"))
  assert cli.check_mcjax_config(parsed, num_hosts=2) == 2
  with pytest.raises(cli.ConfigError,
                     match="--resume_step=2 needs rl_training_config"):
    cli.check_mcjax_config(agentic_pipeline(resume_step=2), num_hosts=2)
  # A null override of Tunix's base_agentic_config.yaml's "/tmp/ckpts" makes
  # the root "", and Tunix checkpoints into ./actor: fine until ./actor
  # holds a step, which the run would resume from.
  monkeypatch.chdir(tmp_path)
  parsed = agentic_pipeline()
  parsed.config["rl_training_config"]["checkpoint_root_directory"] = ""
  assert cli.check_mcjax_config(parsed, num_hosts=2) == 2
  (tmp_path / "actor" / "2").mkdir(parents=True)
  with pytest.raises(cli.ConfigError,
                     match=r"would resume from \./actor \(steps \[2\];"
                     r" Tunix checkpoints there\) without mcjax's checkpoint"
                     " checks"):
    cli.check_mcjax_config(parsed, num_hosts=2)


def test_other_training_modes_are_refused(cli, agentic_pipeline):
  with pytest.raises(cli.ConfigError,
                     match="training_mode='ppo': mcjax's CLI runs"
                     " training_mode=grpo or agentic_grpo"):
    cli.check_mcjax_config(agentic_pipeline("training_mode=ppo"),
                           num_hosts=2)


def test_agentic_generations_come_from_its_own_section(agentic_pipeline):
  # grpo_config (4 samples in the base config) is the standard mode's.
  parsed = agentic_pipeline("agentic_grpo_config.num_generations=3")
  assert parsed._num_generations == 3  # pylint: disable=protected-access
