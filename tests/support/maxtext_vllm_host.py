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

"""The host program of tests/maxtext/test_maxtext_vllm.py (run by path on 2
hosts, where maxtext and vLLM import together).

Per MaxText layer layout (scanned, unscanned): one GRPO step of a tiny
MaxText Qwen3 (FSDP over both hosts) under the mcjax cluster with this
host's vLLM engine, then greedy decoding by vLLM and by the native engine
on the same parameters, log-probs of fixed tokens by the engine and the
actor, and how the step's publication ran (gather programs, reloads, KV
cache). Prints per host one `RESULT {...}` line with a record per layout.
"""

import contextlib
import dataclasses
import json

from tunix_mcjax import runtime


def main() -> None:
  info = runtime.initialize()
  # pylint: disable=g-import-not-at-top
  from flax import nnx
  from flax.linen import partitioning as nn_partitioning
  import jax
  import numpy as np
  import optax
  from tunix.rl.grpo import grpo_learner
  from tunix.rl.rollout import base_rollout
  import tunix_mcjax
  from tunix_mcjax import cluster as cluster_lib
  from tunix_mcjax import compat
  from tunix_mcjax import publication
  from tunix_mcjax.engines import base as engine_base
  from tunix_mcjax.engines import native
  from tunix_mcjax.maxtext import models as mm
  from tunix_mcjax.recipes import models
  from tunix_mcjax.recipes import tasks
  import engine_probe
  # pylint: enable=g-import-not-at-top
  # pylint: disable=protected-access

  h = info.process_index
  tok = models.ToyTokenizer(models.PRINTABLE_ALPHABET)
  greedy = base_rollout.RolloutConfig(
      max_tokens_to_generate=10, max_prompt_length=12, temperature=0.0,
      top_p=None, return_logprobs=True, kv_cache_size=32)
  # Each host probes its own prompts.
  prompts = [["2+2=", "hello", "a", "The cat sat"],
             ["x:", "12*3=?", "zz", "ok!"]][h]

  def peaked(actor, seed):
    # Norm scales near 1, every other weight N(0, 0.3): peaked next-token
    # distributions (greedy far from ties). Same values on every host.
    rng = np.random.default_rng(seed)

    def f(path, x):
      noise = rng.standard_normal(x.shape).astype(np.float32)
      name = jax.tree_util.keystr(path)
      v = 1.0 + 0.03 * noise if "scale" in name else 0.3 * noise
      return jax.make_array_from_callback(x.shape, x.sharding,
                                          lambda idx: v[idx])

    state = nnx.state(actor, nnx.Param)
    nnx.update(actor, jax.tree_util.tree_map_with_path(f, state))

  def kv_ptrs(engine):
    runner = engine._worker.model_runner
    caches = getattr(runner, "kv_caches", None)
    return [int(t.data_ptr()) for t in jax.tree.leaves(
        caches, is_leaf=lambda t: hasattr(t, "data_ptr"))]

  out = dict(host=h)
  for layout in ("scanned", "unscanned"):
    cfg = mm.maxtext_config(
        overrides={**mm.TINY_QWEN3_OVERRIDES, "head_dim": 32},
        scan_layers=layout == "scanned", vocab_size=tok.vocab_size)
    mesh = mm.maxtext_mesh(cfg)
    actor = mm.create_actor(cfg, mesh, pad_id=tok.pad_id(), rng_seed=4)
    peaked(actor, seed=7)
    rules = mm.logical_axis_rules(cfg)
    roles = {compat.Role.ACTOR: mesh, compat.Role.ROLLOUT: mesh,
             compat.Role.REFERENCE: mesh}
    cluster = tunix_mcjax.create_rl_cluster(
        "mcjax", actor=actor, reference=None, tokenizer=tok,
        cluster_config=compat.ClusterConfig(
            role_to_mesh=roles,
            role_to_logical_axis_rule={compat.Role.ACTOR: rules},
            rollout_engine="vllm",
            training_config=compat.RLTrainingConfig(
                actor_optimizer=optax.adam(3e-2), eval_every_n_steps=10**9,
                max_steps=1),
            rollout_config=base_rollout.RolloutConfig(
                max_tokens_to_generate=6, max_prompt_length=12,
                kv_cache_size=32, temperature=1.0, top_p=1.0, seed=0)),
        options=cluster_lib.McJaxOptions(engine="vllm", sampling_seed=0,
                                         log_progress=False))
    engine = cluster.rollout
    spec = cluster.options.engine_model

    @contextlib.contextmanager
    def maxtext_scope(mesh=mesh, rules=rules):
      with jax.set_mesh(mesh), nn_partitioning.axis_rules(rules):
        yield

    # Fixed tokens, different on each host, through this host's engine
    # and the trainer's global (FSDP) model.
    probe = engine_probe.LogpsProbe(
        cluster, mesh, pad_id=tok.pad_id(), eos_id=tok.eos_id(),
        scope=maxtext_scope)

    def greedy_trainer_logps(generated, probe=probe):
      # The actor's log-probs of an engine's greedy completions.
      n = greedy.max_tokens_to_generate
      c = np.full((len(generated.tokens), n), tok.pad_id(), np.int32)
      for i, t in enumerate(generated.tokens):
        c[i, :len(t)] = np.asarray(t)[:n]
      return probe.trainer(
          np.asarray(generated.left_padded_prompt_tokens, np.int32), c)

    before = probe.engine()
    kv_before = kv_ptrs(engine)
    reloads = []
    reload = engine._worker.reload_weights

    def counted(*args, reload=reload, reloads=reloads, **kwargs):
      reloads.append(1)
      return reload(*args, **kwargs)

    engine._worker.reload_weights = counted

    batches, rewards = tasks.dataset_from_spec(
        "toy", batch_size=4, num_batches=1, seed=1)
    learner = grpo_learner.GRPOLearner(
        rl_cluster=cluster,
        algo_config=grpo_learner.GRPOConfig(num_generations=4,
                                            num_iterations=1, beta=0.0),
        reward_fns=rewards)
    learner.train(cluster.shard_dataset(batches, num_generations=4))
    engine._worker.reload_weights = reload
    after_engine, after_trainer = probe.engine(), probe.trainer()

    # Greedy probe, outside any step: rows get counter identities (greedy
    # decoding does not use them). Tunix's sampler cannot forbid the pad
    # id, so the probe lets vLLM's distribution keep it too, as
    # tests/engines/test_vllm.py does (forbidding it renormalises vLLM's
    # log-probs by log(1 - p(pad))).
    engine._row_ids = engine_base.CounterRowIds()
    engine._options = dataclasses.replace(engine._options,
                                          forbid_pad_token=False)
    vout = engine.generate(prompts, greedy)
    local = runtime.local_mesh(axis_names=spec.axis_names)
    reference = native.NativeEngine(
        tokenizer=tok, rollout_config=greedy,
        context=engine_base.EngineContext(
            engine_mesh=local, row_ids=engine_base.CounterRowIds(),
            initial_model=publication.build_engine_model(
                spec, nnx.state(cluster.actor_trainer.model, nnx.Param),
                local)))
    nout = reference.generate(prompts, greedy)
    vtrain, ntrain = greedy_trainer_logps(vout), greedy_trainer_logps(nout)
    pub, eng = cluster.publisher.last_stats, engine.last_update_stats
    out[layout] = dict(
        steps=len(cluster.step_records),
        vllm_tokens=[np.asarray(t).tolist() for t in vout.tokens],
        native_tokens=[np.asarray(t).tolist() for t in nout.tokens],
        vllm_text=list(vout.text), native_text=list(nout.text),
        vllm_logprobs=[np.asarray(l).tolist() for l in vout.logprobs],
        native_logprobs=[np.asarray(l).tolist() for l in nout.logprobs],
        vllm_greedy_trainer=vtrain.tolist(),
        native_greedy_trainer=ntrain.tolist(),
        engine_logps=after_engine.tolist(),
        trainer_logps=after_trainer.tolist(),
        engine_change=float(np.abs(after_engine - before).max()),
        reload_calls=len(reloads),
        kv_before=kv_before, kv_after=kv_ptrs(engine),
        keep_kv_cache=engine._options.keep_kv_cache,
        gather_programs=cluster.publisher._gather._cache_size(),
        source_names=list(publication.flat_by_name(
            nnx.state(cluster.actor_trainer.model, nnx.Param))),
        engine_names=cluster.publisher.names,
        publish_bytes=pub.bytes, engine_bytes=eng.bytes,
        num_tensors=eng.num_tensors)
    cluster.close()
  print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
  main()
