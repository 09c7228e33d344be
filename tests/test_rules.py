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

"""The mcjax support rules (tunix_mcjax/rules/), as plain unit tests.

The same rules run in the cluster (tests/test_cluster.py, two hosts) and in
the CLI (tests/cli/test_grpo_main.py); here each rule on its own, the CLI's
view on a plain config mapping, and the cluster's view on one process.
"""

import pathlib
import subprocess
import sys
import types

import pytest

from tunix_mcjax import rules

# Fails if importing the modules named imports any of the packages named.
_LIGHT_IMPORTS = (pathlib.Path(__file__).resolve().parent / "support" /
                  "light_imports.py")


def _training(**kw):
  fields = dict(
      mini_batch_size=None, train_micro_batch_size=None,
      rollout_micro_batch_size=None, compute_logps_micro_batch_size=None,
      data_sharding_axis=("fsdp",), max_seq_token_per_tpu=None)
  fields.update(kw)
  return types.SimpleNamespace(**fields)


def test_importing_support_starts_no_jax():
  subprocess.run([sys.executable, str(_LIGHT_IMPORTS), "jax",
                  "tunix_mcjax.rules"], check=True)


def test_problem_validation():
  with pytest.raises(ValueError, match="message"):
    rules.Problem(message="")
  with pytest.raises(TypeError, match="exception type"):
    rules.Problem(message="x", error=str)
  with pytest.raises(NotImplementedError, match="^x$"):
    rules.Problem(message="x", error=NotImplementedError).raise_()


def test_each_rule_passes_what_mcjax_runs():
  assert rules.training_mode("grpo") is None
  assert rules.training_mode("agentic_grpo") is None
  assert rules.rollout_engine("vanilla", ["native"]) is None
  assert rules.rollout_engine("native", ["native"]) is None
  assert rules.lora_engine("vllm", False) is None
  assert rules.lora_engine("native", True) is None
  assert rules.lora_settings(8, 16.0, rules.DEFAULT_LORA_MODULES) is None
  assert rules.offload_to_cpu(False) is None
  assert rules.data_sharding_axes(("fsdp",), ("fsdp", "tp")) is None
  assert rules.global_batch("batch_size", 8, 4) is None
  assert rules.global_batch("batch_size", None, 3) is None
  assert rules.sequence_packing(None) is None
  assert rules.sequence_packing(64, loss_agg_mode="token-mean") is None
  assert rules.mesh_layout((4, 1), num_hosts=2, devices_per_host=None) == (
      2, None)


@pytest.mark.parametrize("problem, error, message", [
    (lambda: rules.training_mode("ppo"), NotImplementedError,
     "training_mode='ppo': mcjax's CLI runs training_mode=grpo or"
     " agentic_grpo"),
    (lambda: rules.rollout_engine("sglang_jax", ["native", "vllm"]),
     ValueError, "rollout_engine='sglang_jax': mcjax has no host-local"
     " SGLang-JAX engine; set rollout_engine=vanilla"),
    (lambda: rules.unsupported_role("critic_model_config"),
     NotImplementedError, "critic_model_config is set"),
    (lambda: rules.lora_engine("other", True), NotImplementedError,
     "engine='other' with a LoRA actor"),
    (lambda: rules.lora_settings(0, 8, ".*q_proj"), ValueError,
     "rank=0: a LoRA rank must be an integer >= 1"),
    (lambda: rules.lora_settings(8, 8, ".*nothing"), ValueError,
     "module_path='.*nothing' matches no module"),
    (lambda: rules.offload_to_cpu(True), ValueError,
     "offload_to_cpu is not supported by mcjax"),
    (lambda: rules.disjoint_role("rollout", cause="C", fix="F."),
     ValueError, "C; mcjax is colocated"),
    (lambda: rules.data_sharding_axes(("dp",), ("fsdp", "tp")), ValueError,
     "data_sharding_axis=['dp'] names axes ['dp'] missing"),
    (lambda: rules.global_batch("x.mini_batch_size", 3, 2), ValueError,
     "x.mini_batch_size=3 is global and must divide over 2 hosts; use a"
     " multiple of 2."),
    (lambda: rules.sequence_packing(
        64, loss_agg_mode="sequence-mean-token-mean"), NotImplementedError,
     "max_seq_token_per_tpu (sequence packing) with"
     " loss_agg_mode='sequence-mean-token-mean'"),
])
def test_each_rule_names_the_problem_and_the_fix(problem, error, message):
  p = problem()
  assert p.error is error
  assert message in p.message


