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

"""O1-O4 in isolation (one process): active when on, inert when off.

tests/test_optimizations_e2e.py runs them inside real 2-host GRPO jobs and
checks that results do not change.
"""

import gc
import threading

from flax import nnx
import jax
import numpy as np
import pytest

from tunix_mcjax import admission
from tunix_mcjax import host_optimizations as hopt

# --- profiles -----------------------------------------------------------------


def test_profiles_and_overrides():
  assert not any(hopt.PROFILES["base"].as_dict().values())
  assert all(hopt.PROFILES["optimized"].as_dict().values())
  got = hopt.from_profile("optimized", balance_admission=False,
                          freeze_gc=None)
  assert got.freeze_gc and not got.balance_admission
  assert hopt.from_profile(None) == hopt.HostOptimizations()
  with pytest.raises(ValueError, match="Unknown profile"):
    hopt.from_profile("fast")
  with pytest.raises(ValueError, match="Unknown switch"):
    hopt.from_profile("base", turbo=True)
  with pytest.raises(TypeError, match="must be a bool"):
    hopt.HostOptimizations(async_metrics=1)


# --- O1 -----------------------------------------------------------------------


def test_async_exporter_never_blocks_and_loses_nothing():
  exporter = hopt.MetricsExporter(asynchronous=True)
  release = threading.Event()
  done, threads = [], []

  def job(i):
    def run():
      release.wait(10)
      threads.append(threading.current_thread().name)
      done.append(i)
    return run

  for i in range(5):
    exporter.submit(job(i))  # Returns although the writer is stuck.
  assert exporter.pending() == 5 and not done
  release.set()
  exporter.close()  # Drains the queue: nothing lost at exit.
  assert done == [0, 1, 2, 3, 4]
  assert set(threads) == {"mcjax-metrics"}
  with pytest.raises(RuntimeError, match="closed"):
    exporter.submit(lambda: None)


def test_sync_exporter_runs_inline():
  exporter = hopt.MetricsExporter(asynchronous=False)
  seen = []
  exporter.submit(lambda: seen.append(threading.current_thread()))
  assert seen == [threading.current_thread()] and exporter.pending() == 0
  exporter.close()


def test_async_exporter_reports_errors_at_close():
  exporter = hopt.MetricsExporter(asynchronous=True)
  after = []
  exporter.submit(lambda: 1 / 0)
  exporter.submit(lambda: after.append(1))  # Later steps still export.
  with pytest.raises(RuntimeError, match="export job failed"):
    exporter.close()
  assert after == [1]


# --- O2 -----------------------------------------------------------------------


def _freeze_baseline() -> int:
  # CPython 3.12 reports a few hundred "frozen" objects after any full
  # collection even when nothing called gc.freeze(); compare with that.
  gc.collect()
  return gc.get_freeze_count()


def test_freeze_gc_skips_tunix_collects_and_freezes_after_warmup():
  from tunix.rl import rl_cluster  # pylint: disable=g-import-not-at-top

  baseline = _freeze_baseline()
  policy = hopt.GcPolicy(freeze=True)
  policy.start()
  try:
    assert "tunix.rl.rl_cluster" in policy.patched_modules()
    full = hopt.full_collections()
    assert rl_cluster.gc.collect() == 0  # Tunix's per-step collect: skipped.
    assert hopt.full_collections() == full
    assert policy.skipped_collects == 1
    assert rl_cluster.gc.freeze is gc.freeze  # The rest is the real gc.
    policy.after_step(1)  # Warm-up step: one collect, then freeze.
    # The process's many live objects (modules, JAX, Tunix) are frozen.
    assert policy.frozen and gc.get_freeze_count() > baseline + 10_000
    assert policy.explicit_collects == 1
    full = hopt.full_collections()
    assert policy.after_step(2) < 0.05
    assert policy.explicit_collects == 1 and hopt.full_collections() == full
  finally:
    policy.stop()
  assert rl_cluster.gc is gc and _freeze_baseline() == baseline
  assert not policy.frozen and policy.froze_after_step == 1


def test_gc_hooks_are_undone_and_unhookable_modules_are_reported():
  from tunix.generate import utils as generate_utils  # pylint: disable=g-import-not-at-top
  from tunix.rl import rl_cluster  # pylint: disable=g-import-not-at-top
  from tunix.sft import utils as sft_utils  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.compat import gc_hooks  # pylint: disable=g-import-not-at-top

  tunix_modules = (rl_cluster, sft_utils, generate_utils)
  policy = hopt.GcPolicy(
      freeze=True,
      modules=gc_hooks.TUNIX_GC_MODULES + ("json", "no_such_module_h3"),
  )
  policy.start()
  try:
    assert policy.patched_modules() == list(gc_hooks.TUNIX_GC_MODULES)
    # `json` has no module attribute `gc`; the other is not importable.
    assert policy.unhooked_modules() == ["json", "no_such_module_h3"]
    assert all(m.gc is not gc for m in tunix_modules)
  finally:
    policy.stop()
  assert all(m.gc is gc for m in tunix_modules)
  assert policy.patched_modules() == []
  policy.stop()  # Idempotent.
  assert all(m.gc is gc for m in tunix_modules)


def test_without_freeze_gc_no_step_collects_as_stock_grpo():
  from tunix.rl import rl_cluster  # pylint: disable=g-import-not-at-top

  policy = hopt.GcPolicy(freeze=False)
  policy.start()
  assert policy.patched_modules() == [] and rl_cluster.gc is gc
  baseline = _freeze_baseline()
  gc.disable()  # No automatic collection may count as ours.
  try:
    full = hopt.full_collections()
    policy.after_step(1)
    policy.after_step(2)
    assert hopt.full_collections() == full
  finally:
    gc.enable()
  assert policy.explicit_collects == 0 and not policy.frozen
  assert gc.get_freeze_count() == baseline
  policy.stop()


