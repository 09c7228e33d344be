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

"""The CLI reaches what the example reaches: O1-O4, engines by name.

* `--profile` and the O1-O4 switch flags parse and arrive in the mcjax
  cluster's `McJaxOptions`; they are refused with the tunix backend.
* A Tunix `rollout_engine` name mcjax cannot honour as Tunix means it
  ('vllm' is tpu-inference's vLLM in Tunix, PyTorch vLLM's name in mcjax) is
  refused before any host starts, naming the mcjax engine to pass instead;
  `--engine` names an mcjax engine explicitly.
* O3 with several micro-batches per update and a token-mean loss is refused
  (the update would not be the single controller's).
"""

import sys

from absl import flags
import pytest

import base_config_fixture
import launch_utils
import zygote


@pytest.fixture
def parsed_flags():
  """Parses command-line flags into absl's FLAGS; restores them after."""
  saved = flags.FLAGS.flag_values_dict()

  def parse(*args: str):
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["grpo_main", *args])

  yield parse
  flags.FLAGS.unparse_flags()
  for name, value in saved.items():
    flags.FLAGS[name].value = value


@pytest.mark.parametrize("args, expected", [
    (["--profile=base"],
     dict(async_metrics=False, freeze_gc=False, balance_admission=False,
          publish_in_one_call=False)),
    (["--profile=optimized", "--nofreeze_gc"],
     dict(async_metrics=True, freeze_gc=False, balance_admission=True,
          publish_in_one_call=True)),
    (["--async_metrics", "--balance_admission", "--nopublish_in_one_call"],
     dict(async_metrics=True, freeze_gc=False, balance_admission=True,
          publish_in_one_call=False)),
])
def test_o_switch_flags_reach_the_cluster_options(
    cli, pipeline, parsed_flags, args, expected):
  parsed_flags("--backend=mcjax", "--engine=native", *args)
  mcjax = pipeline(options=cli.options_from_flags()).mcjax_options()
  assert mcjax.optimizations.as_dict() == expected
  assert mcjax.engine == "native"


def test_transfer_guard_flag_reaches_the_cluster_options(
    cli, pipeline, parsed_flags):
  parsed_flags("--backend=mcjax", "--transfer_guard=disallow")
  mcjax = pipeline(options=cli.options_from_flags()).mcjax_options()
  assert mcjax.transfer_guard == "disallow"
  # The disaggregated mode's trainer hosts build their cluster from the same
  # options (cli.disaggregated.CliTask runs this pipeline).
  parsed_flags("--backend=mcjax_da", "--transfer_guard=disallow")
  da = pipeline(options=cli.options_from_flags()).mcjax_options()
  assert da.transfer_guard == "disallow"
  parsed_flags("--backend=tunix", "--transfer_guard=log")
  with pytest.raises(cli.ConfigError, match="--transfer_guard applies to"):
    cli.options_from_flags()


def test_mcjax_flags_are_refused_with_the_tunix_backend(cli, parsed_flags):
  parsed_flags("--backend=tunix", "--profile=optimized", "--engine=vllm")
  with pytest.raises(cli.ConfigError,
                     match="--engine, --profile apply to --backend=mcjax"):
    cli.options_from_flags()


def test_tunix_engine_names_are_refused_with_the_fix(cli, pipeline):
  with pytest.raises(cli.ConfigError, match="cannot run with") as e:
    cli.check_mcjax_config(
        pipeline("rollout_engine=sglang_jax"), num_hosts=2)
  assert "rollout_engine='sglang_jax'" in str(e.value)
  assert "rollout_engine=vanilla" in str(e.value)