@pytest.mark.parametrize("shape, hosts, devices, expected, message", [
    ((8,), 2, None, None, "needs a 2-axis (fsdp, tp) mesh"),
    ((3, 1), 2, None, None, "has 3 devices, which do not divide over 2 hosts"),
    ((4, 1), 2, 4, 4, "has 4 devices but the job has 2 hosts x 4 devices"),
    ((1, 4), 4, None, 1, "tp=4 must divide the 1 devices of a host"),
])
def test_mesh_layout(shape, hosts, devices, expected, message):
  got, problem = rules.mesh_layout(
      shape, num_hosts=hosts, devices_per_host=devices)
  assert got == expected
  assert message in problem.message


def test_per_host_training_config_divides_global_knobs():
  tc = _training(mini_batch_size=8, train_micro_batch_size=4)
  local = rules.per_host_training_config(tc, 4)
  assert (local.mini_batch_size, local.train_micro_batch_size) == (2, 1)
  assert local.rollout_micro_batch_size is None
  assert tc.mini_batch_size == 8  # A copy: the job's config is unchanged.
  with pytest.raises(ValueError,
                     match=r"training_config.mini_batch_size=8 is global and"
                     r" must divide over 3 hosts"):
    rules.per_host_training_config(tc, 3)


COLOCATED = {
    "batch_size": 8,
    "rl_training_config": {"mini_batch_size": 8},
    "actor_model_config": {"mesh": {"shape": "(4,1)"}},
}


def _check(config, **kw):
  args = dict(num_hosts=2, devices_per_host=None, engine_names=["native"],
              mesh_shape=(4, 1), mesh_axis_names=("fsdp", "tp"))
  args.update(kw)
  return rules.check_job(config, **args)


def test_check_job_passes_a_colocated_config():
  check = _check(COLOCATED)
  assert check == rules.JobCheck(devices_per_host=2, problems=())
  assert _check(COLOCATED, num_hosts=4).devices_per_host == 1
  # Without a parsed mesh there is nothing to derive the devices from.
  assert _check(COLOCATED, mesh_shape=None).devices_per_host is None


def test_check_job_lists_every_problem():
  config = {
      **COLOCATED,
      "training_mode": "ppo",
      "rollout_engine": "sglang_jax",
      "offload_to_cpu": True,
      "critic_model_config": {},
      "reward_model_config": {},
      "batch_size": 6,
      "actor_model_config": {"lora_config": {"rank": 8}},
      "rl_training_config": {
          "mini_batch_size": 3, "data_sharding_axis": ["dp"],
          "max_seq_token_per_tpu": 64},
  }
  check = _check(
      config, num_hosts=4,
      separate_roles=[("reference", "reference_model_config")])
  expected = [
      "training_mode='ppo'",
      "rollout_engine='sglang_jax'",
      "offload_to_cpu",
      "critic_model_config is set",
      "reward_model_config is set",
      "actor_model_config.lora_config.alpha=None: LoRA alpha must be",
      "engine='sglang_jax' with a LoRA actor",
      "reference_model_config.mesh gives the reference role its own devices",
      "Set reference_model_config.mesh=null"
      " reference_model_config.same_mesh_as=actor.",
      "rl_training_config.data_sharding_axis=['dp']",
      "batch_size=6 is global and must divide over 4 hosts",
      "rl_training_config.mini_batch_size=3 is global",
      "rl_training_config.max_seq_token_per_tpu (sequence packing)",
  ]
  text = "\n".join(check.problems)
  for message in expected:
    assert message in text
  assert len(check.problems) == 12


