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

"""The host program of tests/test_publication.py (run by path on 2 hosts).

Perturbs the FSDP-sharded parameters of a tiny model, publishes them into
this host's native engine and prints a `RESULT {...}` line: whether the
engine's parameters and logits equal the gathered trainer's (also when the
publication does not wait for the gather), the publication's statistics,
and the errors of mismatched publications.
"""

import json

from tunix_mcjax import runtime


def main() -> None:
  info = runtime.initialize()
  # pylint: disable=g-import-not-at-top
  from flax import nnx
  import jax
  from jax.experimental import multihost_utils
  import jax.numpy as jnp
  import numpy as np
  from tunix.rl import common
  from tunix.rl.rollout import base_rollout
  from tunix_mcjax import publication
  from tunix_mcjax.engines import base as engines_base
  from tunix_mcjax.engines import native
  from tunix_mcjax.recipes import models
  # pylint: enable=g-import-not-at-top

  gm, lm = runtime.global_mesh(), runtime.local_mesh()
  cfg = models.tiny_qwen3_config()
  actor = models.create_tiny_model(cfg, seed=7, mesh=gm)
  graphdef, full = nnx.split(actor)
  init = publication.Publisher(
      dst=publication.replicated_like(full, lm), local_mesh=lm)
  engine = native.NativeEngine(
      tokenizer=models.ToyTokenizer(),
      rollout_config=base_rollout.RolloutConfig(
          max_tokens_to_generate=4, max_prompt_length=4),
      context=engines_base.EngineContext(
          engine_mesh=lm, initial_model=nnx.merge(graphdef, init(full)),
          row_ids=engines_base.CounterRowIds()))

  tokens = np.array([[1, 5, 6, 7, 8, 9], [1, 9, 8, 7, 6, 5]], np.int32)
  prompt, completion = tokens[:, :3], tokens[:, 3:]

  def engine_logits():
    g, s = nnx.split(engine.model())
    with engines_base.use_mesh(lm):
      _, logits = common.compute_per_token_logps(
          g, s, jnp.asarray(prompt), jnp.asarray(completion), 0, 2,
          return_logits=True)
    return np.asarray(logits)

  def trainer_logits():
    g, s = nnx.split(actor)
    rep = jax.sharding.NamedSharding(gm, jax.sharding.PartitionSpec())
    with gm:
      _, logits = common.compute_per_token_logps(
          g, s, jax.make_array_from_process_local_data(rep, prompt),
          jax.make_array_from_process_local_data(rep, completion), 0, 2,
          return_logits=True)
    return np.asarray(multihost_utils.process_allgather(logits, tiled=True))

  before = engine_logits()
  params = nnx.state(actor, nnx.Param)
  shardings = jax.tree.map(lambda x: x.sharding, params)
  bumped = jax.jit(
      lambda p: jax.tree.map(lambda x: x + 0.05 * jnp.cos(3.0 * x), p),
      out_shardings=shardings)(params)
  nnx.update(actor, bumped)

  pub = publication.Publisher(
      dst=nnx.state(engine.model(), nnx.Param), local_mesh=lm)
  engine.update_params(pub(nnx.state(actor, nnx.Param)))

  gathered = multihost_utils.process_allgather(
      nnx.state(actor, nnx.Param), tiled=True)
  flat_t = {jax.tree_util.keystr(p): np.asarray(v) for p, v in
            jax.tree_util.tree_flatten_with_path(gathered)[0]}
  flat_e = {jax.tree_util.keystr(p): v for p, v in
            jax.tree_util.tree_flatten_with_path(
                nnx.state(engine.model(), nnx.Param))[0]}
  sharded = sum(1 for x in jax.tree.leaves(params)
                if not x.sharding.is_fully_replicated)
  on_local = all(set(v.sharding.device_set) == set(lm.devices.flat)
                 for v in flat_e.values())
  param_diff = max(float(np.abs(np.asarray(flat_e[k]) - flat_t[k]).max())
                   for k in flat_t)
  after, ref = engine_logits(), trainer_logits()

  # A training step's publication does not wait for the gather: the
  # engine's next program reads the new weights all the same.
  nnx.update(actor, jax.jit(
      lambda p: jax.tree.map(lambda x: x - 0.03 * jnp.sin(x), p),
      out_shardings=shardings)(nnx.state(actor, nnx.Param)))
  engine.update_params(pub(nnx.state(actor, nnx.Param), wait=False))
  no_wait_diff = float(np.abs(engine_logits() - trainer_logits()).max())

  errors = {}
  rep = jax.sharding.NamedSharding(lm, jax.sharding.PartitionSpec())

  def sds(shape):
    return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=rep)

  two = publication.Publisher(
      dst={"wq": sds((3, 3)), "wk": sds((3, 3))}, local_mesh=lm)
  try:
    two({"wq": np.zeros((3, 3), np.float32)})
  except KeyError as e:
    errors["missing"] = str(e)
  try:
    two({"wq": np.zeros((3, 3), np.float32),
         "wk": np.zeros((2, 3), np.float32)})
  except ValueError as e:
    errors["shape"] = str(e)
  out = dict(
      host=info.process_index, names_equal=sorted(flat_e) == sorted(flat_t),
      num_sharded=sharded, on_local=on_local, param_diff=param_diff,
      logit_diff=float(np.abs(after - ref).max()),
      logit_change=float(np.abs(after - before).max()),
      no_wait_diff=no_wait_diff,
      stats=dict(num=pub.last_stats.num_params, bytes=pub.last_stats.bytes,
                 seconds=pub.last_stats.seconds),
      expected_bytes=int(sum(v.nbytes for v in flat_t.values())),
      errors=errors)
  print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
  main()