def test_tunix_vllm_is_the_host_local_vllm_of_the_platform(cli, pipeline):
  # Tunix's disaggregated recipes say rollout_engine=vllm: one flag, no
  # rewrite. Here (no accelerator) it is PyTorch vLLM, whose keys and GPU
  # share are checked before any host starts.
  assert cli.check_mcjax_config(
      pipeline("rollout_engine=vllm"), num_hosts=2) == 2
  with pytest.raises(cli.ConfigError,
                     match="rollout_vllm_logprobs_mode='raw_logprobs'"):
    cli.check_mcjax_config(
        pipeline("rollout_engine=vllm",
                 "rollout_config.rollout_vllm_logprobs_mode=raw_logprobs"),
        num_hosts=2)


def test_a_da_rollout_host_s_vllm_config_needs_no_mesh(cli, base_config):
  # Under mcjax_da a rollout host (and the launching process, for the JAX
  # share of a GPU) builds Tunix's rollout config with no global mesh;
  # Tunix's vllm_config (the vLLM recipe's section) becomes its
  # rollout_vllm_* keys there, and the GPU split follows hbm_utilization.
  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.cli import disaggregated
  from tunix_mcjax.da import launcher
  # pylint: enable=g-import-not-at-top

  argv = ("grpo_main", str(base_config), *base_config_fixture.COLOCATED,
          "rollout_engine=vllm", "vllm_config.hbm_utilization=0.3",
          "vllm_config.async_scheduling=false")
  source = disaggregated.CliSource(
      argv=argv, options=cli.CliOptions(backend="mcjax_da"))
  assert source.engine == "vllm"
  config = source.rollout_config()
  assert config.rollout_vllm_hbm_utilization == 0.3
  assert config.rollout_vllm_async_scheduling is False
  assert launcher.engine_memory_env(source) == {
      "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.65"}
  # --engine_tp reaches the rollout hosts' engines (vLLM's too).
  assert source.engine_tp == 1
  assert disaggregated.CliSource(
      argv=argv, options=cli.CliOptions(backend="mcjax_da", engine_tp=2)
  ).engine_tp == 2


def test_engine_flag_names_an_mcjax_engine(cli, pipeline):
  # Explicit: rollout_engine is then not read in Tunix's meaning.
  assert cli.check_mcjax_config(
      pipeline("rollout_engine=vllm", engine="vllm"),
      num_hosts=2) == 2
  with pytest.raises(cli.ConfigError, match="--engine='sglang' is not an"):
    cli.check_mcjax_config(pipeline(engine="sglang"),
                           num_hosts=2)


def test_balanced_admission_refuses_token_mean_accumulation(cli, pipeline):
  accumulate = ("rl_training_config.mini_batch_size=8",
                "rl_training_config.train_micro_batch_size=4")
  with pytest.raises(cli.ConfigError, match="grpo_config.loss_agg_mode="
                     "'token-mean' with balance_admission"):
    cli.check_mcjax_config(
        pipeline(*accumulate,
                  "grpo_config.loss_agg_mode=token-mean",
                  balance_admission=True),
        num_hosts=2)
  # Row-normalised (Tunix's default) stays exact: accepted.
  assert cli.check_mcjax_config(
      pipeline(*accumulate, balance_admission=True),
      num_hosts=2) == 2


def test_balanced_admission_refuses_several_updates_per_batch(cli, pipeline):
  # Admission would refuse it on every host; the CLI refuses it first.
  with pytest.raises(cli.ConfigError, match="balance_admission \\(O3\\) with"
                     " rl_training_config.mini_batch_size=4 < batch_size=8"):
    cli.check_mcjax_config(
        pipeline("rl_training_config.mini_batch_size=4",
                 "rl_training_config.train_micro_batch_size=4",
                 balance_admission=True),
        num_hosts=2)
  assert cli.check_mcjax_config(
      pipeline("rl_training_config.mini_batch_size=4",
               "rl_training_config.train_micro_batch_size=4"),
      num_hosts=2) == 2