def test_cluster_and_cli_state_a_shared_rule_alike():
  cli = _check({**COLOCATED, "batch_size": 6}, num_hosts=4).problems
  with pytest.raises(ValueError) as e:
    rules.per_host_training_config(_training(mini_batch_size=6), 4)
  assert cli == ("batch_size=6 is global and must divide over 4 hosts; use a"
                 " multiple of 4.",)
  assert str(e.value) == ("training_config.mini_batch_size=6 is global and"
                          " must divide over 4 hosts; use a multiple of 4.")


# --- the cluster's view, one process ------------------------------------------


@pytest.fixture(scope="module")
def cluster_inputs():
  import jax  # pylint: disable=g-import-not-at-top
  from flax import nnx  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import compat  # pylint: disable=g-import-not-at-top

  devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
  mesh = jax.sharding.Mesh(
      np.array(devices).reshape(len(devices), 1), ("fsdp", "tp"))
  other = jax.sharding.Mesh(
      np.array(devices[::-1]).reshape(len(devices), 1), ("fsdp", "tp"))
  part = jax.sharding.Mesh(np.array(devices[:2]).reshape(2, 1), ("fsdp", "tp"))
  actor = nnx.Linear(2, 2, rngs=nnx.Rngs(0))

  def config(roles=None, offload=False, **training):
    roles = roles or {compat.Role.ACTOR: mesh, compat.Role.ROLLOUT: mesh}
    return types.SimpleNamespace(
        role_to_mesh=roles, offload_to_cpu=offload,
        training_config=_training(**training))

  return types.SimpleNamespace(
      mesh=mesh, other=other, part=part, actor=actor, config=config,
      Role=compat.Role)


def test_check_cluster_passes_a_colocated_cluster(cluster_inputs):
  c = cluster_inputs
  rules.check_cluster(actor=c.actor, critic=None, reward=None,
                        cluster_config=c.config())
  # One host: any order of its devices is one block (tests/test_meshes.py
  # has the multi-host orders).
  rules.check_cluster(actor=c.actor, critic=None, reward=None,
                        cluster_config=c.config(roles={c.Role.ACTOR: c.other}))


def test_check_cluster_refuses(cluster_inputs):
  c = cluster_inputs
  cases = [
      (dict(critic=object()), NotImplementedError, "a critic model is set"),
      (dict(actor=object()), TypeError, "nnx.Module"),
      (dict(cluster_config=c.config(offload=True)), ValueError,
       "offload_to_cpu"),
      (dict(cluster_config=c.config(roles={c.Role.ROLLOUT: c.mesh})),
       ValueError, "needs an ACTOR mesh"),
      (dict(cluster_config=c.config(
          roles={c.Role.ACTOR: c.mesh, c.Role.REFERENCE: c.other})),
       ValueError, "reference role a mesh other than the actor's; mcjax is"
       " colocated"),
      (dict(cluster_config=c.config(
          roles={c.Role.ACTOR: c.part})), ValueError,
       "span every device of every host once"),
      (dict(cluster_config=c.config(data_sharding_axis=("dp",))), ValueError,
       "data_sharding_axis=['dp']"),
      (dict(cluster_config=c.config(max_seq_token_per_tpu=0)),
       ValueError, "max_seq_token_per_tpu=0 must be a positive number"),
  ]
  for overrides, error, message in cases:
    kw = dict(actor=c.actor, critic=None, reward=None,
              cluster_config=c.config())
    kw.update(overrides)
    with pytest.raises(error) as e:
      rules.check_cluster(**kw)
    assert message in str(e.value), (overrides, str(e.value))
