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

"""The vLLM engine against the native engine, single process, vLLM on CPU.

Runs only where vLLM is installed (`.venv-vllm`, `make test-vllm`); skipped
in the main environment. Models are tiny random Qwen3s (fp32) with weights
scaled up so that next-token distributions are peaked (greedy decoding is
then far from ties) and a 100-token vocabulary.
"""

# pylint: disable=protected-access

from __future__ import annotations

import dataclasses
import glob
import os
import pathlib
import stat
import subprocess
import sys
import tempfile

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import psutil
import pytest
from tunix.rl.rollout import base_rollout

import launch_utils

vllm = pytest.importorskip("vllm")

from tunix_mcjax import engines  # pylint: disable=g-import-not-at-top
from tunix_mcjax import temp_dirs  # pylint: disable=g-import-not-at-top
from tunix_mcjax import tree_paths  # pylint: disable=g-import-not-at-top
from tunix_mcjax.compat import touch_points  # pylint: disable=g-import-not-at-top
from tunix_mcjax.recipes import models  # pylint: disable=g-import-not-at-top
from tunix_mcjax.engines import base  # pylint: disable=g-import-not-at-top
from tunix_mcjax.engines import native  # pylint: disable=g-import-not-at-top
from tunix_mcjax.engines import vllm as vllm_engine  # pylint: disable=g-import-not-at-top
from tunix_mcjax.engines import vllm_options  # pylint: disable=g-import-not-at-top
from tunix_mcjax.registry import ENGINES  # pylint: disable=g-import-not-at-top

pytestmark = [pytest.mark.vllm]

P = jax.sharding.PartitionSpec
TOKENIZER = models.ToyTokenizer(models.PRINTABLE_ALPHABET)
PAD = TOKENIZER.pad_id()
PROMPTS = ["2+2=", "hello", "a", "The cat sat", "x:", "12*3=?", "zz", "ok!"]
GREEDY = base_rollout.RolloutConfig(
    max_tokens_to_generate=10, max_prompt_length=12, temperature=0.0,
    top_p=None, return_logprobs=True, kv_cache_size=32)
SAMPLED = dataclasses.replace(GREEDY, temperature=1.0, top_p=1.0)


class ArrayRowIds:
  """A RowIdSource over explicit ids (the next `take` returns `ids`)."""

  def __init__(self):
    self._next = 0
    self.ids = None

  def take(self, num_rows):
    if self.ids is not None:
      ids, self.ids = np.asarray(self.ids, np.int64), None
      assert len(ids) == num_rows
      return ids
    rows = np.arange(self._next, self._next + num_rows)
    self._next += num_rows
    return np.stack([rows, np.zeros_like(rows)], axis=1)


def _model(tied: bool, seed: int, scale: float = 0.3):
  config = models.tiny_qwen3_config(
      use_tied_embedding=tied, head_dim=32, vocab_size=TOKENIZER.vocab_size)
  model = models.create_tiny_model(config, seed=seed)
  rng = np.random.default_rng(seed)
  state = nnx.state(model, nnx.Param)

  def bump(x):
    x = np.asarray(x)
    noise = rng.standard_normal(x.shape).astype(np.float32) * scale
    # Norm scales stay near 1; everything else gets peaked random weights.
    return jnp.asarray(1.0 + noise * 0.1 if x.ndim == 1 else noise)

  nnx.update(model, jax.tree.map(bump, state))
  return model


@pytest.fixture(scope="module")
def mesh():
  devices = jax.devices()
  if len(devices) < 2:
    pytest.fail("needs 2+ CPU devices (tests/conftest.py).")
  return jax.sharding.Mesh(np.array(devices[:2]).reshape(2, 1),
                           ("fsdp", "tp"))


def _replicated(mesh, params, dtype=None):
  rep = jax.sharding.NamedSharding(mesh, P())
  return jax.tree.map(
      lambda x: jax.device_put(x if dtype is None else x.astype(dtype), rep),
      params)