def test_tunix_vllm_keys_are_refused_before_hosts_start(base_config):
  # rollout_engine=vllm is the host-local vLLM (PyTorch here); a Tunix key
  # it does not take ends the command before any host starts.
  env = launch_utils.launcher_env({"JAX_PLATFORMS": "cpu"})
  env["TUNIX_BASE_CONFIG"] = str(base_config)
  proc = zygote.run(
      [sys.executable, "-m", "tunix_mcjax.cli.grpo_main", "base_config.yaml",
       *base_config_fixture.COLOCATED, "rollout_engine=vllm",
       "rollout_config.rollout_vllm_logprobs_mode=raw_logprobs",
       "--backend=mcjax", "--num_hosts=2"],
      env=env, capture_output=True, text=True, timeout=180,
  )
  out = proc.stdout + proc.stderr
  assert proc.returncode == 2, out[-3000:]
  assert ("rollout_config.rollout_vllm_logprobs_mode='raw_logprobs': log-probs"
          " are those of the temperature-scaled distribution") in out
  assert "[launch]" not in out and "[host" not in out


# --- --mesh: the trainer mesh, chosen before any host starts -----------------


@pytest.fixture
def checkpoint_dims(tmp_path):
  """A local checkpoint directory whose config.json gives the widths of the
  example's tiny model (embed 64: does not divide over 6 devices)."""
  (tmp_path / "config.json").write_text(
      '{"hidden_size": 64, "intermediate_size": 128,'
      ' "num_attention_heads": 4, "num_key_value_heads": 2,'
      ' "vocab_size": 96}')
  return (f"model_config.model_id={tmp_path}", "model_config.mesh.shape=(6,1)",
          "batch_size=6", "rl_training_config.mini_batch_size=6",
          "rl_training_config.train_micro_batch_size=6")


def test_mesh_that_cannot_work_is_refused_naming_a_fix(cli, pipeline,
                                                       checkpoint_dims):
  with pytest.raises(cli.ConfigError, match="cannot run with") as e:
    cli.check_mcjax_config(pipeline(*checkpoint_dims, mesh="fsdp"),
                           num_hosts=3)
  message = str(e.value)
  assert "embed_dim=64 does not divide over the 6 devices" in message
  assert "--mesh=hsdp (hsdp mesh data=3 x fsdp=2 x tp=1)" in message
  # A 3-axis (data, fsdp, tp) actor mesh is hsdp: --mesh=fsdp contradicts it.
  with pytest.raises(cli.ConfigError, match="--mesh=fsdp but"):
    cli.check_mcjax_config(
        pipeline(*checkpoint_dims, "model_config.mesh.shape=(3,2,1)",
                 "model_config.mesh.axis_names=('data','fsdp','tp')",
                 mesh="fsdp"),
        num_hosts=3)


def test_mesh_auto_picks_hsdp_when_fsdp_does_not_divide(cli, pipeline,
                                                        checkpoint_dims):
  for mesh in (None, "auto", "hsdp"):
    parsed = pipeline(*checkpoint_dims, mesh=mesh)
    assert cli.check_mcjax_config(parsed, num_hosts=3) == 2
    choice = parsed.mesh_choice(num_hosts=3, devices_per_host=2)
    assert (choice.kind, choice.shape) == ("hsdp", (3, 2, 1))
    assert choice.axis_names == ("data", "fsdp", "tp")
    assert choice.batch_axes == ("data", "fsdp")
    assert (choice.reason is not None) == (mesh != "hsdp")
  # fsdp divides on 2 hosts x 2 devices: auto keeps it.
  parsed = pipeline(*checkpoint_dims, "model_config.mesh.shape=(4,1)")
  choice = parsed.mesh_choice(num_hosts=2, devices_per_host=2)
  assert (choice.kind, choice.shape, choice.axis_names) == (
      "fsdp", (4, 1), ("fsdp", "tp"))
  # A hub model: widths unknown before start, so auto keeps the config's.
  assert pipeline().mesh_choice(num_hosts=2, devices_per_host=2).kind == (
      "fsdp")


@pytest.mark.parametrize("mesh, axes", [("hsdp", ("data", "fsdp")),
                                         ("fsdp", ("fsdp",))])
