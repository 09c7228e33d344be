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

"""The step record: its builder on constructed numbers, and one schema."""

import dataclasses
import inspect
import json
import time
import types

import numpy as np
import pytest

from tunix_mcjax import admission
from tunix_mcjax import telemetry
from tunix_mcjax.telemetry import stock as telemetry_stock

_META = telemetry.StepMeta(
    step=3, backend="mcjax", loss=0.5, grad_norm=1.5, prompts_digest="abc",
    publish_bytes=1024, optimizations={"async_metrics": True},
)


def _host(step_s, phases, in_xhost, overhead=(0.0, 0.0), **extra):
  """One host's row of numbers, laid out as telemetry.HOST_FIELDS."""
  values = dict.fromkeys(telemetry.HOST_FIELDS, 0.0)
  values.update(reward_mean=0.5, len_mean=4.0, step_s=step_s)
  values.update({f"phase/{p}": v for p, v in phases.items()})
  values.update({f"in_xhost/{p}": v for p, v in in_xhost.items()})
  values.update({f"overhead/{o}": v
                 for o, v in zip(telemetry.HOST_OVERHEADS, overhead)})
  values.update(extra)
  return [values[f] for f in telemetry.HOST_FIELDS]


def test_slowest_host_and_straggler_waits():
  # Host 0 did more work and arrived last at every cross-host call; host 1
  # waited for it there (its extra time in the calls).
  h0 = _host(10.0, {"generate": 6.0, "logps": 1.0, "train": 2.0,
                    "publish": 0.5, "learner_host": 0.5},
             {"logps": 1.0, "train": 2.0, "publish": 0.5},
             gen_rows=8, gen_tokens=40, gen_max_len=6, gen_truncated=2,
             decode_iterations=6, prompt_tokens=11)
  h1 = _host(10.2, {"generate": 3.0, "logps": 2.5, "train": 3.5,
                    "publish": 0.7, "learner_host": 0.5},
             {"logps": 2.5, "train": 3.5, "publish": 0.7},
             gen_rows=8, gen_tokens=24, gen_max_len=4, gen_truncated=0,
             decode_iterations=4, prompt_tokens=9)
  rec = telemetry.build_record(np.array([h0, h1], np.float32), _META)
  assert rec.slowest_host == 0  # 10.0 busy vs 10.2 - 3.2 waiting.
  assert rec.step_time_s == pytest.approx(10.0)
  assert rec.phases["generate"] == pytest.approx(6.0)
  assert rec.straggler_wait["logps"] == pytest.approx(1.5)
  assert rec.straggler_wait["train"] == pytest.approx(1.5)
  assert rec.straggler_wait["publish"] == pytest.approx(0.2)
  assert rec.straggler_wait["total"] == pytest.approx(3.2)
  assert rec.num_hosts == 2
  assert rec.completion_tokens == 64 and rec.completion_len_max == 6
  assert rec.truncated_share == pytest.approx(2 / 16)
  assert rec.decode_iterations == 6
  assert rec.decode_iter_s == pytest.approx(1.0)  # max(6/6, 3/4).
  assert rec.host_prompt_tokens == [11, 9]
  assert (rec.loss, rec.grad_norm, rec.publish_bytes) == (0.5, 1.5, 1024)


def test_phases_and_overheads_add_up_to_the_step():
  clock = telemetry.StepClock()
  clock.reset(100.0, carried_export_s=0.25)
  clock.phases.update(generate=2.0, logps=1.0, reward=0.5, train=3.0,
                      publish=0.25)
  clock.overhead["gc"] = 0.5
  step_s = clock.finish(108.0, admission_s=0.25)
  assert step_s == 8.0
  assert clock.phases["admission"] == 0.25
  assert clock.phases["learner_host"] == pytest.approx(0.25)
  rec = telemetry.build_record(
      clock.host_numbers(step_s, prompt_tokens=-1)[None, :], _META)
  total = sum(rec.phases.values()) + sum(rec.host_overhead.values())
  assert total == pytest.approx(rec.step_time_s)
  assert rec.straggler_wait["total"] == 0.0 and rec.slowest_host == 0


def test_timed_reward_fns_keep_values_name_and_signature():
  def score(prompts, completions, answer, **kwargs):
    del kwargs
    return [float(len(c) == a) for c, a in zip(completions, answer)]

  clock = telemetry.StepClock()
  (timed,) = telemetry.timed_reward_fns(score, clock)
  assert timed.__name__ == "score"
  assert inspect.signature(timed) == inspect.signature(score)
  assert timed(["p"], ["ab", "c"], answer=[2, 2]) == [1.0, 0.0]
  assert clock.phases["reward"] > 0


def test_learner_metrics_are_read_by_tunix_key():
  clock = telemetry.StepClock()
  clock.add_learner_metrics({"rewards/score/mean": (0.25, np.mean)})
  clock.add_learner_metrics({"completions/mean_length": (6.0, np.mean)})
  assert clock.reward_means == [0.25] and clock.len_means == [6.0]


