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

"""The vllm engine's parts that need no vLLM: LoRA merge, staging, requests.

The engine itself runs only where vLLM is installed (test_vllm.py); these
run everywhere, with stand-ins for torch and vLLM's request and output
types.
"""

import os
import signal
import subprocess
import sys
import time
import types

import jax
import ml_dtypes
import numpy as np
import pytest
from tunix.rl.rollout import base_rollout

from tunix_mcjax.engines import vllm_lora
from tunix_mcjax.engines import vllm_options
from tunix_mcjax.engines import vllm_requests
from tunix_mcjax.engines import vllm_staging

P = jax.sharding.PartitionSpec
Q, K, O = ("l", "q", "w"), ("l", "k", "w"), ("l", "o", "w")
QA, QB = ("l", "q", "w_lora_a"), ("l", "q", "w_lora_b")
# Stands in for torch: tensors are the NumPy arrays themselves.
TORCH = types.SimpleNamespace(from_numpy=lambda x: x, from_dlpack=np.asarray,
                              bfloat16=ml_dtypes.bfloat16)


@pytest.fixture(scope="module")
def replicated():
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("x",))
  return jax.sharding.NamedSharding(mesh, P())


def _arrays(sharding, seed, **shapes):
  rng = np.random.default_rng(seed)
  return {k: jax.device_put(rng.standard_normal(s).astype(np.float32),
                            sharding) for k, s in shapes.items()}


def _lora(replicated, seed=0):
  a = _arrays(replicated, seed, q=(4, 3), k=(4, 3), o=(3, 4), qa=(4, 2),
              qb=(2, 3))
  flat = {Q: a["q"], K: a["k"], O: a["o"], QA: a["qa"], QB: a["qb"]}
  base, lora, adapted = vllm_lora.split(flat)
  # q and k are one packed vLLM module; o is its own.
  tensors = [types.SimpleNamespace(vllm_module="qkv", src=Q),
             types.SimpleNamespace(vllm_module="qkv", src=K),
             types.SimpleNamespace(vllm_module="o", src=O)]
  state = vllm_lora.LoraMerge(base, lora, adapted=adapted, scale=2.0,
                              tensors=tensors, dtype=np.dtype(np.float32),
                              sharding=replicated)
  return state, base, lora


def _want(w, a, b):
  return np.asarray(w) + 2.0 * np.asarray(a) @ np.asarray(b)


def test_lora_adapters_are_held_until_complete_then_merged(replicated):
  state, base, lora = _lora(replicated)
  assert set(base) == {Q, K, O} and set(lora) == {QA, QB}
  assert [t.weight for t in state.adapted] == [Q]
  np.testing.assert_allclose(state.merged(lora)[Q],
                             _want(base[Q], lora[QA], lora[QB]), rtol=1e-5)
  new = _arrays(replicated, 1, qa=(4, 2), qb=(2, 3))
  assert state.add({QA: new["qa"]}) is None
  assert set(state.pending) == {QA}
  ready = state.add({QB: new["qb"]})
  # The whole packed module is reloaded; k keeps its base weight.
  assert set(ready) == {Q, K} and not state.pending
  np.testing.assert_allclose(ready[Q], _want(base[Q], new["qa"], new["qb"]),
                             rtol=1e-5)
  np.testing.assert_array_equal(ready[K], base[K])


def test_lora_base_is_replaced_only_with_every_adapter(replicated):
  state, _, lora = _lora(replicated)
  new = _arrays(replicated, 2, q=(4, 3), k=(4, 3), o=(3, 4))
  flat = {Q: new["q"], K: new["k"], O: new["o"], QA: lora[QA]}
  assert state.check_adapters(flat, reshard_on_update=False).keys() == {
      Q, K, O}
  with pytest.raises(ValueError, match="without adapter 'l.q.w_lora_b'"):
    state.replace_base(flat, flat)
  state.add({QA: lora[QA]})
  merged = state.replace_base(flat, {**flat, QB: lora[QB]})
  assert not state.pending
  np.testing.assert_allclose(merged[Q], _want(new["q"], lora[QA], lora[QB]),
                             rtol=1e-5)
  # Later adapters merge into the new base.
  ready = state.add(lora)
  np.testing.assert_array_equal(ready[K], new["k"])
  with pytest.raises(ValueError, match="Adapter 'l.q.w_lora_a' must be"):
    state.check_adapters({QA: np.zeros((4, 2))}, reshard_on_update=False)


def _staging(replicated, dtype=np.float32, transfer="host"):
  expected = {("w",): jax.ShapeDtypeStruct((2, 3), np.dtype(dtype)),
              ("b",): jax.ShapeDtypeStruct((3,), np.dtype(dtype))}
  return vllm_staging.Staging(
      expected, dtype=np.dtype(dtype), sharding=replicated,
      device=replicated.mesh.devices.flat[0], transfer=transfer, torch=TORCH)


