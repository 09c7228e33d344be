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

import pathlib

import numpy as np
import pytest

import launch_utils
import train_rl_runs

pytestmark = [pytest.mark.vllm, pytest.mark.multihost, pytest.mark.e2e]

pytest.importorskip("vllm")
pytest.importorskip("maxtext")

TOL = 1e-4
LAYOUTS = ("scanned", "unscanned")

# Runs on each of 2 hosts; prints the host's RESULT record (one per layout).
_PROGRAM = pathlib.Path(__file__).resolve().parents[1] / "support" / (
    "maxtext_vllm_host.py")


@pytest.fixture(scope="module")
def hosts():
  return launch_utils.run_on_hosts(_PROGRAM, timeout=600)


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
