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

"""Hybrid sharding (hsdp): any host count.

The tiny model's 64-wide embedding does not divide over 3 hosts x 2 devices
of plain FSDP; hsdp (data = hosts, fsdp = a host's devices) does. The
equivalence run is the shared `three_host_runs` (tests/conftest.py: LoRA
rank 4 and micro 3 < mini 6 < batch 12, also the 3-host LoRA and gradient
accumulation tests): mcjax on 3 hosts x 2 devices with hsdp (chosen by
--mesh=auto) against stock Tunix on 1 process x 2 devices (plain fsdp).

Tolerance: completions and rewards exact; losses within the usual 1e-6;
parameters within atol = 1e-4, rtol = 1e-5 (HSDP_PARAM_TOLERANCE). That is
the float summation order of the gradient reduction over a different number
of devices, not hsdp: two STOCK runs of the full-weight job on 1 x 2 and
1 x 4 devices differ by 2.0e-5 (54 entries); Adam's g / sqrt(v) amplifies
the order change in near-zero gradient entries (a step moves up to 1e-2).
Observed on CPU: full weights without accumulation, max |diff| 3.4e-5 in 78
of ~70k entries; this run (LoRA: only the adapters train), 1.1e-6 in 1 of
83k entries, the frozen base equal.
"""

import json
import sys

import numpy as np
import pytest

from tunix_mcjax import rules
from tunix_mcjax.recipes import grpo_job

import example_runs
import launch_utils
import zygote

HSDP_PARAM_TOLERANCE = example_runs.DEVICE_COUNT_PARAM_TOLERANCE


# --- the mesh choice (no devices) ---------------------------------------------


def test_auto_picks_hsdp_when_fsdp_does_not_divide():
  choice, problem = rules.choose_mesh(
      grpo_job.TINY_DIMS, num_hosts=3, devices_per_host=2)
  assert problem is None
  assert choice.kind == "hsdp" and choice.shape == (3, 2, 1)
  assert choice.axis_names == ("data", "fsdp", "tp")
  assert choice.batch_axes == ("data", "fsdp")
  assert "embed_dim=64" in choice.reason


def test_auto_keeps_fsdp_when_it_divides():
  choice, problem = rules.choose_mesh(
      grpo_job.TINY_DIMS, num_hosts=2, devices_per_host=2)
  assert problem is None and choice.kind == "fsdp" and choice.reason is None
  assert choice.shape == (4, 1)


@pytest.mark.parametrize("hidden,hosts", [(1024, 3), (2048, 6), (2048, 12)])
def test_real_widths_on_odd_host_counts(hidden, hosts):
  dims = dict(embed_dim=hidden, hidden_dim=3 * hidden, num_heads=16,
              num_kv_heads=8)
  _, problem = rules.choose_mesh(dims, num_hosts=hosts, devices_per_host=4,
                                   mesh="fsdp")
  assert f"embed_dim={hidden}" in problem.message
  assert "--mesh=hsdp" in problem.message
  choice, problem = rules.choose_mesh(dims, num_hosts=hosts,
                                        devices_per_host=4)
  assert problem is None and choice.kind == "hsdp"


def test_a_mesh_that_cannot_work_names_the_dimension_and_a_fix():
  _, problem = rules.choose_mesh(grpo_job.TINY_DIMS, num_hosts=3,
                                   devices_per_host=2, mesh="fsdp")
  assert "embed_dim=64" in problem.message
  assert "--mesh=hsdp (hsdp mesh data=3 x fsdp=2 x tp=1)" in problem.message
  _, problem = rules.choose_mesh(grpo_job.TINY_DIMS, num_hosts=3,
                                   devices_per_host=3)
  assert "embed_dim=64" in problem.message and "no fsdp/hsdp mesh" in (
      problem.message)
  _, problem = rules.choose_mesh(grpo_job.TINY_DIMS, num_hosts=2,
                                   devices_per_host=2, tp=3)
  assert "tp=3" in problem.message
  _, problem = rules.choose_mesh({}, num_hosts=2, devices_per_host=2,
                                   mesh="2d")
  assert "mesh='2d'" in problem.message


def test_batch_axes_reads_both_forms():
  assert rules.batch_axes(("fsdp",)) == ("fsdp",)
  assert rules.batch_axes((("data", "fsdp"),)) == ("data", "fsdp")
  assert rules.data_sharding_axes((("data", "fsdp"),), ("fsdp", "tp"))


