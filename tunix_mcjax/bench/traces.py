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

"""Step breakdown from JAX profiler traces: compute, collectives, host.

A traced step (`--trace_steps`, one trace per host under
`trace_dir/host<i>`) leaves `*.trace.json.gz` (Chrome trace format) next to
the `.xplane.pb`. Device work is every event that names an HLO op (`args.
hlo_op`: XLA's CPU thunks, GPU kernels) or sits on a `/device:` process
(GPU/TPU planes); a device is its `args.device_ordinal`, else its process.
Per device, of the step's wall time (the trace's window: from the end of
`start_trace` to the start of `stop_trace`), then averaged over devices:

- collective (network): the union of device intervals whose op is a
  collective (all-gather, all-reduce, reduce-scatter, all-to-all,
  collective-permute, send/recv, NCCL kernels); on CPU this includes the
  rendezvous wait for the other participants;
- compute: the union of all the device's intervals (a loop op counts
  with its body) minus its collective time;
- host: the rest (Python, dispatch, tokenization, waits on the host).
Per device, because devices wait for each other inside collectives: a
union over devices would count one device's compute as the other's wait.

`overhead = 1 - compute / step`, as the paper's step breakdown. Each phase
(`telemetry.PHASE_TRACE_PREFIX` ranges on the host's threads) gets the same
split within its ranges; the step time outside every phase is "other".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
import dataclasses
import gzip
import json
import os
import pathlib
import re
from typing import Any

from tunix_mcjax import telemetry

COLLECTIVE = re.compile(
    r"all-gather|all-reduce|reduce-scatter|all-to-all|collective-permute|"
    r"collective-broadcast|\bsend\b|\brecv\b|nccl|allgather|allreduce",
    re.IGNORECASE)
OTHER_PHASE = "other"

Interval = tuple[float, float]


def _union(intervals: Iterable[Interval]) -> list[Interval]:
  out: list[list[float]] = []
  for a, b in sorted(intervals):
    if b <= a:
      continue
    if out and a <= out[-1][1]:
      out[-1][1] = max(out[-1][1], b)
    else:
      out.append([a, b])
  return [(a, b) for a, b in out]


def _length(intervals: Sequence[Interval]) -> float:
  return sum(b - a for a, b in intervals)


def _clip(intervals: Sequence[Interval], windows: Sequence[Interval]
          ) -> list[Interval]:
  """The parts of (unioned) `intervals` inside (unioned) `windows`."""
  out = []
  for a, b in intervals:
    for wa, wb in windows:
      lo, hi = max(a, wa), min(b, wb)
      if hi > lo:
        out.append((lo, hi))
  return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class Split:
  """Seconds of a window: device compute, collectives, host (the rest)."""

  wall_s: float
  compute_s: float
  collective_s: float
  host_s: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepBreakdown:
  """One host's traced step.

  Attributes:
    step: the step's split.
    overhead: 1 - compute / step wall time.
    phases: per phase (and "other": the step outside every phase), its
      split.
    device_events: device events seen (0: the trace has no device work).
    devices: devices seen (the splits are their means).
  """

  step: Split
  overhead: float
  phases: dict[str, Split]
  device_events: int
  devices: int

  def as_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


def load_events(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
  """The events of a `*.trace.json.gz` (or plain `.json`) trace.

  Decoded by msgspec where it is installed (twice as fast as `json` on the
  millions of Python-call events a traced compiling step holds), else by
  `json`; the same dicts either way.
  """
  p = pathlib.Path(path)
  opener = gzip.open if p.suffix == ".gz" else open
  with opener(p, "rb") as f:
    raw = f.read()
  try:
    import msgspec  # pylint: disable=g-import-not-at-top
  except ImportError:
    return json.loads(raw)["traceEvents"]
  return msgspec.json.decode(raw)["traceEvents"]


def find_host_traces(trace_dir: str | os.PathLike[str]
                     ) -> dict[int, pathlib.Path]:
  """host index -> its latest `*.trace.json.gz` under `trace_dir/host<i>`."""
  out = {}
  root = pathlib.Path(trace_dir)
  if not root.is_dir():
    return out
  for host_dir in root.glob("host*"):
    m = re.fullmatch(r"host(\d+)", host_dir.name)
    files = sorted(host_dir.rglob("*.trace.json.gz"),
                   key=lambda q: q.stat().st_mtime)
    if m and files:
      out[int(m.group(1))] = files[-1]
  return out


def _split(window: Sequence[Interval],
           device: Mapping[Any, Sequence[Interval]],
           collective: Mapping[Any, Sequence[Interval]]) -> Split:
  """`window`'s split, averaged over devices (unioned intervals each)."""
  wall = _length(window)
  keys = sorted(set(device) | set(collective), key=str) or [None]
  comp = coll = busy = 0.0
  for k in keys:
    c = _length(_clip(collective.get(k, []), window))
    b = _length(_clip(_union([*device.get(k, []), *collective.get(k, [])]),
                      window))
    coll += c
    busy += b
    comp += max(0.0, b - c)
  n = len(keys)
  return Split(wall_s=wall * 1e-6, compute_s=comp / n * 1e-6,
               collective_s=coll / n * 1e-6,
               host_s=max(0.0, wall - busy / n) * 1e-6)


