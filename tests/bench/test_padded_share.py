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

"""Padded-token share: counted from train batches, recorded, reported."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tunix.rl import common

from tunix_mcjax import packing
from tunix_mcjax import telemetry
from tunix_mcjax.bench import arms
from tunix_mcjax.bench import render
from tunix_mcjax.bench import report as report_lib

PAD = 0


def _example(prompt_lens, completion_masks, prompt_width=6):
  """Left-padded prompts of the given lengths; completions by their masks."""
  cm = np.asarray(completion_masks, np.int32)
  rows, width = cm.shape
  p = np.zeros((rows, prompt_width), np.int32)
  for i, n in enumerate(prompt_lens):
    p[i, prompt_width - n:] = 7
  c = np.where(cm > 0, 9, PAD).astype(np.int32)
  return common.TrainExample(
      prompt_ids=jnp.asarray(p), prompt_mask=jnp.asarray(p != PAD, jnp.int32),
      completion_ids=jnp.asarray(c), completion_mask=jnp.asarray(cm),
      advantages=jnp.ones((rows,), jnp.float32), ref_per_token_logps=None,
      old_per_token_logps=None)


# Row 0: prompt 2, completion runs to index 3 (a masked token at 1 inside
# counts: 4). Row 1: prompt 5, completion 1. Row 2: no loss-bearing token
# (its prompt of 6 is padding for the loss). Width 6 + 5 = 11 per row.
EXAMPLE = dict(prompt_lens=[2, 5, 6],
               completion_masks=[[1, 0, 1, 1, 0], [1, 0, 0, 0, 0],
                                 [0, 0, 0, 0, 0]])


def test_train_batch_tokens_counts_what_the_loss_reads():
  tokens, slots = telemetry.train_batch_tokens([_example(**EXAMPLE)])
  assert slots == 3 * 11
  assert tokens == (2 + 4) + (5 + 1) + 0
  # Two micro-batches add up; an already packed example is not counted
  # twice (the packer reports it).
  packed, stats = packing.pack_micro_batch(
      [_example(**EXAMPLE)], 16, agree=lambda k: k)
  assert telemetry.train_batch_tokens(
      [_example(**EXAMPLE), _example(**EXAMPLE), packed]) == (24, 66)
  # The packer's real tokens are the same count; its unpacked slots too.
  assert (stats.real_tokens, stats.unpacked_slots) == (tokens, slots)
  assert stats.slots == stats.rows * 16


def test_device_masks_are_counted_on_device_like_host_ones():
  ex = _example(**EXAMPLE)
  host = ex.replace(prompt_mask=np.asarray(ex.prompt_mask),
                    completion_mask=np.asarray(ex.completion_mask))
  assert telemetry.train_batch_tokens([host]) == (12, 33)
  # Device masks: counted where they are (no host-to-device transfer), the
  # count read only with the step's numbers.
  clock = telemetry.StepClock()
  with jax.transfer_guard("disallow"):
    clock.add_train_batch([ex, ex])
  assert clock.train["tokens"] == 0
  numbers = dict(zip(telemetry.HOST_FIELDS, clock.host_numbers(1.0, 10)))
  assert (numbers["train_tokens"], numbers["train_slots"]) == (24, 66)


def test_record_share_pools_tokens_over_hosts():
  clock = telemetry.StepClock()
  clock.add_train_batch([_example(**EXAMPLE)])  # 12 of 33.
  h0 = clock.host_numbers(1.0, 10)
  clock.reset(0.0)
  # 30 of 30: no padding at all on host 1.
  clock.add_train_batch([_example([6, 6], np.ones((2, 9)))])
  h1 = clock.host_numbers(1.0, 10)
  meta = telemetry.StepMeta(step=1, backend="mcjax", loss=None,
                            grad_norm=None, prompts_digest=None,
                            publish_bytes=None, optimizations=None)
  rec = telemetry.build_record(np.stack([h0, h1]), meta)
  # Pooled (1 - 42 / 63), not the mean of the hosts' shares (0.318).
  assert rec.unpacked_padded_token_share == pytest.approx(1 - 42 / 63)
  assert rec.padded_token_share is None
  # Packing adds the same rows' unpacked count and its own slots.
  clock.reset(0.0)
  clock.add_packing(packing.PackStats(local_rows=1, rows=2, real_tokens=12,
                                      slots=32, unpacked_slots=33))
  rec = telemetry.build_record(clock.host_numbers(1.0, 10)[None], meta)
  assert rec.padded_token_share == pytest.approx(1 - 12 / 32)
  assert rec.unpacked_padded_token_share == pytest.approx(1 - 12 / 33)
  # No train batch seen: unknown, not 0.
  clock.reset(0.0)
  rec = telemetry.build_record(clock.host_numbers(1.0, 10)[None], meta)
  assert rec.unpacked_padded_token_share is None


WORKLOAD = arms.Workload(steps=2, passes=2, batch_size=4, num_generations=2)
MODE = arms.BenchMode(
    name="t", micro=None, workload=WORKLOAD, launches=2, trace=False,
    arms=arms.packing_arms(2, budget=64))


def _runs(tmp_path, shares):
  """Per arm and launch: (padded_token_share, unpacked share) per step."""
  runs = {}
  for name, per_launch in shares.items():
    runs[name] = []
    for k, per_step in enumerate(per_launch):
      recs = [{"step": s, "step_time_s": 1.0, "completion_tokens": 10,
               "completion_len_mean": 5.0, "completion_len_max": 8,
               "truncated_share": 0.0, "prompts_digest": f"p{s % 2}",
               "phases": {}, "host_overhead": {}, "straggler_wait": {},
               "padded_token_share": pk, "unpacked_padded_token_share": up}
              for s, (pk, up) in enumerate(per_step, start=1)]
      path = tmp_path / f"{name}{k}.jsonl"
      path.write_text("".join(json.dumps(r) + "\n" for r in recs))
      runs[name].append({"returncode": 0, "metrics": str(path),
                         "wall_s": 10.0})
  return runs


def test_report_shows_packed_and_unpacked_shares(tmp_path):
  # Only steps 3 and 4 (the second pass) are scored.
  shares = {
      "mcjax-dapo": [[(None, 0.9), (None, 0.9), (None, 0.3), (None, 0.4)],
                     [(None, 0.9), (None, 0.9), (None, 0.5), (None, 0.5)]],
      "mcjax-dapo-packed": [[(0.9, 0.9), (0.9, 0.9), (0.1, 0.3), (0.2, 0.4)],
                            [(0.9, 0.9), (0.9, 0.9), (0.2, 0.5), (0.2, 0.5)]],
  }
  rep = report_lib.build_report(MODE, _runs(tmp_path, shares), None)
  unpacked = rep["arms"]["mcjax-dapo"]["work_extras"]
  assert unpacked["packed"] is False
  assert unpacked["padded_token_share"] == pytest.approx(0.35)
  assert unpacked["unpacked_padded_token_share"] == pytest.approx(0.35)
  assert unpacked["padded_token_share_by_launch"] == pytest.approx(
      [0.35, 0.5])
  packed = rep["arms"]["mcjax-dapo-packed"]["work_extras"]
  assert packed["packed"] is True
  assert packed["padded_token_share"] == pytest.approx(0.15)
  assert packed["unpacked_padded_token_share"] == pytest.approx(0.35)
  assert packed["padded_token_share_by_launch"] == pytest.approx([0.15, 0.2])
  md = render.markdown(rep)
  assert "| 0.350 | 0.350 |" in md
  assert "| 0.150 (packed) | 0.350 |" in md


def test_a_share_some_steps_lack_is_not_reported(tmp_path):
  shares = {
      "mcjax-dapo": [[(None, 0.9), (None, 0.9), (None, 0.3), (None, None)]] * 2,
      "mcjax-dapo-packed": [[(0.9, 0.9)] * 4] * 2,
  }
  rep = report_lib.build_report(MODE, _runs(tmp_path, shares), None)
  extras = rep["arms"]["mcjax-dapo"]["work_extras"]
  assert extras["padded_token_share"] is None
  assert extras["padded_token_share_by_launch"] == []
  assert "| n/a | n/a |" in render.markdown(rep)


def test_packing_arm_flags_and_refusal():
  unpacked, packed = arms.MODES["packing"].arms
  assert not any("max_seq_token" in f for f in unpacked.job_flags())
  assert "--max_seq_token_per_tpu=1056" in packed.job_flags()
  assert arms.MODES["packing"].workload.learner == "dapo"
  with pytest.raises(ValueError, match="mcjax only"):
    arms.Arm(name="x", backend="tunix", num_hosts=1, devices_per_host=1,
             max_seq_token_per_tpu=64)
