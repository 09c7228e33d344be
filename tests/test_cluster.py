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

import textwrap
import types

import jax.numpy as jnp
import launch_utils
import pytest

import tunix_mcjax

_SCRIPT = textwrap.dedent("""
    import dataclasses, json
    import jax
    import numpy as np
    from tunix_mcjax import runtime
    runtime.initialize()
    import optax
    from tunix.rl.rollout import base_rollout
    import tunix_mcjax
    from tunix_mcjax import compat
    from tunix_mcjax import global_rows
    from tunix_mcjax.recipes import models

    gm, lm = runtime.global_mesh(), runtime.local_mesh()
    # The same devices in other orders: each host's block reversed (a
    # topology order may differ from ids), and hosts interleaved.
    by_host = [[d for d in gm.devices.flat if d.process_index == h]
               for h in range(jax.process_count())]
    reordered = jax.sharding.Mesh(np.array(
        [d for block in by_host for d in reversed(block)]).reshape(-1, 1),
        ("fsdp", "tp"))
    interleaved = jax.sharding.Mesh(np.array(
        [d for pair in zip(*by_host) for d in pair]).reshape(-1, 1),
        ("fsdp", "tp"))
    actor = models.create_tiny_model(models.tiny_qwen3_config(), seed=0,
                                     mesh=gm)

    def config(**kw):
      tc = dict(actor_optimizer=optax.sgd(1e-3), eval_every_n_steps=10,
                max_steps=1)
      tc.update(kw.pop("training", {}))
      roles = kw.pop("roles", {compat.Role.ACTOR: gm, compat.Role.ROLLOUT: gm,
                               compat.Role.REFERENCE: gm})
      return compat.ClusterConfig(
          role_to_mesh=roles, training_config=compat.RLTrainingConfig(**tc),
          rollout_config=base_rollout.RolloutConfig(
              max_tokens_to_generate=4, max_prompt_length=4), **kw)

    cases = {
        "disjoint": dict(roles={compat.Role.ACTOR: gm,
                                compat.Role.ROLLOUT: lm,
                                compat.Role.REFERENCE: gm}),
        "indivisible": dict(training={"mini_batch_size": 3}),
        "offload": dict(offload_to_cpu=True),
        "packing": dict(training={"max_seq_token_per_tpu": 0}),
        "interleaved": dict(roles={r: interleaved for r in (
            compat.Role.ACTOR, compat.Role.ROLLOUT, compat.Role.REFERENCE)}),
    }
    errors = {}
    for name, kw in cases.items():
      try:
        tunix_mcjax.create_rl_cluster(
            "mcjax", actor=actor, tokenizer=models.ToyTokenizer(),
            cluster_config=config(**kw))
        errors[name] = None
      except (ValueError, NotImplementedError) as e:
        errors[name] = str(e)
    from tunix.rl import utils as rl_utils
    stock_fn = compat.tunix_is_sharing_weights
    patches = {"after_refusals": rl_utils.is_sharing_weights is stock_fn}

    cluster = tunix_mcjax.create_rl_cluster(
        "mcjax", actor=actor, tokenizer=models.ToyTokenizer(),
        cluster_config=config(training={"mini_batch_size": 4}))
    per_host = cluster.cluster_config.training_config.mini_batch_size
    try:
      cluster._to_global(np.zeros((3, 5), np.int32))
      errors["rows"] = None
    except ValueError as e:
      errors["rows"] = str(e)
    try:
      # No evaluation set was admitted: no row may borrow a training id.
      cluster.generate(["a"], mode=compat.Mode.EVAL)
      errors["eval"] = None
    except RuntimeError as e:
      errors["eval"] = str(e)
    g = cluster._to_global(np.full((4, 5), jax.process_index()))
    rows = np.asarray(global_rows.local_rows_on_device(g))
    patches["while_open"] = rl_utils.is_sharing_weights is stock_fn
    cluster.close()
    # Accepted: every host's rows still land on its own block of the batch.
    other = tunix_mcjax.create_rl_cluster(
        "mcjax", actor=actor, tokenizer=models.ToyTokenizer(),
        cluster_config=config(training={"mini_batch_size": 4},
                              roles={r: reordered for r in (
                                  compat.Role.ACTOR, compat.Role.ROLLOUT,
                                  compat.Role.REFERENCE)}))
    mine = np.arange(20, dtype=np.int32).reshape(4, 5) + 100 * jax.process_index()
    g2 = other._to_global(mine)
    reordered_ok = bool(
        (np.asarray(global_rows.local_rows_on_device(g2)) == mine).all()
        and g2.shape == (8, 5)
        and all((np.asarray(s.data) // 100 == jax.process_index()).all()
                for s in g2.addressable_shards))
    other.close()
    patches["after_close"] = rl_utils.is_sharing_weights is stock_fn
    print("RESULT " + json.dumps(dict(
        host=jax.process_index(), errors=errors, per_host=per_host,
        stock_is_sharing_weights=patches,
        global_shape=list(g.shape), reordered_ok=reordered_ok,
        local_ok=bool(
            (rows == jax.process_index()).all() and rows.shape == (4, 5)),
    )), flush=True)
""")


@pytest.fixture(scope="module")
def two_host_results(tmp_path_factory):
  return launch_utils.run_script_on_hosts(
      _SCRIPT, tmp_path_factory.mktemp("cluster"))


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
