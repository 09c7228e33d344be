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

"""The host program of tests/test_cluster.py (run by path on 2 hosts).

Builds mcjax clusters on the global mesh: refused configurations (disjoint
meshes, indivisible batch knobs, unsupported options, hosts interleaved
along the batch axis), a live cluster (rows per host, evaluation without an
admitted set, Tunix's fixes while it is open) and one on a mesh whose hosts
each list their devices in reverse. Prints per host a `RESULT {...}` line.
"""

import json

from tunix_mcjax import runtime


def main() -> None:
  runtime.initialize()
  # pylint: disable=g-import-not-at-top
  import jax
  import numpy as np
  import optax
  from tunix.rl import utils as rl_utils
  from tunix.rl.rollout import base_rollout
  import tunix_mcjax
  from tunix_mcjax import compat
  from tunix_mcjax import global_rows
  from tunix_mcjax.recipes import models
  # pylint: enable=g-import-not-at-top

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
  stock_fn = compat.tunix_is_sharing_weights
  patches = {"after_refusals": rl_utils.is_sharing_weights is stock_fn}

  cluster = tunix_mcjax.create_rl_cluster(
      "mcjax", actor=actor, tokenizer=models.ToyTokenizer(),
      cluster_config=config(training={"mini_batch_size": 4}))
  per_host = cluster.cluster_config.training_config.mini_batch_size
  # pylint: disable=protected-access
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
  # One publication: the engine then holds only the published arrays, not
  # also the initial copy it started from (a whole engine copy per host).
  embedding_shape = actor.embedder.input_embedding.value.shape

  def engine_embeddings():
    local = {d.id for d in lm.devices.flat}
    return sum(1 for x in jax.live_arrays()
               if x.shape == embedding_shape and x.is_fully_addressable
               and {d.id for d in x.sharding.device_set} == local)

  engine_copies = {"before": engine_embeddings()}
  cluster.sync_weights()
  engine_copies["after"] = engine_embeddings()
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
  # pylint: enable=protected-access
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
      engine_copies=engine_copies,
      local_ok=bool(
          (rows == jax.process_index()).all() and rows.shape == (4, 5)),
  )), flush=True)


if __name__ == "__main__":
  main()