class _FakeStockCluster:
  """The learner-facing surface of RLCluster that the recorder wraps."""

  def __init__(self):
    self.global_steps = 0
    self.actor_trainer = types.SimpleNamespace(model=None)

  def get_rollout_config(self, mode):
    del mode
    return types.SimpleNamespace(max_tokens_to_generate=4)

  def generate(self, prompts, mode="train", micro_batch_size=None):
    del mode, micro_batch_size
    return types.SimpleNamespace(tokens=[[1, 2]] * len(prompts))

  def get_ref_per_token_logps(self, *args, **kwargs):
    return None

  def get_old_per_token_logps(self, *args, **kwargs):
    return None

  def get_actor_per_token_logps(self, *args, **kwargs):
    return None

  def update_actor(self, *args, **kwargs):
    return None

  def sync_weights(self):
    self.global_steps += 1

  def buffer_metrics(self, metrics, mode="train"):
    del metrics, mode

  def buffer_metrics_async(self, metrics, mode="train", step=0):
    del metrics, mode, step


def test_stock_and_mcjax_records_share_one_schema(tmp_path, monkeypatch):
  monkeypatch.setattr(telemetry_stock.StockClusterRecorder, "_after_update",
                      lambda self, out, kwargs: None)
  cluster = _FakeStockCluster()
  ledger = admission.StepLedger()
  out = tmp_path / "metrics.jsonl"
  recorder = telemetry_stock.StockClusterRecorder(
      cluster, ledger=ledger, metrics_out=str(out))
  assert cluster.step_clock is recorder.step_clock
  ledger.record_batch([0], 2, stats=admission.BatchStats(
      digest="d", prompt_tokens=7), admission_s=0.0)
  ledger.take(2)
  cluster.generate(["a", "b"], mode="train")
  cluster.buffer_metrics({"rewards/score/mean": (1.0, np.mean)})
  cluster.update_actor(None, None)
  cluster.sync_weights()
  recorder.close()
  (stock,) = [json.loads(line) for line in out.read_text().splitlines()]
  mcjax = telemetry.build_record(
      np.zeros((2, len(telemetry.HOST_FIELDS)), np.float32), _META).as_dict()
  assert list(stock) == list(mcjax)
  # `extras` (backend-specific fields) is flattened into the top level.
  assert list(stock) == [f.name for f in dataclasses.fields(
      telemetry.StepRecord) if f.name != "extras"]
  assert set(stock["phases"]) == set(telemetry.PHASES)
  assert stock["step"] == 1 and stock["backend"] == "tunix"
  assert stock["reward_mean"] == 1.0 and stock["completion_tokens"] == 4
  assert stock["host_prompt_tokens"] == [7] and stock["prompts_digest"] == "d"
  assert stock["publish_calls"] == 1
  total = sum(stock["phases"].values()) + sum(stock["host_overhead"].values())
  assert total == pytest.approx(stock["step_time_s"])


def test_a_step_after_a_trace_carries_no_export_from_before_it(
    tmp_path, monkeypatch):
  # Step 1 is traced; writing the trace out starts step 2 late, after step
  # 1's record was exported, so that export is none of step 2's host work
  # (the benchmark's breakdown then exceeded the step under load).
  monkeypatch.setattr(telemetry_stock.StockClusterRecorder, "_after_update",
                      lambda self, out, kwargs: None)
  cluster = _FakeStockCluster()
  recorder = telemetry_stock.StockClusterRecorder(
      cluster, trace_steps=(1,), trace_dir=str(tmp_path / "trace"))
  write = recorder._sink.write  # pylint: disable=protected-access

  def slow_write(record):
    time.sleep(0.2)  # An export as slow as a loaded machine makes it.
    write(record)

  monkeypatch.setattr(recorder._sink, "write", slow_write)  # pylint: disable=protected-access
  for _ in range(2):
    cluster.generate(["a"], mode="train")
    cluster.update_actor(None, None)
    cluster.sync_weights()
  recorder.close()
  _, second = recorder.records
  assert second.host_overhead["metrics_export"] == 0.0
  total = sum(second.phases.values()) + sum(second.host_overhead.values())
  assert total == pytest.approx(second.step_time_s)
  assert second.step_time_s < 0.2  # Not the export before it.


def test_stock_recorder_ends_steps_without_sync_weights():
  # Where actor and rollout share weights the learner skips sync_weights and
  # advances global_steps itself, then buffers the step's perf metrics.
  cluster = _FakeStockCluster()
  recorder = telemetry_stock.StockClusterRecorder(cluster)
  cluster.generate(["a"], mode="train")
  cluster.global_steps += 1
  cluster.buffer_metrics({})
  assert [r.step for r in recorder.records] == [1]
  assert recorder.records[0].publish_calls == 0


def test_record_extras_join_the_top_level():
  meta = dataclasses.replace(_META, extras={"policy_version": 3,
                                            "staleness": 1})
  record = telemetry.build_record(
      np.zeros((2, len(telemetry.HOST_FIELDS)), np.float32), meta).as_dict()
  assert record["policy_version"] == 3 and record["staleness"] == 1
  assert "extras" not in record
  clash = dataclasses.replace(_META, extras={"loss": 1.0})
  with pytest.raises(ValueError, match="shadow fields"):
    telemetry.build_record(
        np.zeros((2, len(telemetry.HOST_FIELDS)), np.float32),
        clash).as_dict()