def _vllm_dist_files() -> set[str]:
  return set(glob.glob(os.path.join(tempfile.gettempdir(), "vllm_dist_*")))


def _pair(mesh, tied, **options):
  import torch.distributed  # pylint: disable=g-import-not-at-top

  model = _model(tied, seed=11 if tied else 12)
  row_ids = ArrayRowIds()
  # The first vLLM engine of this process starts torch.distributed through
  # a rendezvous file vLLM never removes: in the engine's own directory
  # (removed at close), never in the temp dir.
  fresh, before = not torch.distributed.is_initialized(), _vllm_dist_files()
  ve = vllm_engine.VllmEngine(
      tokenizer=TOKENIZER, rollout_config=GREEDY,
      context=base.EngineContext(engine_mesh=mesh, initial_model=model,
                                 row_ids=row_ids, seed=5),
      options=vllm_engine.VllmEngineOptions(**options))
  assert _vllm_dist_files() == before
  engine_dir = ve._tmpdir.name  # pylint: disable=protected-access
  assert bool(glob.glob(os.path.join(engine_dir, "vllm_dist_*"))) == fresh
  ne = native.NativeEngine(
      tokenizer=TOKENIZER, rollout_config=GREEDY,
      context=base.EngineContext(engine_mesh=mesh, initial_model=model,
                                 row_ids=ArrayRowIds()))
  return ve, ne, model, row_ids


@pytest.fixture(scope="module", params=[True, False], ids=["tied", "untied"])
def pair(request, mesh):
  # forbid_pad_token=False: the native sampler may emit pad ids too.
  ve, ne, model, _ = _pair(mesh, request.param, forbid_pad_token=False)
  yield ve, ne, model
  ve.close()


@pytest.fixture(scope="module")
def sampler_engine(mesh):
  """Default options, except transfer through the host (the other path)."""
  ve, ne, _, row_ids = _pair(mesh, False, transfer="host")
  yield ve, ne, row_ids
  engine_dir = ve._tmpdir.name  # pylint: disable=protected-access
  ve.close()
  assert not os.path.exists(engine_dir)


def _assert_same_greedy(a, b, tol=1e-4):
  """Tokens equal and log-probs within `tol`, row by row.

  Tunix's sampler masks a generated pad id out of attention while vLLM
  attends to it, so a row is compared up to and including its first pad
  token; rows with a pad are reported so that the check cannot go vacuous.
  """
  full, compared = 0, 0
  for i, (ta, tb) in enumerate(zip(a.tokens, b.tokens)):
    ta, tb = ta.tolist(), tb.tolist()
    cut = tb.index(PAD) + 1 if PAD in tb else len(tb)
    assert ta[:cut] == tb[:cut], (i, ta, tb)
    if cut == len(tb):
      assert ta == tb, (i, ta, tb)
      assert a.text[i] == b.text[i]
      full += 1
    compared += cut
    np.testing.assert_allclose(a.logprobs[i][:cut], b.logprobs[i][:cut],
                               atol=tol, rtol=0, err_msg=f"row {i}")
  assert full >= 0.75 * len(a.tokens) and compared >= 40, (full, compared)


def test_registered_by_name():
  assert ENGINES.get("vllm") is engines.VllmEngine
  assert ENGINES.get("vllm").tiny_model_overrides == {"head_dim": 32}


def test_greedy_tokens_and_logprobs_match_native(pair):
  ve, ne, _ = pair
  a, b = ve.generate(PROMPTS, GREEDY), ne.generate(PROMPTS, GREEDY)
  np.testing.assert_array_equal(a.left_padded_prompt_tokens,
                                b.left_padded_prompt_tokens)
  assert a.logits is None
  _assert_same_greedy(a, b)
  assert not hasattr(ve, "mesh")  # See Engine.engine_mesh.
  assert ve.model() is None


