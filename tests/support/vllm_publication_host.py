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

"""The host program of tests/engines/test_vllm_multihost.py (run by path on
2 hosts, where vLLM is installed).

Runs one GRPO step of a tiny model under the mcjax cluster with this host's
vLLM engine and prints a `RESULT {...}` line: the engine's and the trainer's
log-probs of fixed tokens before and after the step, the publication's
statistics on both sides, and the errors of mismatched publications.
"""

import json

from tunix_mcjax import runtime


def main() -> None:
  info = runtime.initialize()
  # pylint: disable=g-import-not-at-top
  from flax import nnx
  import jax.numpy as jnp
  import numpy as np
  import optax
  from tunix.rl.grpo import grpo_learner
  from tunix.rl.rollout import base_rollout
  import tunix_mcjax
  from tunix_mcjax import cluster as cluster_lib
  from tunix_mcjax import compat
  from tunix_mcjax.recipes import models
  from tunix_mcjax.recipes import tasks
  import engine_probe
  # pylint: enable=g-import-not-at-top

  gm = runtime.global_mesh()
  cfg = models.tiny_qwen3_config(head_dim=32)
  actor = models.create_tiny_model(cfg, seed=4, mesh=gm)
  roles = {compat.Role.ACTOR: gm, compat.Role.ROLLOUT: gm,
           compat.Role.REFERENCE: gm}
  cluster = tunix_mcjax.create_rl_cluster(
      "mcjax", actor=actor, reference=None,
      tokenizer=models.ToyTokenizer(),
      cluster_config=compat.ClusterConfig(
          role_to_mesh=roles, rollout_engine="vllm",
          training_config=compat.RLTrainingConfig(
              actor_optimizer=optax.adam(3e-2), eval_every_n_steps=10**9,
              max_steps=1),
          rollout_config=base_rollout.RolloutConfig(
              max_tokens_to_generate=6, max_prompt_length=4,
              kv_cache_size=16, temperature=1.0, top_p=1.0, seed=0)),
      options=cluster_lib.McJaxOptions(engine="vllm", sampling_seed=0,
                                       log_progress=False))
  engine = cluster.rollout

  # Fixed tokens, different on each host, through this host's engine and
  # the trainer's global model.
  h = info.process_index
  probe = engine_probe.LogpsProbe(cluster, gm)
  before_engine, before_trainer = probe.engine(), probe.trainer()
  batches, rewards = tasks.dataset_from_spec(
      "toy", batch_size=4, num_batches=1, seed=1)
  learner = grpo_learner.GRPOLearner(
      rl_cluster=cluster,
      algo_config=grpo_learner.GRPOConfig(num_generations=4,
                                          num_iterations=1, beta=0.0),
      reward_fns=rewards)
  learner.train(cluster.shard_dataset(batches, num_generations=4))
  after_engine, after_trainer = probe.engine(), probe.trainer()

  # Mismatches fail on every host before any collective, naming the
  # parameter.
  errors = {}
  missing = nnx.state(cluster.actor_trainer.model, nnx.Param)
  del missing["layers"][0]["attn"]["v_proj"]
  try:
    cluster.publisher(missing)
  except KeyError as e:
    errors["missing"] = str(e)
  wrong = nnx.state(cluster.actor_trainer.model, nnx.Param)
  wrong["final_norm"]["w"] = nnx.Param(jnp.zeros((3,)))
  try:
    cluster.publisher(wrong)
  except ValueError as e:
    errors["shape"] = str(e)
  pub, eng = cluster.publisher.last_stats, engine.last_update_stats
  out = dict(
      host=h, steps=len(cluster.step_records),
      init_diff=float(np.abs(before_engine - before_trainer).max()),
      after_diff=float(np.abs(after_engine - after_trainer).max()),
      trainer_change=float(np.abs(after_trainer - before_trainer).max()),
      engine_change=float(np.abs(after_engine - before_engine).max()),
      publication=dict(bytes=pub.bytes, seconds=pub.seconds),
      engine_update=dict(bytes=eng.bytes, seconds=eng.seconds,
                         reload_seconds=eng.reload_seconds,
                         num_tensors=eng.num_tensors),
      errors=errors)
  print("RESULT " + json.dumps(out), flush=True)
  cluster.close()


if __name__ == "__main__":
  main()