def analyse_events(events: Sequence[Mapping[str, Any]]) -> StepBreakdown:
  """The breakdown of one host's trace of one step (times in us)."""
  procs = {e["pid"]: e.get("args", {}).get("name", "")
           for e in events
           if e.get("ph") == "M" and e.get("name") == "process_name"}
  xs = [e for e in events if e.get("ph") == "X" and "dur" in e]
  if not xs:
    raise ValueError("The trace has no complete ('X') events.")
  device_pids = {pid for pid, n in procs.items()
                 if str(n).startswith("/device:")}
  device: dict[Any, list[Interval]] = {}
  collective: dict[Any, list[Interval]] = {}
  phases: dict[str, list[Interval]] = {}
  start, end = None, None
  for e in xs:
    name = str(e.get("name", ""))
    args = e.get("args") or {}
    if name.startswith("$"):
      # The Python tracer's calls (nearly all events of a compiling step):
      # none is device work or a phase; two of them mark the window.
      if name.endswith(" start_trace"):
        b = float(e["ts"]) + float(e["dur"])
        start = b if start is None else max(start, b)
      elif name.endswith(" stop_trace"):
        a = float(e["ts"])
        end = a if end is None else min(end, a)
      if not args and e.get("pid") not in device_pids:
        continue
    a, b = float(e["ts"]), float(e["ts"]) + float(e["dur"])
    if name.startswith(telemetry.PHASE_TRACE_PREFIX):
      phases.setdefault(name[len(telemetry.PHASE_TRACE_PREFIX):],
                        []).append((a, b))
      continue
    on_device = e.get("pid") in device_pids
    if name.startswith("end: ") or not ("hlo_op" in args or on_device):
      continue
    op = str(args.get("hlo_op", name))
    key = (f"device {args['device_ordinal']}" if "device_ordinal" in args
           else f"pid {e.get('pid')}")
    kind = (collective if COLLECTIVE.search(op) or COLLECTIVE.search(name)
            else device)
    kind.setdefault(key, []).append((a, b))
  if start is None:
    start = min(float(e["ts"]) for e in xs)
  if end is None or end <= start:
    end = max(float(e["ts"]) + float(e["dur"]) for e in xs)
  step_window = [(start, end)]
  device_u = {k: _union(v) for k, v in device.items()}
  coll_u = {k: _union(v) for k, v in collective.items()}
  step = _split(step_window, device_u, coll_u)
  out = {}
  for name, ranges in phases.items():
    out[name] = _split(_clip(_union(ranges), step_window), device_u, coll_u)
  # The step outside every phase (between phases, and the leftover host
  # work such as the learner's own bookkeeping).
  covered = _union([r for rs in phases.values() for r in rs])
  rest, cursor = [], start
  for a, b in _clip(covered, step_window):
    if a > cursor:
      rest.append((cursor, a))
    cursor = max(cursor, b)
  if end > cursor:
    rest.append((cursor, end))
  out[OTHER_PHASE] = _split(rest, device_u, coll_u)
  return StepBreakdown(
      step=step,
      overhead=(1.0 - step.compute_s / step.wall_s) if step.wall_s else 1.0,
      phases=out,
      device_events=sum(len(v) for v in [*device.values(),
                                         *collective.values()]),
      devices=len(set(device) | set(collective)),
  )


def analyse_dir(trace_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
  """Every host's breakdown under `trace_dir`, and the slowest host's.

  Returns:
    None without traces; else {"hosts": {i: breakdown dict}, "slowest_host":
    i, "step": ..., "overhead": ..., "phases": ...} (the slowest host's,
    the one with the longest traced step, as the step records pick).
  """
  found = find_host_traces(trace_dir)
  if not found:
    return None
  hosts = {h: analyse_events(load_events(p)) for h, p in sorted(found.items())}
  slow = max(hosts, key=lambda h: hosts[h].step.wall_s)
  out = hosts[slow].as_dict()
  out["hosts"] = {str(h): b.as_dict() for h, b in hosts.items()}
  out["slowest_host"] = slow
  return out