def test_hsdp_splits_the_batch_over_hosts_and_their_devices(
    cli, pipeline, mesh, axes):
  """Tunix's default data_sharding_axis ("fsdp",) would ask every host for
  every row on an hsdp mesh: the cluster config gets ("data", "fsdp")."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import compat  # pylint: disable=g-import-not-at-top

  parsed = pipeline("rl_training_config.eval_every_n_steps=1",
                    "rl_training_config.actor_optimizer_config.opt_type=sgd",
                    "rl_training_config.actor_optimizer_config.learning_rate"
                    "=0.05", mesh=mesh)
  choice = parsed.mesh_choice(num_hosts=2, devices_per_host=2)
  # What create_role_to_mesh builds on the hosts, on this process's devices.
  grid = jax.sharding.Mesh(
      np.array(jax.devices()[:4]).reshape(choice.shape), choice.axis_names)
  parsed._mesh_choice = choice  # pylint: disable=protected-access
  config = parsed.create_cluster_config(role_to_mesh={
      r: grid for r in (compat.Role.ACTOR, compat.Role.REFERENCE,
                        compat.Role.ROLLOUT)})
  assert tuple(config.training_config.data_sharding_axis) == axes


def test_mesh_flag_is_mcjax_only_and_checked(cli):
  with pytest.raises(cli.ConfigError, match="--mesh apply to --backend=mcjax"):
    cli.CliOptions(backend="tunix", mesh="hsdp")
  with pytest.raises(cli.ConfigError, match="--mesh='2d' is not one of"):
    cli.CliOptions(backend="mcjax", mesh="2d")


def test_missing_local_inputs_are_refused_before_any_host_starts(
    cli, pipeline, tmp_path):
  with pytest.raises(cli.ConfigError, match="cannot run with") as e:
    cli.check_mcjax_config(
        pipeline("data_source=huggingface",
                 f"dataset_name={tmp_path}/no_such_data"),
        num_hosts=2)
  assert f"dataset_name='{tmp_path}/no_such_data' does not exist" in str(
      e.value)
  from tunix_mcjax.cli import data  # pylint: disable=g-import-not-at-top

  (problem,) = data.missing_local_inputs(
      {"data_source": "local", "data_directory": str(tmp_path / "nope")})
  assert problem.startswith("data_directory=") and "does not exist" in problem
  assert data.missing_local_inputs(
      {"data_source": "local", "data_directory": str(tmp_path)}) == []
  # A hub dataset name is Tunix's to resolve: not a local path.
  assert cli.check_mcjax_config(
      pipeline("data_source=huggingface", "dataset_name=openai/gsm8k"),
      num_hosts=2) == 2


def test_missing_model_and_tokenizer_paths_are_refused(cli, pipeline,
                                                       tmp_path):
  model, tok = tmp_path / "no_model", tmp_path / "no_tokenizer"
  with pytest.raises(cli.ConfigError, match="cannot run with") as e:
    cli.check_mcjax_config(
        pipeline(f"model_config.model_id={model}",
                 f"tokenizer_config.tokenizer_path={tok}"),
        num_hosts=2)
  message = str(e.value)
  # Inherited by every role, named once.
  assert message.count("does not exist") == 2, message
  assert f"model_config.model_id='{model}' does not exist" in message
  assert f"tokenizer_config.tokenizer_path='{tok}' does not exist" in message
  # A role's own local checkpoint is checked too; a hub id is Tunix's.
  from tunix_mcjax.cli import data  # pylint: disable=g-import-not-at-top

  (problem,) = data.missing_local_inputs(
      {"model_config": {"model_id": "Qwen/Qwen3-0.6B"},
       "reference_model_config": {"model_id": f"{model}"}})
  assert problem.startswith("reference_model_config.model_id=")
  tok.mkdir()
  assert cli.check_mcjax_config(
      pipeline("model_config.model_id=Qwen/Qwen3-0.6B",
               f"tokenizer_config.tokenizer_path={tok}"),
      num_hosts=2) == 2