def test_staging_names_the_parameter_that_does_not_fit(replicated):
  staging = _staging(replicated)
  assert staging.nbytes == 36 and staging.bytes_of([("b",)]) == 12
  good = _arrays(replicated, 0, w=(2, 3), b=(3,))
  flat = {("w",): good["w"], ("b",): good["b"]}
  staging.check(flat, allow_reshard=False, subset=False)
  staging.check({("w",): good["w"]}, allow_reshard=False, subset=True)
  cases = [
      ({**flat, ("x",): good["b"]}, False, "parameter 'x', which the engine"),
      ({("w",): good["w"]}, False, "missing parameter 'b'"),
      ({**flat, ("b",): good["w"]}, False, "'b' has shape"),
      ({**flat, ("b",): np.zeros(3)}, False, "not a jax.Array"),
      ({**flat, ("b",): good["b"].astype(np.float16)}, False, "dtype"),
      ({**flat, ("b",): jax.device_put(np.zeros(3, np.float32))}, False,
       "sharding"),
  ]
  for bad, reshard, match in cases:
    with pytest.raises(ValueError, match=match):
      staging.check(bad, allow_reshard=reshard, subset=False)
  # With resharding, any fully addressable layout and dtype will do.
  staging.check({**flat, ("b",): jax.device_put(np.zeros(3, np.float16))},
                allow_reshard=True, subset=False)


@pytest.mark.parametrize("transfer", ["host", "dlpack"])
def test_staging_turns_parameters_into_tensors(replicated, transfer):
  x = _arrays(replicated, 3, w=(2, 3))["w"]
  out = _staging(replicated, transfer=transfer).to_torch(x)
  np.testing.assert_array_equal(out, np.asarray(x))
  # Another dtype goes through one host copy, bfloat16 by its bits.
  bf16 = _staging(replicated, dtype=ml_dtypes.bfloat16).to_torch(x)
  assert bf16.dtype == ml_dtypes.bfloat16
  np.testing.assert_array_equal(bf16, np.asarray(x).astype(bf16.dtype))


def test_sampling_params_are_greedy_or_sampled_and_forbid_pad():
  vllm = types.SimpleNamespace(SamplingParams=dict)
  greedy = base_rollout.RolloutConfig(max_tokens_to_generate=5, top_p=None,
                                      temperature=0.9, return_logprobs=True)
  got = vllm_requests.sampling_params(vllm, greedy, seed=7, stop=[1], pad=0,
                                      forbid_pad_token=True)
  assert (got["temperature"], got["top_p"], got["top_k"]) == (0.0, 1.0, 0)
  assert got["logit_bias"] == {0: float("-inf")} and got["logprobs"] == 0
  sampled = base_rollout.RolloutConfig(max_tokens_to_generate=5, top_p=0.8,
                                       top_k=4, temperature=0.7)
  got = vllm_requests.sampling_params(vllm, sampled, seed=7, stop=[0], pad=0,
                                      forbid_pad_token=True)
  assert (got["temperature"], got["top_p"], got["top_k"]) == (0.7, 0.8, 4)
  assert got["logit_bias"] is None  # pad is a stop token here.
  assert got["seed"] == 7 and got["stop_token_ids"] == [0]
  assert [vllm_requests.next_power_of_2(n) for n in (0, 1, 5, 8)] == [
      1, 1, 8, 8]


def _lp(value):
  return types.SimpleNamespace(logprob=value)


def test_completions_end_before_the_stop_token():
  outs = [types.SimpleNamespace(outputs=[types.SimpleNamespace(
      token_ids=toks, logprobs=[{t: _lp(-0.5 * (i + 1))}
                                for i, t in enumerate(toks)])])
          for toks in ([5, 6, 1], [7, 8])]
  tokens, logprobs = vllm_requests.completions(outs, stop=[1],
                                               return_logprobs=True)
  assert [t.tolist() for t in tokens] == [[5, 6], [7, 8]]
  assert [l.tolist() for l in logprobs] == [[-0.5, -1.0], [-0.5, -1.0]]
  assert vllm_requests.completions(outs, stop=[1],
                                   return_logprobs=False)[1] == []


def test_scoring_requests_strip_padding_and_read_prompt_logprobs():
  prompts = np.array([[0, 0, 5, 6], [7, 8, 9, 4]])
  completions = np.array([[3, 0, 4, 0], [0, 0, 0, 0]])
  inputs, spans = vllm_requests.scoring_inputs(prompts, completions, pad=0)
  assert inputs == [{"prompt_token_ids": [5, 6, 3, 0, 4]},
                    {"prompt_token_ids": [7, 8, 9, 4]}]
  assert spans == [(2, 3), (4, 0)]
  outs = [types.SimpleNamespace(prompt_logprobs=[None] + [
      {t: _lp(-float(t))} for t in inp["prompt_token_ids"][1:]])
          for inp in inputs]
  got = vllm_requests.scored_logps(outs, inputs, spans, completions.shape)
  np.testing.assert_array_equal(got, [[-3, -0, -4, 0], [0, 0, 0, 0]])


