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

"""Runs the arms side by side, then the micro-benchmarks; writes the report.

Every launch of an arm is one launcher invocation of the GRPO example
(examples/grpo_qwen3.py) on the same workload; launches run arm after arm,
launch round after launch round. A launch's per-step JSONL lands in
OUT/<arm>/launch<k>/metrics.jsonl, its console in .../log.txt and the
profiler trace of its traced step in .../trace/host<i>.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
import json
import os
import pathlib
import platform
import random
import subprocess
import sys
import time
from typing import Any

from tunix_mcjax.bench import arms as arms_lib
from tunix_mcjax.bench import report as report_lib

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = REPO_ROOT / "examples" / "grpo_qwen3.py"
GSM8K = REPO_ROOT.parent / "shared" / "data" / "gsm8k" / "train.jsonl"


def _env() -> dict[str, str]:
  env = dict(os.environ)
  path = env.get("PYTHONPATH", "")
  env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + path if path else "")
  # Simulated hosts must not join a cluster the machine happens to be in.
  env.pop("JAX_COORDINATOR_ADDRESS", None)
  return env


def _load() -> float | None:
  try:
    return os.getloadavg()[0]
  except OSError:
    return None


def run_command(cmd: Sequence[str], log: pathlib.Path, timeout_s: float,
                env: dict[str, str] | None = None) -> dict:
  """Runs `cmd`, output to `log`; notes the machine's load around it.

  Other work on the machine distorts a run's step times; the 1-minute load
  average before and after shows when that happened.
  """
  log.parent.mkdir(parents=True, exist_ok=True)
  load_before = _load()
  t0 = time.perf_counter()
  with open(log, "w") as f:
    f.write("$ " + " ".join(cmd) + "\n")
    f.flush()
    try:
      proc = subprocess.run(
          list(cmd), stdout=f, stderr=subprocess.STDOUT,
          env=_env() if env is None else env,
          cwd=REPO_ROOT, timeout=timeout_s + 60, stdin=subprocess.DEVNULL,
          check=False)
      rc = proc.returncode
    except subprocess.TimeoutExpired:
      rc = 124
  return {"returncode": rc, "wall_s": time.perf_counter() - t0,
          "log": str(log), "cmd": list(cmd), "load_before": load_before,
          "load_after": _load()}


def traced_step(workload: arms_lib.Workload) -> int:
  """The step a launch traces: the last of the first pass (compiled, not
  scored; a trace slows the step it records)."""
  return workload.steps if workload.passes > 1 else 1


def run_arm(arm: arms_lib.Arm, workload: arms_lib.Workload,
            out: pathlib.Path, timeout_s: int, *, launch: int = 0,
            trace: bool = True) -> dict[str, Any]:
  """Runs one launch of an arm; returns how it went and where its files are."""
  if not EXAMPLE.exists():
    raise FileNotFoundError(
        f"{EXAMPLE} not found: run the benchmark from a checkout of the repo.")
  folder = out / arm.name / f"launch{launch}"
  metrics = folder / "metrics.jsonl"
  if metrics.exists():
    metrics.unlink()
  cmd = [sys.executable, str(EXAMPLE), *arm.job_flags(),
         *workload.job_flags(), f"--metrics_out={metrics}",
         f"--timeout={timeout_s}"]
  # DA arms are not traced: only their trainer hosts would record a trace
  # (the rollout hosts, where generation runs, none), and the breakdown
  # (`traces.analyse_dir`) reads every host's of a colocated step.
  trace = trace and arm.backend != arms_lib.DA_BACKEND
  if trace:
    cmd += [f"--trace_steps={traced_step(workload)}",
            f"--trace_dir={folder / 'trace'}"]
  print(f"[bench] arm {arm.name} launch {launch + 1}: {arm.num_hosts}"
        f" host(s) x {arm.devices_per_host} devices ...", flush=True)
  res = run_command(cmd, folder / "log.txt", timeout_s)
  res["metrics"] = str(metrics)
  res["trace_dir"] = str(folder / "trace") if trace else None
  res["traced_step"] = traced_step(workload) if trace else None
  print(f"[bench] arm {arm.name} launch {launch + 1}: exit"
        f" {res['returncode']}, {res['wall_s']:.0f} s", flush=True)
  return res


def cpu_model() -> str:
  """The CPU's model name (/proc/cpuinfo), else what platform knows."""
  try:
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
      if line.lower().startswith("model name"):
        return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


_PROBE = (
    "import json, jax; d = jax.devices(); print(json.dumps({'platform':"
    " d[0].platform, 'device_kind': d[0].device_kind, 'count': len(d),"
    " 'jax': jax.__version__}))"
)