def _assert_logps_match_native(ve, ne) -> None:
  """Both engines score the native engine's greedy completions alike."""
  out = ne.generate(PROMPTS, GREEDY)
  comp = np.full((len(PROMPTS), GREEDY.max_tokens_to_generate), PAD, np.int32)
  for i, t in enumerate(out.tokens):
    comp[i, :len(t)] = t
  got = np.asarray(ve.get_per_token_logps(out.left_padded_prompt_tokens, comp))
  want = np.asarray(ne.get_per_token_logps(out.left_padded_prompt_tokens,
                                           comp))
  mask = np.cumsum(comp == PAD, axis=1) == 0  # Before the first pad.
  assert mask.sum() >= 40
  np.testing.assert_allclose(got * mask, want * mask, atol=1e-4, rtol=0)


def test_per_token_logps_match_native(pair):
  ve, ne, _ = pair
  _assert_logps_match_native(ve, ne)


def test_publication_installs_new_weights(pair, mesh):
  ve, ne, model = pair
  before = ve.generate(PROMPTS, GREEDY)
  tied = model.config.use_tied_embedding
  new = _replicated(mesh, nnx.state(_model(tied, seed=99), nnx.Param))
  ve.update_params(new)
  ne.update_params(new)
  # Same prompts as before: with prefix caching on, a stale cached prompt
  # KV would show up here.
  after, want = ve.generate(PROMPTS, GREEDY), ne.generate(PROMPTS, GREEDY)
  _assert_same_greedy(after, want)
  assert [t.tolist() for t in after.tokens] != [
      t.tolist() for t in before.tokens]
  stats = ve.last_update_stats
  n_params = len(jax.tree.leaves(new))
  assert stats.num_tensors == n_params
  assert stats.bytes == sum(x.size * 4 for x in jax.tree.leaves(new))
  assert 0 < stats.reload_seconds <= stats.seconds
  # Back to the fixture's weights for the other tests.
  orig = _replicated(mesh, nnx.state(model, nnx.Param))
  ve.update_params(orig)
  ne.update_params(orig)


def test_update_errors_name_the_parameter(pair, mesh):
  ve, _, model = pair
  good = nnx.to_pure_dict(_replicated(mesh, nnx.state(model, nnx.Param)))

  def variant(fn):
    tree = jax.tree.map(lambda x: x, good)
    fn(tree)
    return tree

  with pytest.raises(ValueError, match=r"layers\.1\.mlp\.up_proj\.kernel.*"
                     r"shape"):
    ve.update_params(variant(lambda t: t["layers"][1]["mlp"]["up_proj"]
                             .__setitem__("kernel", _replicated(
                                 mesh, jnp.zeros((64, 7))))))
  with pytest.raises(ValueError, match=r"missing parameter "
                     r"'layers\.0\.attn\.q_norm\.w'"):
    ve.update_params(variant(lambda t: t["layers"][0]["attn"]["q_norm"]
                             .pop("w")))
  with pytest.raises(ValueError, match=r"'final_norm\.bias'"):
    ve.update_params(variant(lambda t: t["final_norm"].__setitem__(
        "bias", t["final_norm"]["w"])))
  with pytest.raises(ValueError, match=r"'final_norm\.w' has dtype"):
    ve.update_params(variant(lambda t: t["final_norm"].__setitem__(
        "w", t["final_norm"]["w"].astype(jnp.bfloat16))))
  sharded = jax.sharding.NamedSharding(mesh, P("fsdp"))
  with pytest.raises(ValueError, match=r"'embedder\.input_embedding' has"
                     r" sharding"):
    ve.update_params(variant(lambda t: t["embedder"].__setitem__(
        "input_embedding",
        jax.device_put(t["embedder"]["input_embedding"], sharded))))
  # Nothing was installed by the failed calls.
  ne_out = native.NativeEngine(
      tokenizer=TOKENIZER, rollout_config=GREEDY,
      context=base.EngineContext(engine_mesh=mesh, initial_model=model,
                                 row_ids=ArrayRowIds()),
  ).generate(PROMPTS, GREEDY)
  _assert_same_greedy(ve.generate(PROMPTS, GREEDY), ne_out)


