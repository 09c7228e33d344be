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

"""Step breakdown from profiler traces: constructed and recorded traces."""

import gzip
import json
import sys
import time

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec
import pytest

from tunix_mcjax import telemetry
from tunix_mcjax.bench import traces

P = telemetry.PHASE_TRACE_PREFIX


def _x(name, ts, dur, pid=1, **args):
  return {"ph": "X", "pid": pid, "tid": 1, "ts": ts, "dur": dur,
          "name": name, "args": args}


def test_constructed_trace_splits_exactly():
  # Step window [100, 1100] us (end of start_trace .. start of stop_trace).
  # Two devices: ordinal 0 (CPU thunks) and a GPU plane (process 2).
  events = [
      {"ph": "M", "pid": 2, "name": "process_name",
       "args": {"name": "/device:GPU:0"}},
      _x("$profiler.py:1 start_trace", 0, 100),
      _x("$profiler.py:2 stop_trace", 1100, 50),
      _x(P + "generate", 100, 400),  # [100, 500]
      _x(P + "train", 600, 400),  # [600, 1000]
      # Device 0: overlapping compute ops in generate (union [150, 450]).
      _x("fusion", 150, 200, hlo_op="fusion.1", device_ordinal="0"),
      _x("fusion", 250, 200, hlo_op="fusion.2", device_ordinal="0"),
      # Device 0: a collective in train [650, 850].
      _x("all-gather", 650, 200, hlo_op="all-gather.3", device_ordinal="0"),
      # Closing markers of CPU thunks are not work.
      _x("end: fusion", 350, 500, hlo_op="fusion.1", device_ordinal="0"),
      # Device 0: work outside the phases [520, 570].
      _x("copy", 520, 50, hlo_op="copy.4", device_ordinal="0"),
      # GPU plane: a kernel without hlo_op in train [600, 700].
      _x("gemm_kernel", 600, 100, pid=2),
  ]
  b = traces.analyse_events(events)
  us = 1e-6
  assert b.devices == 2 and b.device_events == 5
  # Device 0: busy 300 + 50 + 200, collective 200 -> compute 350, host 450.
  # GPU: busy 100 = compute, host 900. Means: 225 / 100 / 675.
  assert b.step.wall_s == pytest.approx(1000 * us)
  assert (b.step.compute_s, b.step.collective_s, b.step.host_s) == (
      pytest.approx((225 * us, 100 * us, 675 * us)))
  assert b.overhead == pytest.approx(1 - 225 / 1000)
  gen, train, other = (b.phases[k] for k in ("generate", "train", "other"))
  assert (gen.wall_s, gen.compute_s, gen.collective_s, gen.host_s) == (
      pytest.approx((400 * us, 150 * us, 0.0, 250 * us)))
  assert (train.wall_s, train.compute_s, train.collective_s,
          train.host_s) == pytest.approx((400 * us, 50 * us, 100 * us,
                                          250 * us))
  # Outside the phases: [500, 600] and [1000, 1100].
  assert (other.wall_s, other.compute_s, other.host_s) == pytest.approx(
      (200 * us, 25 * us, 175 * us))


def test_recorded_trace_of_known_content(tmp_path):
  """A real JAX trace: a host-only phase, a compute phase, a collective."""
  devices = jax.devices()[:2]
  mesh = jax.sharding.Mesh(devices, ("x",))
  x = jax.device_put(jnp.ones((256, 1024)),
                     NamedSharding(mesh, PartitionSpec("x")))
  compute = jax.jit(lambda a: jnp.tanh(jnp.tanh(a) * 2.0).sum(axis=1))
  gather = jax.jit(lambda a: a * 1.0,
                   out_shardings=NamedSharding(mesh, PartitionSpec()))
  jax.block_until_ready((compute(x), gather(x)))  # Compiled before tracing.
  clock = telemetry.StepClock()
  jax.profiler.start_trace(str(tmp_path / "host0"))
  with clock.phase("admission"):
    time.sleep(0.2)  # Host only.
  with clock.phase("train"):
    for _ in range(20):
      jax.block_until_ready(compute(x))
  with clock.phase("publish"):
    for _ in range(5):
      jax.block_until_ready(gather(x))
  jax.profiler.stop_trace()

  result = traces.analyse_dir(tmp_path)
  assert result is not None and result["slowest_host"] == 0
  ph = result["phases"]
  assert ph["admission"]["wall_s"] == pytest.approx(0.2, abs=0.05)
  assert ph["admission"]["compute_s"] + ph["admission"][
      "collective_s"] < 0.01
  assert ph["admission"]["host_s"] > 0.19
  assert ph["train"]["compute_s"] > 0
  assert ph["train"]["collective_s"] == 0
  assert ph["publish"]["collective_s"] > 0
  step = result["step"]
  assert step["wall_s"] >= sum(p["wall_s"] for p in ph.values()) - 1e-6
  assert step["wall_s"] == pytest.approx(
      step["compute_s"] + step["collective_s"] + step["host_s"])
  assert 0.5 < result["overhead"] < 1.0  # Mostly the host's sleep.


def test_no_traces_is_none(tmp_path):
  assert traces.analyse_dir(tmp_path / "missing") is None
  with pytest.raises(ValueError, match="no complete"):
    traces.analyse_events([])


def test_json_and_msgspec_decode_the_same_events(tmp_path, monkeypatch):
  events = [{"ph": "M", "pid": 2, "name": "process_name",
             "args": {"name": "/device:GPU:0"}},
            _x("$profiler.py:1 start_trace", 0, 100),
            _x("fusion", 150.5, 200, hlo_op="fusion.1", device_ordinal="0")]
  path = tmp_path / "t.trace.json.gz"
  with gzip.open(path, "wt") as f:
    json.dump({"traceEvents": events}, f)
  fast = traces.load_events(path)
  monkeypatch.setitem(sys.modules, "msgspec", None)  # json instead.
  assert traces.load_events(path) == fast == events
