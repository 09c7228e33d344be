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

"""Runs a command and says where the machine's CPU seconds went, by process.

    sudo python scripts/cpu_by_process.py [--out DIR] -- make test

The suite's own statistics (scripts/test_timings.py) count compiles per
JAX process; this counts every process the command starts, JAX or not (Ray's
daemons, vLLM's workers, the environment builds), which is what a 2-core
run is short of. Linux process accounting (acct(2): root, a kernel with
BSD process accounting) gives each ended process's exact CPU seconds; a
sampler reading /proc twice a second gives its command line (a forked
process keeps its parent's; Ray and vLLM retitle theirs). A process that
ends within half a second of starting is counted under its name only.
Accounting is for the whole machine and one file at a time: run it on a
quiet machine, never two at once (the second takes the first's records).
Prints one table by kind of process; --out keeps the raw records.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import json
import os
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import Iterable

_RECORD = 64  # struct acct_v3
_TICKS = 100  # acct's AHZ
_CLK = os.sysconf("SC_CLK_TCK")


def _comp_t(value: int) -> int:
  """acct's 16-bit float: 13-bit mantissa, base-8 exponent."""
  return (value & 0x1FFF) << (3 * (value >> 13))


def parse_acct(data: bytes) -> list[dict[str, object]]:
  """acct_v3 records: pid, ppid, start (epoch s), CPU seconds, name."""
  records = []
  for off in range(0, len(data) - _RECORD + 1, _RECORD):
    raw = data[off:off + _RECORD]
    if raw[1] != 3:  # ac_version
      continue
    pid, ppid, btime = struct.unpack_from("<III", raw, 16)
    utime, stime = struct.unpack_from("<HH", raw, 32)
    records.append({
        "pid": pid, "ppid": ppid, "start": btime,
        "cpu_s": (_comp_t(utime) + _comp_t(stime)) / _TICKS,
        "name": raw[48:64].split(b"\0")[0].decode(errors="replace"),
    })
  return records


class _Sampler(threading.Thread):
  """Command lines of the processes alive, keyed by (pid, start tick)."""

  def __init__(self):
    super().__init__(daemon=True)
    self.seen: dict[tuple[int, int], dict[str, object]] = {}
    self.stop = threading.Event()

  def run(self) -> None:
    while not self.stop.is_set():
      for name in os.listdir("/proc"):
        if name.isdigit():
          self._look(int(name))
      self.stop.wait(0.5)

  def _look(self, pid: int) -> None:
    try:
      with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read().decode(errors="replace")
      fields = stat[stat.rfind(")") + 2:].split()
      key = (pid, int(fields[19]))
      with open(f"/proc/{pid}/cmdline", "rb") as f:
        cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
    except (OSError, IndexError, ValueError):
      return  # Gone meanwhile.
    info = self.seen.setdefault(key, {"ppid": int(fields[1]),
                                      "cmdline": cmdline[:300]})
    info["last"] = cmdline[:300]  # Ray and vLLM retitle after start.


def kind(cmdline: str, last: str, name: str, parent: str | None) -> str:
  """The kind of process, from its command lines, name and parent's."""
  text = f"{cmdline} {last}"
  if last.startswith("ray::"):
    agent = last.split()[0] in ("ray::DashboardAgent", "ray::RuntimeEnvAgent")
    return "Ray agents" if agent else "Ray workers (actors)"
  if "default_worker.py" in text:  # Not retitled while it was sampled.
    return "Ray workers (actors)"
  if any(d in text for d in ("gcs_server", "raylet", "log_monitor",
                             "dashboard", "ray/_private", "bin/ray ")):
    return "Ray daemons"
  if last.startswith("VLLM::") or (
      "multiprocessing.spawn" in cmdline and "maxtext-vllm" in cmdline):
    return "vLLM workers"
  if any(b in text for b in ("compileall", " pip ", "/uv ", "install_locked")):
    return "environment builds"
  forked = parent is not None and parent == cmdline
  if "zygote.py" in cmdline:
    return "forked from the fork server" if forked else "fork server"
  if "-m pytest" in cmdline or "bin/pytest" in cmdline:
    return "forked from pytest" if forked else "pytest"
  if "python" in cmdline.split(" ")[0]:
    return "forked from a program" if forked else "other Python programs"
  return f"other: {name}"