def test_one_call_per_parameter_updates_by_module(pair, mesh):
  # The cluster's O4 baseline publishes one parameter per call.
  ve, ne, model = pair
  new = nnx.to_pure_dict(_replicated(
      mesh, nnx.state(_model(model.config.use_tied_embedding, seed=98),
                      nnx.Param)))
  leaves = jax.tree_util.tree_flatten_with_path(new)[0]
  for i, (path, x) in enumerate(leaves):
    tree = tree_paths.nest(tree_paths.param_path(path), x)
    ve.update_params(tree, filter_types=(nnx.Param,))
    if i == 0 and ve._pending:
      with pytest.raises(RuntimeError, match="incomplete"):
        ve.generate(PROMPTS, GREEDY)
  assert not ve._pending
  ne.update_params(nnx.State(new))
  _assert_same_greedy(ve.generate(PROMPTS, GREEDY),
                      ne.generate(PROMPTS, GREEDY))
  orig = _replicated(mesh, nnx.state(model, nnx.Param))
  ve.update_params(orig)
  ne.update_params(orig)


def test_sampling_is_placement_invariant(sampler_engine):
  ve, _, row_ids = sampler_engine
  prompts = [p for p in PROMPTS[:4] for _ in range(4)]  # 4 groups of G=4.
  ids = np.array([[p, s] for p in range(100, 104) for s in range(4)])
  row_ids.ids = ids
  whole = ve.generate(prompts, SAMPLED)
  # The same rows, in reverse order and split over two calls.
  order = np.arange(len(prompts))[::-1]
  parts = []
  for chunk in (order[:5], order[5:]):
    row_ids.ids = ids[chunk]
    parts.extend(ve.generate([prompts[i] for i in chunk], SAMPLED).tokens)
  split = {int(i): t.tolist() for i, t in zip(order, parts)}
  assert [split[i] for i in range(len(prompts))] == [
      t.tolist() for t in whole.tokens]
  # Groups are not degenerate: samples within a group differ.
  assert len({tuple(t.tolist()) for t in whole.tokens[:4]}) > 1


def test_pad_is_never_sampled(sampler_engine, mesh):
  ve, ne, _ = sampler_engine
  state = nnx.state(ve_model := _model(False, seed=12), nnx.Param)
  # Make pad a likely token: a large LM-head column.
  boosted = jax.tree.map(lambda x: x, state)
  head = boosted["lm_head"]["w"]
  head.value = head.value.at[:, PAD].multiply(20.0)
  ve.update_params(_replicated(mesh, boosted))
  ne.update_params(_replicated(mesh, boosted))
  prompts = PROMPTS * 2
  with_pad = ne.generate(prompts, SAMPLED)
  assert sum(t.tolist().count(PAD) for t in with_pad.tokens) >= 5
  out = ve.generate(prompts, SAMPLED)
  assert all(PAD not in t.tolist() for t in out.tokens)
  assert sum(len(t) for t in out.tokens) >= 40
  orig = _replicated(mesh, nnx.state(ve_model, nnx.Param))
  ve.update_params(orig)
  ne.update_params(orig)


def test_host_transfer_weights_match_native(sampler_engine):
  ve, ne, _ = sampler_engine
  _assert_logps_match_native(ve, ne)


def test_options_are_validated():
  with pytest.raises(ValueError, match="transfer"):
    vllm_engine.VllmEngineOptions(transfer="rdma")
  with pytest.raises(ValueError, match="dtype"):
    vllm_engine.VllmEngineOptions(dtype="int8")
  opts = vllm_engine.VllmEngineOptions(engine_kwargs={"max_num_batched_tokens":
                                                      256})
  assert opts.engine_kwargs == (("max_num_batched_tokens", 256),)


