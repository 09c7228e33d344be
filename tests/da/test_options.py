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

"""DaOptions, the disaggregated rules and the job's refusals."""

import re

import pytest

from tunix_mcjax.da import options
from tunix_mcjax.recipes import grpo_job
from tunix_mcjax.recipes import validation


def test_rollout_hosts_are_dealt_to_trainer_hosts():
  opts = options.DaOptions(trainer_hosts=2, rollout_hosts=4)
  assert opts.rollout_actor_names(0) == [
      "mcjax_da_rollout_0", "mcjax_da_rollout_1"]
  assert opts.rollout_actor_names(1) == [
      "mcjax_da_rollout_2", "mcjax_da_rollout_3"]


@pytest.mark.parametrize("kwargs, message", [
    (dict(trainer_hosts=0), "trainer_hosts must be"),
    (dict(trainer_hosts=2, rollout_hosts=3), "multiple of trainer_hosts"),
    (dict(max_staleness=-1), "max_staleness must be"),
    (dict(is_cap=0.5), "is_cap must be >= 1"),
    (dict(timeout_s=0), "timeout_s must be"),
    (dict(namespace=""), "namespace must be"),
    (dict(namespace="two words"), "namespace must be"),
    (dict(namespace="_ray_x"), "namespace must be"),
    (dict(namespace="x" * 129), "namespace must be"),
])
def test_bad_values_are_refused(kwargs, message):
  with pytest.raises(ValueError, match=message):
    options.DaOptions(**kwargs)


def test_each_launch_gets_a_namespace_of_its_own():
  names = {options.job_namespace() for _ in range(50)}
  assert len(names) == 50
  pattern = r"^tunix_mcjax_da_\d{8}_\d{6}_\d+_[0-9a-f]{8}$"
  for name in names:
    assert re.search(pattern, name), name
    assert options.check_namespace(name) == name
    assert options.placement_group_name(name) == f"{name}_hosts"


def test_the_namespace_is_unset_unless_given():
  assert options.DaOptions().namespace is None
  assert options.DaOptions(namespace="team.a-1").namespace == "team.a-1"
  # The actor names are the same in every namespace.
  assert (options.DaOptions(namespace="a").rollout_actor_names(0)
          == options.DaOptions().rollout_actor_names(0))


def test_the_job_configs_leave_it_to_the_launcher():
  cfg = grpo_job.GrpoJobConfig(backend="mcjax_da")
  assert cfg.da_options().namespace is None


def test_job_config_validates_its_da_options():
  with pytest.raises(ValueError, match="multiple of trainer_hosts"):
    grpo_job.GrpoJobConfig(backend="mcjax_da", trainer_hosts=2,
                           rollout_hosts=3)
  cfg = grpo_job.GrpoJobConfig(backend="mcjax_da", max_staleness=0)
  assert cfg.da_options().max_staleness == 0


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_iterations=2), "num_iterations=1"),
    (dict(engine="vllm_tpu"), "rollout hosts run"),
    (dict(batch_size=6, trainer_hosts=4, rollout_hosts=4),
     "does not divide over --trainer_hosts"),
])
def test_unsupported_settings_are_refused_before_hosts_start(kwargs, message):
  cfg = grpo_job.GrpoJobConfig(backend="mcjax_da", **kwargs)
  with pytest.raises(validation.InputError, match=message):
    grpo_job.check_job(cfg, num_hosts=cfg.trainer_hosts, devices_per_host=2)


def test_checkpoints_are_accepted_and_fingerprint_the_staleness(tmp_path):
  cfg = grpo_job.GrpoJobConfig(backend="mcjax_da", batch_size=4,
                               checkpoint_dir=str(tmp_path / "ckpt"),
                               max_staleness=2, is_cap=3.0)
  grpo_job.check_job(cfg, num_hosts=1, devices_per_host=2)
  fingerprint = cfg.checkpoint_fingerprint()
  assert (fingerprint["max_staleness"], fingerprint["is_cap"]) == (2, 3.0)
  # A colocated run's checkpoint has no such keys (a K = 0 DA run may
  # resume it: the same numbers).
  colocated = grpo_job.GrpoJobConfig(backend="mcjax", batch_size=4)
  assert "max_staleness" not in colocated.checkpoint_fingerprint()


@pytest.mark.parametrize("mini", [4, 2])
def test_micro_batches_and_several_updates_per_batch_are_accepted(mini):
  # Gradient accumulation (2 micro-batches per update), with one or two
  # optimizer updates per batch.
  cfg = grpo_job.GrpoJobConfig(backend="mcjax_da", batch_size=4,
                               mini_batch_size=mini, micro_batch_size=1)
  grpo_job.check_job(cfg, num_hosts=1, devices_per_host=2)


@pytest.mark.parametrize("engine", ["native", "vllm"])
def test_a_supported_job_passes(engine):
  cfg = grpo_job.GrpoJobConfig(backend="mcjax_da", batch_size=4,
                               engine=engine)
  grpo_job.check_job(cfg, num_hosts=1, devices_per_host=2)
