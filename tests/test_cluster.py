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
    from tunix_mcjax.recipes import models

    gm, lm = runtime.global_mesh(), runtime.local_mesh()
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
        "packing": dict(training={"max_seq_token_per_tpu": 64}),
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

    cluster = tunix_mcjax.create_rl_cluster(
        "mcjax", actor=actor, tokenizer=models.ToyTokenizer(),
        cluster_config=config(training={"mini_batch_size": 4}))
    per_host = cluster.cluster_config.training_config.mini_batch_size
    try:
      cluster._to_global(np.zeros((3, 5), np.int32))
      errors["rows"] = None
    except ValueError as e:
      errors["rows"] = str(e)
    g = cluster._to_global(np.full((4, 5), jax.process_index()))
    rows = cluster._local_rows(g)
    print("RESULT " + json.dumps(dict(
        host=jax.process_index(), errors=errors, per_host=per_host,
        global_shape=list(g.shape), local_ok=bool(
            (rows == jax.process_index()).all() and rows.shape == (4, 5)),
    )), flush=True)
""")


@pytest.fixture(scope="module")
def two_host_results(tmp_path_factory):
  return launch_utils.run_script_on_hosts(
      _SCRIPT, tmp_path_factory.mktemp("cluster"))


def test_disjoint_meshes_are_refused(two_host_results):
  for rec in two_host_results.values():
    assert "colocated" in rec["errors"]["disjoint"]


def test_global_batch_knobs_must_divide_over_hosts(two_host_results):
  for rec in two_host_results.values():
    assert "mini_batch_size=3" in rec["errors"]["indivisible"]
    assert "2 hosts" in rec["errors"]["indivisible"]
    assert rec["per_host"] == 2  # Global 4 over 2 hosts.


def test_unsupported_options_are_refused(two_host_results):
  for rec in two_host_results.values():
    assert "offload_to_cpu" in rec["errors"]["offload"]
    assert "max_seq_token_per_tpu" in rec["errors"]["packing"]


def test_rows_must_divide_over_local_devices(two_host_results):
  for rec in two_host_results.values():
    # Tunix would silently replicate here; mcjax refuses.
    assert "3 rows" in rec["errors"]["rows"]
    assert rec["global_shape"] == [8, 5]
    assert rec["local_ok"]


def test_unknown_backend_lists_the_choices():
  with pytest.raises(ValueError, match=r"Unknown cluster backend 'pathways'.*"
                     r"\['mcjax', 'tunix'\]"):
    tunix_mcjax.create_rl_cluster("pathways")


def test_backends_are_discoverable_as_entry_points():
  import importlib.metadata  # pylint: disable=g-import-not-at-top

  names = {ep.name for ep in importlib.metadata.entry_points(
      group="tunix.rl_cluster_backends")}
  assert {"tunix", "mcjax"} <= names