def test_keep_kv_cache_false_needs_sleep_mode_on_cpu(mesh):
  with pytest.raises(ValueError, match="sleep mode"):
    vllm_engine.VllmEngine(
        tokenizer=TOKENIZER, rollout_config=GREEDY,
        context=base.EngineContext(engine_mesh=mesh,
                                   initial_model=_model(True, 1)),
        options=vllm_engine.VllmEngineOptions(keep_kv_cache=False))


def test_unsupported_head_dim_is_explained(mesh):
  model = models.create_tiny_model(models.tiny_qwen3_config(), seed=0)
  with pytest.raises(ValueError, match="head_dim=16"):
    vllm_engine.VllmEngine(
        tokenizer=models.ToyTokenizer(), rollout_config=GREEDY,
        context=base.EngineContext(engine_mesh=mesh, initial_model=model))


# --- engine tp 2: vLLM's tensor_parallel_size 2 (two worker processes) -----


def _children() -> set[int]:
  """This process's live child processes, but multiprocessing's resource
  tracker (started by the first spawn, it lives as long as this process)."""
  out = set()
  for child in psutil.Process().children():
    try:
      if child.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in (
          " ".join(child.cmdline())):
        out.add(child.pid)
    except psutil.NoSuchProcess:
      pass
  return out


def _shared_files() -> set[str]:
  """vLLM's shared-memory files, and the sockets in the temp dir (this
  group's own)."""
  tmp = tempfile.gettempdir()
  return launch_utils.vllm_shared_memory() | {
      name for name in os.listdir(tmp)
      if stat.S_ISSOCK(os.lstat(os.path.join(tmp, name)).st_mode)}


@pytest.fixture(scope="module")
def tp_engines():
  """The tied model in vLLM at tp 1 and at tp 2 (engine meshes (2, 1) and
  (1, 2) of the same two devices), with row ids set per call; the tp 2
  engine's worker processes, and the shared files before it started."""
  devices = np.array(jax.devices()[:2])
  model = _model(True, seed=11)
  engines, before, files = {}, _children(), _shared_files()
  for tp, shape in ((1, (2, 1)), (2, (1, 2))):
    row_ids = ArrayRowIds()
    engines[tp] = (vllm_engine.VllmEngine(
        tokenizer=TOKENIZER, rollout_config=GREEDY,
        context=base.EngineContext(
            engine_mesh=jax.sharding.Mesh(devices.reshape(shape),
                                          ("fsdp", "tp")),
            initial_model=model, row_ids=row_ids, seed=5)), row_ids)
  workers = (_children() - before, files)
  yield engines, model, workers
  for ve, _ in engines.values():
    ve.close()


def _generate(engines, tp, config, ids):
  ve, row_ids = engines[tp]
  row_ids.ids = ids
  return ve.generate(PROMPTS, config)


def _assert_tp2_equals_tp1(engines) -> list[list[int]]:
  """Greedy and sampled rows: the same tokens; log-probs within 1e-5 (tp 2
  sums the row-parallel layers' partial products across its two workers,
  in another order than one worker's matmul: float32 rounding, about 3e-6
  observed). Returns the greedy tokens."""
  ids = np.array([[i + 40, 1] for i in range(len(PROMPTS))])
  a = _generate(engines, 1, GREEDY, ids)
  b = _generate(engines, 2, GREEDY, ids)
  _assert_same_greedy(b, a, tol=1e-5)
  sa = _generate(engines, 1, SAMPLED, ids)
  sb = _generate(engines, 2, SAMPLED, ids)
  assert [t.tolist() for t in sb.tokens] == [t.tolist() for t in sa.tokens]
  for x, y in zip(sb.logprobs, sa.logprobs):
    np.testing.assert_allclose(x, y, atol=1e-5, rtol=0)
  # Not vacuous: sampling is not greedy decoding here.
  assert [t.tolist() for t in sa.tokens] != [t.tolist() for t in a.tokens]
  return [t.tolist() for t in a.tokens]