def test_an_engines_shared_memory_goes_and_no_other(tmp_path):
  engine_dir, shm = tmp_path / "engine", tmp_path / "shm"
  engine_dir.mkdir()
  shm.mkdir()
  # vLLM's rendezvous file, recorded at the engine's start, which its
  # workers remove if they exit normally.
  (engine_dir / "vllm_dist_aa").write_text("")
  vllm_options.note_shared_memory(str(engine_dir))
  (engine_dir / "vllm_dist_aa").unlink()
  ours = [shm / f"vllm_dist_aa-tp:0-[0-1]-cpushm_{rank}" for rank in (0, 1)]
  # Another engine's (one whose uuid starts with ours too), and vLLM's
  # message queues, which are not the engine's to remove.
  others = [shm / "vllm_dist_ab-tp:0-[0-1]-cpushm_0",
            shm / "vllm_dist_aab-tp:0-[0-1]-cpushm_0", shm / "psm_1f"]
  for path in ours + others:
    path.write_bytes(b"x")
  removed = vllm_options.remove_shared_memory(str(engine_dir), str(shm))
  assert sorted(removed) == sorted(str(p) for p in ours)
  assert not any(p.exists() for p in ours)
  assert all(p.exists() for p in others)
  # An engine directory that is already gone: nothing to name them by.
  assert vllm_options.remove_shared_memory(str(tmp_path / "gone"),
                                           str(shm)) == []


class _TimedOutLlm:
  """Stands in for vLLM at its execute-model timeout (which no test can
  bring about on demand)."""

  def generate(self, inputs, params, use_tqdm):
    del inputs, params, use_tqdm
    raise TimeoutError("RPC call to execute_model timed out.")


# Takes an exclusive flock on argv[1], says "up", sleeps.
_LOCK_AND_SLEEP = (
    "import fcntl, os, sys, time\n"
    "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
    "fcntl.flock(fd, fcntl.LOCK_EX)\n"
    "print('up', flush=True)\n"
    "time.sleep(60)\n")


def test_a_timeout_aborts_the_workers_which_print_their_stacks(
    tmp_path, caplog):
  # A child titled as vLLM titles its workers, started with the
  # environment worker_environment gives them, holding a file lock; and a
  # child that is not one.
  lock = tmp_path / "held.lock"
  worker = subprocess.Popen(
      ["VLLM::Worker_TP0", "-c", _LOCK_AND_SLEEP, str(lock)],
      executable=sys.executable, env={**os.environ, "PYTHONFAULTHANDLER": "1"},
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  other = subprocess.Popen(["sleep", "60"])
  try:
    assert worker.stdout.readline() == "up\n"
    with pytest.raises(TimeoutError, match="execute_model"):
      vllm_options.generate(_TimedOutLlm(), [], None)
    _, err = worker.communicate(timeout=30)
    assert worker.returncode == -signal.SIGABRT, err
    # Its stack: where it was (after its print, or in the sleep).
    assert "Fatal Python error: Aborted" in err, err
    assert 'File "<string>", line ' in err, err
    assert other.poll() is None
    # The log named the lock the worker held (before the abort ended it).
    logged = [r.getMessage() for r in caplog.records
              if "File locks held" in r.getMessage()]
    assert len(logged) == 1, caplog.text
    assert f"{lock}: FLOCK lock taken by pid {worker.pid}" in logged[0]
  finally:
    for proc in (worker, other):
      proc.kill()
      proc.wait()


def test_held_file_locks_name_a_lock_that_outlived_its_taker(tmp_path):
  # The taker forks a child that keeps the lock's descriptor, then ends:
  # the lock lives on in the child, which is what a waiter waits for.
  lock = tmp_path / "inherited.lock"
  code = _LOCK_AND_SLEEP.replace(
      "print('up', flush=True)\n",
      "if os.fork():\n"
      "  os._exit(0)\n"
      "print(os.getpid(), flush=True)\n")
  taker = subprocess.Popen([sys.executable, "-c", code, str(lock)],
                           stdout=subprocess.PIPE, text=True)
  child = int(taker.stdout.readline())
  try:
    assert taker.wait(timeout=30) == 0
    mine = [line for line in vllm_options.held_file_locks()
            if line.startswith(f"{lock}:")]
    assert len(mine) == 1, mine
    assert mine[0].startswith(
        f"{lock}: FLOCK lock taken by pid {taker.pid} (gone); open in pid"
        f" {child} ("), mine
  finally:
    os.kill(child, signal.SIGKILL)
  # Once the last holder is gone, so is the lock.
  for _ in range(100):
    if not any(line.startswith(f"{lock}:")
               for line in vllm_options.held_file_locks()):
      break
    time.sleep(0.05)
  else:
    pytest.fail(f"{lock} still locked after its holder's end")