# --- O3 -----------------------------------------------------------------------


@pytest.mark.parametrize("hosts", [1, 2, 4])
def test_balanced_assignment_is_a_fair_partition(hosts):
  rng = np.random.default_rng(0)
  lengths = rng.integers(5, 500, size=32)
  parts = admission.balanced_assignment(lengths, hosts)
  assert len(parts) == hosts
  assert all(len(p) == 32 // hosts for p in parts)
  np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(32))
  for p in parts:
    assert np.all(np.diff(p) > 0)  # Dataset order within a host.
  # Deterministic: the same lengths give the same deal on every host.
  again = admission.balanced_assignment(list(lengths), hosts)
  assert all(np.array_equal(a, b) for a, b in zip(parts, again))
  if hosts > 1:
    balanced = [lengths[p].sum() for p in parts]
    contiguous = [c.sum() for c in np.split(lengths, hosts)]
    spread = lambda x: max(x) - min(x)
    assert spread(balanced) <= lengths.max()
    assert spread(balanced) < spread(contiguous)


def test_balanced_admission_keeps_groups_and_identities():
  lengths = [3, 40, 5, 30, 7, 20, 9, 10]
  batch = {"prompts": ["x" * n for n in lengths],
           "answer": np.arange(len(lengths))}
  g = 3
  shares, rows = [], []
  for h in range(2):
    adm = admission.Admission(admission.AdmissionConfig(
        num_hosts=2, host_index=h, num_generations=g, balance_by_length=True))
    (share,) = list(adm.shard([batch]))
    shares.append(share)
    rows.append(adm.row_ids.take(adm.row_ids.pending()))
    stats = adm.pop_batch_stats()
    assert stats.prompt_tokens == sum(len(p) for p in share["prompts"])
    assert stats.digest == admission.prompts_digest(batch["prompts"])
  idx = [s["answer"] for s in shares]
  np.testing.assert_array_equal(np.sort(np.concatenate(idx)), np.arange(8))
  assert [len(i) for i in idx] == [4, 4]
  # Not the contiguous deal: balancing is active.
  assert not np.array_equal(idx[0], np.arange(4))
  for share, r in zip(shares, rows):
    # Row identities are the admitted prompts' global indices, G per prompt.
    np.testing.assert_array_equal(r[:, 0], np.repeat(share["answer"], g))
    np.testing.assert_array_equal(r[:, 1], np.tile(np.arange(g), 4))
    assert [len(p) for p in share["prompts"]] == [lengths[i]
                                                  for i in share["answer"]]


def test_balancing_off_is_the_contiguous_deal():
  batch = {"prompts": ["x" * n for n in [3, 40, 5, 30]]}
  adm = admission.Admission(admission.AdmissionConfig(
      num_hosts=2, host_index=1, num_generations=2))
  (share,) = list(adm.shard([batch]))
  assert [len(p) for p in share["prompts"]] == [5, 30]
  assert adm.pop_batch_stats().prompt_tokens == -1  # No length function.


def test_balancing_refuses_several_updates_per_batch():
  cfg = admission.AdmissionConfig(num_hosts=2, host_index=0,
                                  num_generations=2, balance_by_length=True,
                                  update_size=2)
  with pytest.raises(ValueError, match="share an update"):
    cfg.host_prompt_indices(8, [1] * 8)


# --- O4 -----------------------------------------------------------------------


def test_per_parameter_and_one_call_publication_agree():
  from tunix.rl.rollout import base_rollout  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import publication, runtime  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.recipes import models  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.engines import base as engines_base  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.engines import native  # pylint: disable=g-import-not-at-top

  gm, lm = runtime.global_mesh(), runtime.local_mesh()
  actor = models.create_tiny_model(models.tiny_qwen3_config(), seed=5, mesh=gm)
  params = nnx.state(actor, nnx.Param)
  # Something other than the engines' initial weights.
  bumped = jax.tree.map(lambda x: x * 1.5 + 0.25, params)

  def engine():
    return native.NativeEngine(
        rollout_actor=actor, tokenizer=models.ToyTokenizer(),
        rollout_config=base_rollout.RolloutConfig(
            max_tokens_to_generate=2, max_prompt_length=2),
        context=engines_base.EngineContext(
            engine_mesh=lm, row_ids=engines_base.CounterRowIds()))

  one, each = engine(), engine()
  calls = {"one": 0, "each": 0}

  def counting(eng, key):
    inner = eng.update_params

    def update(*args, **kwargs):
      calls[key] += 1
      return inner(*args, **kwargs)
    eng.update_params = update

  counting(one, "one")
  counting(each, "each")
  target = one.publication_target()
  pub = publication.Publisher(dst=target, local_mesh=lm)
  one.update_params(pub(bumped))
  paths = [tuple(k.key for k in p) for p, _ in
           jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(target))[0]]

  def deliver(i, value):
    tree = value
    for key in reversed(paths[i]):
      tree = {key: tree}
    each.update_params(tree, filter_types=(nnx.Param,))

  n = pub.publish_each(bumped, deliver)
  assert n == len(paths) == len(pub.names) > 1
  assert calls == {"one": 1, "each": n}
  a = jax.tree.leaves(nnx.state(one.model(), nnx.Param))
  b = jax.tree.leaves(nnx.state(each.model(), nnx.Param))
  want = jax.tree.leaves(bumped)
  for x, y, w in zip(a, b, want):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    np.testing.assert_array_equal(np.asarray(x), np.asarray(w))