def test_per_host_config_gives_tunix_the_batch_axes():
  import types  # pylint: disable=g-import-not-at-top
  tc = types.SimpleNamespace(
      **{k: None for k in rules.GLOBAL_BATCH_KNOBS},
      data_sharding_axis=("data", "fsdp"))
  local = rules.per_host_training_config(tc, 3)
  # Tunix's shard_input builds PartitionSpec(*axis): batch over both axes.
  assert local.data_sharding_axis == (("data", "fsdp"),)
  assert tc.data_sharding_axis == ("data", "fsdp")
  tc.data_sharding_axis = ("fsdp",)
  assert rules.per_host_training_config(tc, 3).data_sharding_axis == (
      "fsdp",)


def test_cli_three_axis_mesh_is_hsdp():
  # actor_model_config.mesh.shape=(data, fsdp, tp), data = hosts.
  assert rules.mesh_layout((3, 2, 1), num_hosts=3,
                             devices_per_host=None) == (2, None)
  _, problem = rules.mesh_layout((2, 3, 1), num_hosts=3,
                                   devices_per_host=None)
  assert "data axis must equal the 3 hosts" in problem.message
  _, problem = rules.mesh_layout((3, 2, 1), num_hosts=3,
                                   devices_per_host=4)
  assert "must equal the 4 devices of a host" in problem.message


def test_cli_pipeline_accepts_an_hsdp_mesh(tmp_path):
  import base_config_fixture  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.cli import grpo_main as cli  # pylint: disable=g-import-not-at-top

  base = base_config_fixture.write(tmp_path / "base_config.yaml")
  argv = [
      "grpo_main", str(base),
      "model_config.model_name=qwen3-0.6b",
      f"model_config.model_id={base_config_fixture.MODEL_ID}",
      "model_config.mesh.shape=(3,2,1)",
      "model_config.mesh.axis_names=('data','fsdp','tp')",
      "reference_model_config.mesh=null",
      "reference_model_config.same_mesh_as=actor",
      "rollout_model_config.mesh=null",
      "rollout_model_config.same_mesh_as=actor",
      f"tokenizer_config.tokenizer_path={base_config_fixture.TOKENIZER_DIR}",
      "batch_size=6",
      "rl_training_config.data_sharding_axis=['data','fsdp']",
  ]
  make = lambda *extra: cli.GrpoCliPipeline(
      [*argv, *extra], options=cli.CliOptions(backend="mcjax"))
  assert cli.check_mcjax_config(make(), num_hosts=3) == 2
  with pytest.raises(cli.ConfigError, match="data axis must equal the 2"):
    cli.check_mcjax_config(make("batch_size=4"), num_hosts=2)


def test_tiny_dims_match_the_tiny_model():
  from tunix_mcjax.recipes import models  # pylint: disable=g-import-not-at-top
  cfg = models.tiny_qwen3_config()
  assert grpo_job.TINY_DIMS == {k: getattr(cfg, k) for k in grpo_job.TINY_DIMS}


def test_example_refuses_before_hosts_start(tmp_path):
  proc = zygote.run(
      [sys.executable, str(example_runs.EXAMPLE), "--backend=mcjax",
       "--num_hosts=3", "--devices_per_host=2", "--mesh=fsdp",
       "--batch_size=6", f"--dump_dir={tmp_path}"],
      env=launch_utils.launcher_env(), capture_output=True, text=True,
      timeout=120,
  )
  assert proc.returncode == 2, proc.stderr[-2000:]
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and "embed_dim=64" in lines[0], proc.stderr
  assert "--mesh=hsdp" in lines[0]
  assert not list(tmp_path.iterdir())  # No host ran.


# --- the equivalence run --------------------------------------------------------


@pytest.mark.multihost
@pytest.mark.e2e
def test_hsdp_three_hosts_equals_stock(three_host_runs):
  ref, got = three_host_runs["tunix"], three_host_runs["mcjax"]
  example_runs.assert_same_rollouts_and_rewards(
      ref, got, calls=2 * example_runs.THREE_HOST_CALLS_PER_STEP, group=2)
  # A global micro-batch: 3 prompts x 2 samples, one prompt from each host.
  assert len(example_runs.read_rollouts(got)[0]["prompts"]) == 3 * 2
  assert len(list(got.glob("rollouts_host*.json"))) == 3
  a = json.loads((ref / "records.json").read_text())
  b = json.loads((got / "records.json").read_text())
  np.testing.assert_allclose([r["loss"] for r in b], [r["loss"] for r in a],
                             rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose([r["reward_mean"] for r in b],
                             [r["reward_mean"] for r in a], rtol=1e-6)
  pa, pb = np.load(ref / "params.npz"), np.load(got / "params.npz")
  assert sorted(pa.files) == sorted(pb.files)
  for k in pa.files:
    np.testing.assert_allclose(pb[k], pa[k], err_msg=k,
                               **HSDP_PARAM_TOLERANCE)
  example_runs.assert_parameters_moved(got)
