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

"""MaxText FSDP trainer -> every host's vLLM engine, 2 hosts x 2 CPU devices.

Runs where maxtext and vLLM import together (`.venv-maxtext-vllm`,
`make test-maxtext-vllm`); skipped elsewhere. One launch runs, per MaxText
layer layout (scanned, unscanned), a real GRPO step of a tiny MaxText Qwen3
(FSDP over both hosts) under the mcjax cluster with the vLLM engine, then
checks on every host:

1. vLLM's greedy tokens equal the native engine's (Tunix's sampler on the
   same MaxText parameters, mapped afresh), and their log-probs equal the
   native engine's and the MaxText actor's for those tokens;
2. vLLM's per-token log-probs of fixed tokens equal the MaxText actor's
   (global FSDP arrays) and moved with the step;
3. the step's publication was the one jitted gather + MaxText mapping
   (one cached program), installed with one `reload_weights` call, with the
   KV cache kept (the same cache tensors before and after).

A second launch runs MaxText's own `train_rl` (patched,
maxtext_patches/) for 2 steps with `rl_rollout_engine=mcjax:vllm`.

Tolerance: log-probs within 1e-4 absolute, as the vLLM engine's other tests
(fp32 on both sides, different kernels). The tiny model's weights are scaled
up (as in tests/engines/test_vllm.py) so that greedy decoding is far from
ties.
"""

import textwrap

import numpy as np
import pytest

import launch_utils
import train_rl_runs

pytestmark = [pytest.mark.vllm, pytest.mark.multihost, pytest.mark.e2e]

pytest.importorskip("vllm")
pytest.importorskip("maxtext")

TOL = 1e-4
LAYOUTS = ("scanned", "unscanned")

_SCRIPT = textwrap.dedent("""
    import contextlib
    import dataclasses
    import json
    import numpy as np
    from tunix_mcjax import runtime
    info = runtime.initialize()
    import jax, optax
    from flax import nnx
    from flax.linen import partitioning as nn_partitioning
    from tunix.rl.grpo import grpo_learner
    from tunix.rl.rollout import base_rollout
    import tunix_mcjax
    from tunix_mcjax import cluster as cluster_lib, compat, publication
    from tunix_mcjax.engines import base as engine_base, native
    from tunix_mcjax.maxtext import models as mm
    from tunix_mcjax.recipes import models, tasks
    from tests.support import engine_probe

    h = info.process_index
    tok = models.ToyTokenizer(models.PRINTABLE_ALPHABET)
    GREEDY = base_rollout.RolloutConfig(
        max_tokens_to_generate=10, max_prompt_length=12, temperature=0.0,
        top_p=None, return_logprobs=True, kv_cache_size=32)
    # Each host probes its own prompts.
    PROMPTS = [["2+2=", "hello", "a", "The cat sat"],
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

      def greedy_trainer_logps(out):
        # The actor's log-probs of an engine's greedy completions.
        n = GREEDY.max_tokens_to_generate
        c = np.full((len(out.tokens), n), tok.pad_id(), np.int32)
        for i, t in enumerate(out.tokens):
          c[i, :len(t)] = np.asarray(t)[:n]
        return probe.trainer(
            np.asarray(out.left_padded_prompt_tokens, np.int32), c)

      before = probe.engine()
      kv_before = kv_ptrs(engine)
      reloads = []
      reload = engine._worker.reload_weights
      def counted(*args, **kwargs):
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
      vout = engine.generate(PROMPTS, GREEDY)
      local = runtime.local_mesh(axis_names=spec.axis_names)
      reference = native.NativeEngine(
          tokenizer=tok, rollout_config=GREEDY,
          context=engine_base.EngineContext(
              engine_mesh=local, row_ids=engine_base.CounterRowIds(),
              initial_model=publication.build_engine_model(
                  spec, nnx.state(cluster.actor_trainer.model, nnx.Param),
                  local)))
      nout = reference.generate(PROMPTS, GREEDY)
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
""")


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
  return launch_utils.run_script_on_hosts(
      _SCRIPT, tmp_path_factory.mktemp("maxtext_vllm"), timeout=600)