def attribute(records: Iterable[dict[str, object]],
              seen: dict[tuple[int, int], dict[str, object]],
              boot_time: float) -> dict[str, list[float]]:
  """CPU seconds and count by kind; records matched by pid and start."""
  by_pid = collections.defaultdict(list)
  cmdline_of = {}
  for (pid, start), info in seen.items():
    by_pid[pid].append((boot_time + start / _CLK, info))
    cmdline_of.setdefault(pid, info["cmdline"])
  totals = collections.defaultdict(lambda: [0, 0.0])
  for rec in records:
    match = [info for start, info in by_pid.get(rec["pid"], ())
             if abs(start - rec["start"]) <= 2]
    if match:
      info = match[-1]
      name = kind(info["cmdline"], info.get("last", ""), rec["name"],
                  cmdline_of.get(info["ppid"]))
    else:
      name = f"unseen (under 0.5 s): {rec['name']}"
    totals[name][0] += 1
    totals[name][1] += rec["cpu_s"]
  return dict(totals)


def _boot_time() -> float:
  with open("/proc/stat", encoding="utf-8") as f:
    for line in f:
      if line.startswith("btime "):
        return float(line.split()[1])
  raise OSError("no btime in /proc/stat")


def _busy_ticks() -> int:
  with open("/proc/stat", encoding="utf-8") as f:
    fields = [int(v) for v in f.readline().split()[1:]]
  return sum(fields) - fields[3] - fields[4]  # All but idle and iowait.


def table(totals: dict[str, list[float]], wall_s: float,
          busy_s: float) -> str:
  counted = sum(cpu for _, cpu in totals.values())
  lines = [f"wall {wall_s:.0f} s; machine busy {busy_s:.0f} CPU-s "
           f"({busy_s / max(wall_s, 1e-9):.2f} cores); counted {counted:.0f}"
           " CPU-s in processes that ended", "",
           "| kind | processes | CPU s | share |", "|---|---:|---:|---:|"]
  for name, (count, cpu) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
    lines.append(f"| {name} | {count} | {cpu:.1f} | "
                 f"{100 * cpu / max(counted, 1e-9):.0f}% |")
  return "\n".join(lines)


def _measure(command: list[str], out: str) -> tuple[int, str]:
  """Runs `command` under accounting; (its exit status, the table)."""
  acct_path = os.path.join(out, "acct.bin")
  open(acct_path, "wb").close()
  libc = ctypes.CDLL(None, use_errno=True)
  if libc.acct(acct_path.encode()) != 0:
    raise OSError(f"process accounting could not start "
                  f"({os.strerror(ctypes.get_errno())}); run it as root on a "
                  "kernel with BSD process accounting")
  sampler = _Sampler()
  sampler.start()
  start, busy = time.time(), _busy_ticks()
  try:
    status = subprocess.call(command)
  finally:
    wall_s = time.time() - start
    busy_s = (_busy_ticks() - busy) / _CLK
    sampler.stop.set()
    sampler.join()
    libc.acct(None)
  with open(acct_path, "rb") as f:
    records = parse_acct(f.read())
  with open(os.path.join(out, "processes.json"), "w", encoding="utf-8") as f:
    json.dump([{"pid": p, "start": s, **i}
               for (p, s), i in sampler.seen.items()], f)
  totals = attribute(records, sampler.seen, _boot_time())
  return status, table(totals, wall_s, busy_s)


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(
      description=__doc__.splitlines()[0],
      usage="cpu_by_process.py [--out DIR] -- COMMAND...")
  parser.add_argument("--out", help="keep the raw records here")
  parser.add_argument("command", nargs="+", help="what to run, after --")
  args = parser.parse_args(argv)
  with contextlib.ExitStack() as stack:
    out = args.out or stack.enter_context(
        tempfile.TemporaryDirectory(prefix="cpu_by_process."))
    os.makedirs(out, exist_ok=True)
    try:
      status, text = _measure(args.command, out)
    except OSError as e:
      print(f"cpu_by_process.py: {e}", file=sys.stderr)
      return 2
  print(text)
  return status


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
