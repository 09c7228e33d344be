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

"""bench.memory_fit: parameter counts, the per-device sum, calibration."""

import dataclasses
import math

import numpy as np
import pytest

from tunix_mcjax.bench import memory_fit
from tunix_mcjax.bench import micro

WORK = memory_fit.Workload(train_rows=8, engine_rows=8, seq=72, kv_len=80)


def test_parameter_counts():
  shapes = micro.qwen3_shapes()
  assert memory_fit.QWEN3_0P6B.params == sum(
      math.prod(s) for s in shapes.values())
  # Published sizes: 0.6B, 1.7B, 8.2B (tied, tied, untied embeddings).
  assert round(memory_fit.QWEN3_0P6B.params / 1e6) == 596
  assert round(memory_fit.QWEN3_1P7B.params / 1e8) == 17
  assert round(memory_fit.QWEN3_8B.params / 1e8) == 82


def test_host_memory_sums_its_parts():
  shape = memory_fit.QWEN3_0P6B
  p = shape.params * 2
  b = memory_fit.host_memory(shape, workload=WORK, hosts=2,
                             devices_per_host=4, engine_tp=2)
  assert b.trainer_state == pytest.approx(3 * p / 8)
  assert b.grads == b.reference == pytest.approx(p / 8)
  assert b.engine == b.publish_transient == pytest.approx(p / 2)
  assert b.kv_cache == pytest.approx(8 * 80 * 28 * 2 * 8 * 128 * 2 / 2)
  assert b.peak_per_host == pytest.approx(4 * b.peak_per_device)
  assert b.peak_per_device == pytest.approx(b.static + max(
      b.grads + b.train_transient, b.kv_cache, b.publish_transient))


def test_chunking_shrinks_only_the_logits_term():
  shape = memory_fit.QWEN3_0P6B
  full = memory_fit.host_memory(shape, workload=WORK, hosts=2,
                                devices_per_host=1)
  part = memory_fit.host_memory(
      shape, workload=dataclasses.replace(WORK, chunk=16), hosts=2,
      devices_per_host=1)
  cal = memory_fit.DEFAULT_CALIBRATION
  saved = cal.logits_copies * 4 * 8 * (72 - 16) * shape.vocab
  assert full.train_transient - part.train_transient == pytest.approx(saved)
  assert full.static == part.static


def test_calibrate_recovers_the_factors():
  shape = memory_fit.QWEN3_0P6B
  truth = memory_fit.Calibration(logits_copies=3.5,
                                 act_bytes_per_token_layer_width=12.0)

  def train_peak(chunk):
    b = memory_fit.host_memory(
        shape, workload=dataclasses.replace(WORK, chunk=chunk), hosts=2,
        devices_per_host=1, calibration=truth)
    return (b.static + b.grads + b.train_transient) * b.devices_per_host

  cal = memory_fit.calibrate(
      shape, workload=WORK, hosts=2, devices_per_host=1, param_bytes=2,
      peak_unchunked=train_peak(None), peak_chunked=train_peak(16), chunk=16)
  np.testing.assert_allclose(cal.logits_copies, 3.5)
  np.testing.assert_allclose(cal.act_bytes_per_token_layer_width, 12.0)


def test_fit_table_rows_and_rendering():
  rows = memory_fit.fit_table()
  # 3 models x (v5e: tp 1, 8; v5p: tp 1, 4; H200: tp 1).
  assert len(rows) == 3 * 5
  for r in rows:
    assert r["chunked"]["peak_gb"] <= r["unchunked"]["peak_gb"]
  by = {(r["model"], r["host"], r["engine_tp"]): r for r in rows}
  # 8B bf16 weights (16.4 GB) alone exceed a 16 GB v5e chip unsharded.
  assert not by[("Qwen3-8B", "v5e host (8 x 16 GB)", 1)]["chunked"]["fits"]
  assert by[("Qwen3-0.6B", "H200 (1 x 141 GB)", 1)]["chunked"]["fits"]
  text = memory_fit.render_table(rows)
  assert text.count("\n") == len(rows) + 1


def test_rejects_bad_sizes():
  with pytest.raises(ValueError):
    memory_fit.Workload(train_rows=0, engine_rows=1, seq=1, kv_len=1)
  with pytest.raises(ValueError):
    memory_fit.host_memory(memory_fit.QWEN3_0P6B, workload=WORK, hosts=0,
                           devices_per_host=1)


def test_calibrate_from_xla_recovers_the_factors():
  shape = memory_fit.QWEN3_0P6B
  full = memory_fit.logits_bytes(shape, rows=4, seq=72)
  part = memory_fit.logits_bytes(shape, rows=4, seq=72, chunk=16)
  act = 4 * 72 * shape.layers * shape.embed
  cal = memory_fit.calibrate_from_xla(
      shape, rows=4, seq=72, temp_unchunked=6 * full + 20 * act,
      temp_chunked=6 * part + 20 * act, chunk=16)
  np.testing.assert_allclose(cal.logits_copies, 6.0)
  np.testing.assert_allclose(cal.act_bytes_per_token_layer_width, 20.0)


def test_no_reference_without_beta():
  b = memory_fit.host_memory(memory_fit.QWEN3_0P6B, workload=WORK, hosts=2,
                             devices_per_host=1, reference=False)
  assert b.reference == 0


def test_a_donating_publication_holds_only_its_temporaries():
  shape = memory_fit.QWEN3_0P6B
  p = shape.params * 2
  cal = dataclasses.replace(memory_fit.DEFAULT_CALIBRATION,
                            publish_copies=0.6)
  b = memory_fit.host_memory(shape, workload=WORK, hosts=2,
                             devices_per_host=4, engine_tp=2,
                             calibration=cal)
  assert b.publish_transient == pytest.approx(0.6 * p / 2)
  assert b.engine == pytest.approx(p / 2)


def test_the_policy_snapshot_is_host_memory_not_the_devices():
  shape = memory_fit.QWEN3_0P6B
  p = shape.params * 2
  b = memory_fit.host_memory(shape, workload=WORK, hosts=2,
                             devices_per_host=4)
  assert b.host_snapshot == pytest.approx(p / 8)
  none = memory_fit.host_memory(
      shape, workload=WORK, hosts=2, devices_per_host=4,
      calibration=dataclasses.replace(memory_fit.DEFAULT_CALIBRATION,
                                      host_snapshot_copies=0.0))
  assert none.host_snapshot == 0
  # Not in what a device holds.
  assert b.peak_per_device == none.peak_per_device
