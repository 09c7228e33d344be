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

Every arm is one launcher invocation of the GRPO example
(examples/grpo_qwen3.py), in sequence, on the same workload; its per-step
JSONL lands in OUT/<arm>/metrics.jsonl and its console in OUT/<arm>/log.txt.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
import json
import os
import pathlib
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


def _run(cmd: Sequence[str], log: pathlib.Path, timeout_s: float) -> dict:
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
          list(cmd), stdout=f, stderr=subprocess.STDOUT, env=_env(),
          cwd=REPO_ROOT, timeout=timeout_s + 60, stdin=subprocess.DEVNULL,
          check=False)
      rc = proc.returncode
    except subprocess.TimeoutExpired:
      rc = 124
  return {"returncode": rc, "wall_s": time.perf_counter() - t0,
          "log": str(log), "load_before": load_before,
          "load_after": _load()}


def run_arm(arm: arms_lib.Arm, workload: arms_lib.Workload,
            out: pathlib.Path, timeout_s: int) -> dict[str, Any]:
  """Runs one arm; returns how it went and where its metrics are."""
  if not EXAMPLE.exists():
    raise FileNotFoundError(
        f"{EXAMPLE} not found: run the benchmark from a checkout of the repo.")
  folder = out / arm.name
  metrics = folder / "metrics.jsonl"
  if metrics.exists():
    metrics.unlink()
  cmd = [sys.executable, str(EXAMPLE), *arm.job_flags(),
         *workload.job_flags(), f"--metrics_out={metrics}",
         f"--timeout={timeout_s}"]
  print(f"[bench] arm {arm.name}: {arm.num_hosts} host(s) x"
        f" {arm.devices_per_host} devices ...", flush=True)
  res = _run(cmd, folder / "log.txt", timeout_s)
  res["metrics"] = str(metrics)
  print(f"[bench] arm {arm.name}: exit {res['returncode']},"
        f" {res['wall_s']:.0f} s", flush=True)
  return res


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
    runs[part] = _run(cmd, folder / f"{part}_log.txt", timeout_s)
  result: dict[str, Any] = {"runs": runs, "config": dataclasses.asdict(micro)}
  for part in ("hosts", "single"):
    result[part] = [json.loads(p.read_text())
                    for p in sorted(folder.glob(f"{part}_host*.json"))]
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
  runs = {arm.name: run_arm(arm, mode.workload, out, mode.arm_timeout_s)
          for arm in mode.arms}
  micro = None
  if with_micro and mode.micro is not None:
    micro = run_micro(mode.micro, out, mode.arm_timeout_s)
  report = report_lib.build_report(mode, runs, micro)
  report["bench_wall_s"] = time.perf_counter() - t0
  report_lib.write_outputs(report, out)
  return report