def _records(hosts, layout):
  return [(h, rec[layout]) for h, rec in sorted(hosts.items())]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_vllm_greedy_equals_native_engine(hosts, layout):
  pad = 0
  for host, rec in _records(hosts, layout):
    assert rec["steps"] == 1, (host, rec["steps"])
    full, compared = 0, 0
    rows = zip(rec["vllm_tokens"], rec["native_tokens"], rec["vllm_logprobs"],
               rec["native_logprobs"])
    for i, (tv, tn, lv, ln) in enumerate(rows):
      # Tunix's sampler masks a generated pad out of attention, vLLM
      # attends to it: rows are compared up to their first pad.
      cut = tn.index(pad) + 1 if pad in tn else len(tn)
      assert tv[:cut] == tn[:cut], (host, i, tv, tn)
      if cut == len(tn):
        assert tv == tn and rec["vllm_text"][i] == rec["native_text"][i]
        full += 1
      compared += cut
      np.testing.assert_allclose(lv[:cut], ln[:cut], atol=TOL, rtol=0,
                                 err_msg=f"host {host} row {i}")
      # Both engines' log-probs are the MaxText actor's, for these tokens.
      np.testing.assert_allclose(
          lv[:cut], rec["vllm_greedy_trainer"][i][:cut], atol=TOL, rtol=0,
          err_msg=f"host {host} row {i} (vLLM vs actor)")
    assert full >= 3 and compared >= 20, (host, full, compared)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_vllm_logps_equal_maxtext_actor(hosts, layout):
  for host, rec in _records(hosts, layout):
    np.testing.assert_allclose(rec["engine_logps"], rec["trainer_logps"],
                               atol=TOL, rtol=0, err_msg=f"host {host}")
    # The step moved the weights and the engine followed (not stale).
    assert rec["engine_change"] > 1e-3, (host, rec["engine_change"])
  # Hosts probed different tokens, through the same published weights.
  h0, h1 = (rec["engine_logps"] for _, rec in _records(hosts, layout))
  assert h0 != h1


@pytest.mark.parametrize("layout", LAYOUTS)
def test_one_gather_one_reload_kv_cache_kept(hosts, layout):
  for host, rec in _records(hosts, layout):
    names = rec["source_names"]
    if layout == "scanned":
      # MaxText's stacked layers went in; the mapping unstacked them.
      assert any("['decoder']['layers']['self_attention']" in n
                 for n in names), names
    else:
      assert any("['decoder']['layers_1']" in n for n in names), names
    # ... into Tunix's Qwen3 layout, one tensor per layer.
    assert "['layers'][1]['attn']['q_proj']['w'].value" in rec["engine_names"]
    assert rec["gather_programs"] == 1, rec["gather_programs"]
    assert rec["reload_calls"] == 1, rec["reload_calls"]
    assert rec["engine_bytes"] == rec["publish_bytes"] > 0
    assert rec["keep_kv_cache"] is True
    assert rec["kv_before"] and rec["kv_before"] == rec["kv_after"], (
        rec["kv_before"], rec["kv_after"])
  # Both layouts install the same engine tensors.
  counts = {rec[l]["num_tensors"] for rec in hosts.values() for l in LAYOUTS}
  assert len(counts) == 1, counts


@pytest.fixture(scope="module")
def rl_run(tmp_path_factory):
  from tunix_mcjax.maxtext import patching  # pylint: disable=g-import-not-at-top

  tmp = tmp_path_factory.mktemp("train_rl_vllm")
  patching.apply(tmp / "patched")
  # head_dim 32: vLLM's CPU attention has no head_dim 16 kernel.
  return train_rl_runs.run(tmp / "patched", tmp, rollout_engine="mcjax:vllm",
                           head_dim=32)


def test_patched_train_rl_with_the_mcjax_vllm_engine(rl_run):
  train_rl_runs.assert_two_steps_on_two_hosts(rl_run)
  logs = rl_run.stdout + rl_run.stderr
  for host in (0, 1):
    # Each host started its own in-process vLLM engine: vLLM's CPU worker
    # reports its memory set-up (init_cpu_memory_env) when the engine starts.
    # (Under train_rl, absl takes over Python logging and vLLM's own INFO
    # lines do not reach the console.)
    assert any("init_cpu_memory_env" in line
               for line in launch_utils.host_lines(logs, host)), host
