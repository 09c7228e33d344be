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

"""McJaxRLCluster configuration checks and the backend registry."""

import pathlib
import types

import jax.numpy as jnp
import launch_utils
import pytest

import tunix_mcjax

# Runs on each of 2 hosts; prints the host's RESULT record.
_PROGRAM = pathlib.Path(__file__).resolve().parent / "support" / (
    "cluster_checks_host.py")


@pytest.fixture(scope="module")
def two_host_results():
  return launch_utils.run_on_hosts(_PROGRAM)


@pytest.mark.multihost
def test_disjoint_meshes_are_refused(two_host_results):
  for rec in two_host_results.values():
    assert "colocated" in rec["errors"]["disjoint"]


@pytest.mark.multihost
def test_global_batch_knobs_must_divide_over_hosts(two_host_results):
  for rec in two_host_results.values():
    assert "mini_batch_size=3" in rec["errors"]["indivisible"]
    assert "2 hosts" in rec["errors"]["indivisible"]
    assert rec["per_host"] == 2  # Global 4 over 2 hosts.


@pytest.mark.multihost
def test_mesh_orders_within_hosts_are_accepted_interleaved_hosts_refused(
    two_host_results):
  for rec in two_host_results.values():
    # Each host's devices reversed inside its block (as a topology order may
    # differ from ids): the cluster starts and each host's rows land in its
    # block. Hosts alternating along the batch axis: refused with the fix.
    assert rec["reordered_ok"]
    assert "hosts run 0 x1, 1 x1, 0 x1, 1 x1" in rec["errors"]["interleaved"]
    assert "runtime.global_mesh()" in rec["errors"]["interleaved"]


@pytest.mark.multihost
def test_a_publication_leaves_one_engine_copy(two_host_results):
  # The initial copy the engine started from is released once a publication
  # replaced it (it used to stay alive through the engine factory).
  for rec in two_host_results.values():
    assert rec["engine_copies"] == {"before": 1, "after": 1}, rec["engine_copies"]


@pytest.mark.multihost
def test_unsupported_options_are_refused(two_host_results):
  for rec in two_host_results.values():
    assert "offload_to_cpu" in rec["errors"]["offload"]
    assert "max_seq_token_per_tpu" in rec["errors"]["packing"]


@pytest.mark.multihost
def test_rows_must_divide_over_local_devices(two_host_results):
  for rec in two_host_results.values():
    # Tunix would silently replicate here; mcjax refuses.
    assert "3 rows" in rec["errors"]["rows"]
    assert rec["global_shape"] == [8, 5]
    assert rec["local_ok"]


@pytest.mark.multihost
def test_eval_generation_does_not_take_training_row_ids(two_host_results):
  for rec in two_host_results.values():
    assert "shard_eval_dataset" in rec["errors"]["eval"]


@pytest.mark.multihost
def test_tunix_fixes_live_exactly_as_long_as_the_cluster(two_host_results):
  for rec in two_host_results.values():
    # A refused cluster leaves Tunix as it was; a live one patches it until
    # close().
    assert rec["stock_is_sharing_weights"] == {
        "after_refusals": True, "while_open": False, "after_close": True}


def test_backend_factory_gives_maxtext_actors_an_engine_model(monkeypatch):
  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import backends
  from tunix_mcjax import cluster as cluster_lib
  from tunix_mcjax.engines import base as engine_base
  from tunix_mcjax.maxtext import models as maxtext_models
  # pylint: enable=g-import-not-at-top

  class TunixMaxTextAdapter:  # Named like MaxText's adapter.
    base = types.SimpleNamespace(config=types.SimpleNamespace(
        weight_dtype="bfloat16"))

  seen = []

  def spec(config, dtype):
    seen.append((config, dtype))
    return engine_base.EngineModelSpec(create=dict, mapping=dict)

  monkeypatch.setattr(maxtext_models, "engine_model_spec", spec)
  monkeypatch.setattr(cluster_lib, "McJaxRLCluster",
                      lambda **kw: kw["options"])
  options = backends.create_mcjax_cluster(actor=TunixMaxTextAdapter())
  assert isinstance(options.engine_model, engine_base.EngineModelSpec)
  assert seen == [(TunixMaxTextAdapter.base.config, jnp.dtype("bfloat16"))]
  # An actor that can sample itself keeps the options as given.
  given = cluster_lib.McJaxOptions(log_progress=False)
  assert backends.create_mcjax_cluster(actor=object(), options=given) is given


def test_unknown_backend_lists_the_choices():
  with pytest.raises(ValueError, match=r"Unknown cluster backend 'pathways'.*"
                     r"\['mcjax', 'mcjax_da', 'tunix'\]"):
    tunix_mcjax.create_rl_cluster("pathways")


def test_backends_are_discoverable_as_entry_points():
  import importlib.metadata  # pylint: disable=g-import-not-at-top

  names = {ep.name for ep in importlib.metadata.entry_points(
      group="tunix.rl_cluster_backends")}
  assert {"tunix", "mcjax", "mcjax_da"} <= names
