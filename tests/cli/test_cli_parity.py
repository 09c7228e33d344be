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

import pathlib
import subprocess
import sys

from absl import flags
import pytest

import base_config_fixture
import launch_utils

COLOCATED = [
    "model_config.model_name=qwen3-0.6b",
    "model_config.model_id=/models/qwen3-0.6b",
    "model_config.mesh.shape=(4,1)",
    "reference_model_config.mesh=null",
    "reference_model_config.same_mesh_as=actor",
    "rollout_model_config.mesh=null",
    "rollout_model_config.same_mesh_as=actor",
    "tokenizer_config.tokenizer_path=/models/qwen3-0.6b",
    "batch_size=8",
]


@pytest.fixture(scope="module")
def cli():
  from tunix_mcjax.cli import grpo_main  # pylint: disable=g-import-not-at-top

  return grpo_main


@pytest.fixture(scope="module")
def base_config(tmp_path_factory) -> pathlib.Path:
  return base_config_fixture.write(
      tmp_path_factory.mktemp("cli_parity") / "base_config.yaml")


def _pipeline(cli, base_config, *overrides, **options):
  argv = ["grpo_main", str(base_config), *COLOCATED, *overrides]
  return cli.GrpoCliPipeline(
      argv, options=cli.CliOptions(backend="mcjax", **options))


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
    cli, base_config, parsed_flags, args, expected):
  parsed_flags("--backend=mcjax", "--engine=native", *args)
  options = cli.options_from_flags()
  pipeline = cli.GrpoCliPipeline(
      ["grpo_main", str(base_config), *COLOCATED], options=options)
  mcjax = pipeline.mcjax_options()
  assert mcjax.optimizations.as_dict() == expected
  assert mcjax.engine == "native"


def test_mcjax_flags_are_refused_with_the_tunix_backend(cli, parsed_flags):
  parsed_flags("--backend=tunix", "--profile=optimized", "--engine=vllm")
  with pytest.raises(cli.ConfigError,
                     match="--engine, --profile apply to --backend=mcjax"):
    cli.options_from_flags()


@pytest.mark.parametrize("engine, fix", [
    ("vllm", "'vllm_tpu' (host-local tpu-inference vLLM"),
    ("sglang_jax", "rollout_engine=vanilla"),
])
def test_tunix_engine_names_are_refused_with_the_fix(cli, base_config,
                                                     engine, fix):
  with pytest.raises(cli.ConfigError, match="cannot run with") as e:
    cli.check_mcjax_config(
        _pipeline(cli, base_config, f"rollout_engine={engine}"), num_hosts=2)
  assert f"rollout_engine={engine!r}" in str(e.value)
  assert fix in str(e.value)


def test_engine_flag_names_an_mcjax_engine(cli, base_config):
  # Explicit: rollout_engine is then not read in Tunix's meaning.
  assert cli.check_mcjax_config(
      _pipeline(cli, base_config, "rollout_engine=vllm", engine="vllm"),
      num_hosts=2) == 2
  with pytest.raises(cli.ConfigError, match="--engine='sglang' is not an"):
    cli.check_mcjax_config(_pipeline(cli, base_config, engine="sglang"),
                           num_hosts=2)


def test_balanced_admission_refuses_token_mean_accumulation(cli, base_config):
  accumulate = ("rl_training_config.mini_batch_size=8",
                "rl_training_config.train_micro_batch_size=4")
  with pytest.raises(cli.ConfigError, match="grpo_config.loss_agg_mode="
                     "'token-mean' with balance_admission"):
    cli.check_mcjax_config(
        _pipeline(cli, base_config, *accumulate,
                  "grpo_config.loss_agg_mode=token-mean",
                  balance_admission=True),
        num_hosts=2)
  # Row-normalised (Tunix's default) stays exact: accepted.
  assert cli.check_mcjax_config(
      _pipeline(cli, base_config, *accumulate, balance_admission=True),
      num_hosts=2) == 2


def test_tunix_vllm_name_is_refused_before_hosts_start(base_config):
  env = launch_utils.launcher_env({"JAX_PLATFORMS": "cpu"})
  env["TUNIX_BASE_CONFIG"] = str(base_config)
  proc = subprocess.run(
      [sys.executable, "-m", "tunix_mcjax.cli.grpo_main", "base_config.yaml",
       *COLOCATED, "rollout_engine=vllm", "--backend=mcjax", "--num_hosts=2"],
      env=env, capture_output=True, text=True, timeout=180,
  )
  out = proc.stdout + proc.stderr
  assert proc.returncode == 2, out[-3000:]
  assert "rollout_engine='vllm': in Tunix this is tpu-inference's vLLM" in out
  assert "--engine" in out
  assert "[launch]" not in out and "[host" not in out