def test_tp2_runs_two_worker_processes_and_equals_tp1(tp_engines):
  engines, _, workers = tp_engines
  assert len(workers[0]) == 2, workers  # tp 1 adds none in this process.
  assert engines[2][0]._worker is None  # pylint: disable=protected-access
  _assert_tp2_equals_tp1(engines)


def _update(engines, params) -> None:
  for ve, _ in engines.values():
    ve.update_params(_replicated(ve.engine_mesh, params))


def test_tp2_publication_reaches_every_worker(tp_engines):
  engines, model, _ = tp_engines
  before = _assert_tp2_equals_tp1(engines)
  _update(engines, nnx.state(_model(True, seed=99), nnx.Param))
  # Equal to tp 1 under the new weights, and not the old completions.
  assert _assert_tp2_equals_tp1(engines) != before
  stats = engines[2][0].last_update_stats
  assert stats.num_tensors == len(jax.tree.leaves(
      nnx.state(model, nnx.Param)))
  assert 0 < stats.reload_seconds <= stats.seconds
  _update(engines, nnx.state(model, nnx.Param))
  assert _assert_tp2_equals_tp1(engines) == before


def test_tp2_close_ends_its_workers(tp_engines):
  """Last of the tp tests: closes the tp 2 engine (closing is idempotent)."""
  engines, _, workers = tp_engines
  engines[2][0].close()
  left = workers[0] & _children()
  assert not left, [open(f"/proc/{p}/cmdline").read() for p in left]
  # No socket left in the temp dir (vLLM's go in the engine's own
  # directory), nothing in shared memory.
  assert _shared_files() <= workers[1], _shared_files() - workers[1]


def test_tp2_workers_end_with_a_killed_host():
  """A SIGKILLed process's vLLM workers exit (vLLM's death pipe), and the
  next engine's start sweeps the dead one's directory (its sockets) and
  its workers' shared memory."""
  program = os.path.join(os.path.dirname(__file__), os.pardir, "support",
                         "vllm_tp_host.py")
  proc = subprocess.Popen([sys.executable, program], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True)
  try:
    line = proc.stdout.readline()
    assert line.startswith("READY "), line
    engine_dir = line.split()[1]
    workers = [c for c in psutil.Process(proc.pid).children()
               if "VLLM::Worker" in " ".join(c.cmdline())]
    assert len(workers) == 2, workers
  finally:
    proc.kill()
    proc.wait()
  _, alive = psutil.wait_procs(workers, timeout=60)
  assert not alive, alive
  assert os.path.isdir(engine_dir)  # SIGKILL ran no clean-up ...
  # What its workers' shared memory is named by (recorded at its start).
  idents = pathlib.Path(engine_dir, vllm_options.SHM_NAMES_FILE).read_text()
  assert len(idents.split()) == 1, idents
  # ... which the next engine's start does (VllmEngine's sweep).
  temp_dirs.sweep(["tunix_mcjax_vllm_"],
                  before_removal=vllm_options.remove_shared_memory)
  assert not os.path.exists(engine_dir)
  left = [n for n in os.listdir("/dev/shm") if n.startswith(idents.strip())]
  assert not left, left


def test_row_seeds_depend_only_on_identity():
  a = vllm_engine.row_seeds(7, np.array([[3, 0], [3, 1], [4, 0]]))
  b = vllm_engine.row_seeds(7, np.array([[4, 0], [3, 1]]))
  assert a[2] == b[0] and a[1] == b[1] and len(set(a)) == 3
  assert vllm_engine.row_seeds(8, np.array([[3, 0]]))[0] != a[0]
  assert all(0 <= s < 2**63 for s in a)


# vLLM's own rows of the touch-point table: tests/test_compat.py runs in the
# main environment only (no vLLM), this module where vLLM is installed.
@pytest.mark.parametrize(
    "row", [r for r in touch_points.TOUCH_POINTS
            if r.module.split(".")[0] == "vllm"],
    ids=lambda r: f"{r.module}.{r.attr}")
def test_vllm_touch_point_holds(row):
  assert touch_points.problem(row) is None, row.why