def detect_accelerator(timeout_s: float = 120) -> dict[str, Any]:
  """What JAX finds on this machine by default, asked in a child process.

  A child, so that this process never holds an accelerator the arms need
  (JAX preallocates most of a GPU's memory).
  """
  env = _env()
  env.pop("JAX_PLATFORMS", None)
  try:
    proc = subprocess.run([sys.executable, "-c", _PROBE], env=env,
                          capture_output=True, text=True, timeout=timeout_s,
                          check=False, stdin=subprocess.DEVNULL)
    found = json.loads(proc.stdout.strip().splitlines()[-1])
  except (subprocess.TimeoutExpired, json.JSONDecodeError, IndexError) as e:
    return {"platform": None, "error": f"device probe failed: {e!r}"}
  return found


def machine_info(*, load_before: float | None,
                 load_after: float | None,
                 accelerator: dict[str, Any]) -> dict[str, Any]:
  """What the numbers were measured on (nothing hard-coded)."""
  info: dict[str, Any] = {
      "cpu_model": cpu_model(),
      "machine": platform.machine(),
      "system": platform.system(),
      "python": platform.python_version(),
      "cpu_count": os.cpu_count(),
      "load_before": load_before,
      "load_after": load_after,
      "accelerator": accelerator,
  }
  try:
    pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    info["memory_gib"] = round(pages * size / 2**30, 1)
  except (ValueError, OSError, AttributeError):
    pass
  return info


def run_micro(micro: arms_lib.MicroConfig, out: pathlib.Path,
              timeout_s: int) -> dict[str, Any]:
  """Micro-benchmarks: 2-host publication + decode, 1-host decode, admission.

  The single-controller decode runs one process with both hosts' devices.
  """
  from tunix_mcjax.bench import micro as micro_lib  # pylint: disable=g-import-not-at-top

  folder = out / "micro"
  folder.mkdir(parents=True, exist_ok=True)
  for f in folder.glob("*.json"):
    f.unlink()
  common = [f"--out={folder}", f"--layers={micro.layers}",
            f"--repeats={micro.repeats}", f"--rows={micro.rows}",
            f"--max_tokens={micro.max_tokens}"]
  launch = [sys.executable, "-m", "tunix_mcjax.launch"]
  runs = {}
  for part, hosts in (("hosts", 2), ("single", 1)):
    print(f"[bench] micro {part}: {hosts} host(s) ...", flush=True)
    cmd = [*launch, "--num_hosts", str(hosts), "--devices_per_host",
           str(2 * micro.devices_per_host // hosts), "--timeout",
           str(timeout_s), "--",
           sys.executable, "-m", "tunix_mcjax.bench.micro_job",
           f"--part={part}", *common]
    runs[part] = run_command(cmd, folder / f"{part}_log.txt", timeout_s)
  result: dict[str, Any] = {"runs": runs, "config": dataclasses.asdict(micro)}
  for part in ("hosts", "single"):
    result[part] = [json.loads(p.read_text())
                    for p in sorted(folder.glob(f"{part}_host*.json"))]
  result["gsm8k_extraction"] = micro_lib.gsm8k_extraction_scaling()
  prompts = _admission_prompts(micro.admission_prompts)
  result["admission"] = {
      "source": prompts[1],
      "rows": micro_lib.admission_vs_hosts(
          prompts[0], hosts=micro.admission_hosts, num_generations=16),
  }
  return result


def _admission_prompts(n: int) -> tuple[list[str], str]:
  """GSM8K prompts if the shared data is there, else synthetic ones."""
  from tunix_mcjax.recipes import tasks  # pylint: disable=g-import-not-at-top

  if GSM8K.exists():
    rows = tasks.load_gsm8k(str(GSM8K))[:n]
    if len(rows) == n:
      return [tasks.gsm8k_prompt(r["question"]) for r in rows], "gsm8k"
  rng = random.Random(0)
  return ["x" * rng.randint(50, 800) for _ in range(n)], "synthetic"


def run_bench(
    mode: arms_lib.BenchMode,
    out: pathlib.Path,
    *,
    with_micro: bool = True,
) -> dict[str, Any]:
  """Runs the arms and micro-benchmarks; writes and returns the report."""
  out.mkdir(parents=True, exist_ok=True)
  t0 = time.perf_counter()
  load_before = _load()
  accelerator = detect_accelerator()
  runs: dict[str, list[dict[str, Any]]] = {a.name: [] for a in mode.arms}
  for launch in range(mode.launches):
    for arm in mode.arms:
      runs[arm.name].append(run_arm(
          arm, mode.workload, out, mode.arm_timeout_s, launch=launch,
          trace=mode.trace))
  micro = None
  if with_micro and mode.micro is not None:
    micro = run_micro(mode.micro, out, mode.arm_timeout_s)
  machine = machine_info(load_before=load_before, load_after=_load(),
                         accelerator=accelerator)
  report = report_lib.build_report(mode, runs, micro, machine=machine)
  report["bench_wall_s"] = time.perf_counter() - t0
  report_lib.write_outputs(report, out)
  return report
