#!/usr/bin/env python3
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

r"""The prepared accelerator run: one machine, one host, real devices.

  make bench-device                      # on the GPU machine
  python scripts/bench_device.py --out=runs/bench-device
  python scripts/bench_device.py --smoke --out=/tmp/x  # CPU, installs nothing

For a machine with an NVIDIA GPU, JAX with CUDA and PyTorch preinstalled and
no network. In under 8 minutes it

1. installs the wheels in `wheels/` (git-ignored; made by
   scripts/device_wheels.py: the pinned Tunix and the pure-Python packages
   the job imports, on the machine's own JAX) offline into --site, first on
   the path, and imports every Tunix module the job uses, unless
   --no-install;
2. runs `tunix-stock` (Tunix's RLCluster with its vanilla rollout) and
   `mcjax-optimized-1host` on a Qwen3-0.6B-shaped random model, one process
   each on this machine's default devices, same workload, second pass
   scored, one traced step;
3. times publication of the whole 0.6B tree vs the floor (one all-gather
   of the same bytes + one copy) and the decode iteration on the same
   device;
4. writes the benchmark report (report.json, report.md, plots) to --out;
   the mcjax arm's steps after the first run under `--transfer_guard=log`,
   so its log.txt lists every implicit host<->device transfer.

--smoke runs all of it on CPU in small form (tiny model, 1 scored step),
as tests/bench/test_bench_device.py does inside `make test`.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pathlib
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
BUDGET_S = 8 * 60


def _pinned(name: str) -> str | None:
  lock = REPO / "requirements" / "main.lock"
  for line in lock.read_text().splitlines():
    if line.lower().startswith(name + "=="):
      return line.split("==", 1)[1].strip()
  return None


def install(wheels: pathlib.Path, site: pathlib.Path) -> None:
  """Installs the wheels in `wheels` offline into `site` (put first on the
  path of this process and the job's), then imports every Tunix module the
  job uses (requirements/device-job.json) on the machine's own JAX."""
  files = sorted(glob.glob(str(wheels / "*.whl")))
  names = [pathlib.Path(f).name for f in files]
  tunix = _pinned("google-tunix")
  if not any(n.startswith(f"google_tunix-{tunix}-") for n in names):
    sys.exit(f"bench_device: {wheels}/ lacks google_tunix {tunix}: run"
             " `.venv/bin/python scripts/device_wheels.py` on a machine with"
             " the package index (docs/benchmarks.md, 'The prepared GPU"
             " run').")
  t0 = time.perf_counter()
  subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index",
                  "--no-deps", "--upgrade", "--target", str(site), *files],
                 check=True)
  path = os.environ.get("PYTHONPATH", "")
  os.environ["PYTHONPATH"] = str(site) + (os.pathsep + path if path else "")
  sys.path.insert(0, str(site))
  job = json.loads((REPO / "requirements" / "device-job.json").read_text())
  modules = ["jax", *job["modules"], "tunix_mcjax.bench.device_job",
             "tunix_mcjax.recipes.grpo_job"]
  probe = subprocess.run(
      [sys.executable, "-c", _PROBE, *modules], capture_output=True,
      text=True, cwd=REPO, check=False)
  if probe.returncode != 0:
    sys.exit("bench_device: after installing the wheels, an import fails:\n"
             + probe.stderr.strip()[-2000:]
             + "\nCarry that distribution's wheel too (scripts/"
             "device_wheels.py --also NAME), or record the job's imports"
             " again (--record).")
  print(f"[bench_device] installed {len(files)} wheels into {site} and"
        f" imported {len(modules)} modules in"
        f" {time.perf_counter() - t0:.0f} s: {probe.stdout.strip()}",
        flush=True)


# Imports each module named on the command line; the first failure names it.
_PROBE = """
import importlib, sys
for name in sys.argv[1:]:
  try:
    importlib.import_module(name)
  except Exception as e:
    sys.exit(f"import {name}: {type(e).__name__}: {e}")
import jax
print(f"jax {jax.__version__}")
"""


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--out", default="runs/bench-device")
  parser.add_argument("--wheels", default=None,
                      help="default wheels/ (--smoke: install nothing unless"
                           " given)")
  parser.add_argument("--site", default="/tmp/tunix_mcjax_site",
                      help="where the wheels are installed (put first on"
                           " the path)")
  parser.add_argument("--smoke", action="store_true",
                      help="small CPU run (tiny model, 1 scored step)")
  parser.add_argument("--no-install", action="store_true",
                      help="use the installed packages as they are")
  args = parser.parse_args()
  t0 = time.perf_counter()
  wheels = args.wheels or (None if args.smoke else str(REPO / "wheels"))
  if wheels and not args.no_install:
    install(pathlib.Path(wheels), pathlib.Path(args.site))
  sys.path.insert(0, str(REPO))
  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.bench import arms as arms_lib
  from tunix_mcjax.bench import harness
  from tunix_mcjax.bench import report as report_lib
  # pylint: enable=g-import-not-at-top

  out = pathlib.Path(args.out).resolve()
  out.mkdir(parents=True, exist_ok=True)
  env = harness._env()  # pylint: disable=protected-access
  if args.smoke:
    env["JAX_PLATFORMS"] = "cpu"
    os.environ["JAX_PLATFORMS"] = "cpu"
  load_before = harness._load()  # pylint: disable=protected-access
  accelerator = harness.detect_accelerator()
  if args.smoke:
    accelerator = {**accelerator, "note": "smoke run: JAX_PLATFORMS=cpu"}
  devices = int(accelerator.get("count") or 1)
  if args.smoke:
    shape, micro_args = "tiny", ["--repeats=1", "--rows=4", "--max_tokens=4"]
    workload = arms_lib.Workload(steps=1, passes=2, batch_size=4,
                                 num_generations=2, max_new_tokens=4)
  else:
    shape, micro_args = "qwen3-0.6b", ["--repeats=5", "--rows=64",
                                       "--max_tokens=64"]
    workload = arms_lib.Workload(steps=5, passes=2, batch_size=16,
                                 num_generations=8, max_new_tokens=64)
  mode = arms_lib.BenchMode(
      name="device-smoke" if args.smoke else "device",
      arms=(
          arms_lib.Arm(name=arms_lib.BASELINE, backend="tunix", num_hosts=1,
                       devices_per_host=devices, stock_rollout=True),
          arms_lib.Arm(name="mcjax-optimized-1host", backend="mcjax",
                       num_hosts=1, devices_per_host=devices,
                       profile="optimized"),
      ),
      workload=workload, micro=None, arm_timeout_s=200, launches=1)
  job = [sys.executable, "-m", "tunix_mcjax.bench.device_job",
         f"--shape={shape}"]
  runs = {}
  for arm in mode.arms:
    folder = out / arm.name / "launch0"
    metrics = folder / "metrics.jsonl"
    if metrics.exists():
      metrics.unlink()
    fields = {
        **{k: getattr(workload, k) for k in workload.__dataclass_fields__},
        "backend": arm.backend,
        "engine": "vanilla" if arm.stock_rollout else "native",
        "profile": arm.profile, "metrics_out": str(metrics),
        "trace_steps": [harness.traced_step(workload)],
        "trace_dir": str(folder / "trace"),
    }
    if arm.backend == "mcjax":
      # Steps after the first under the transfer guard: fatal where CPU has
      # proven it; on the GPU each implicit transfer is logged to the arm's
      # log.txt instead (device-to-host ones are seen there only).
      fields["transfer_guard"] = "disallow" if args.smoke else "log"
    if not args.smoke:
      fields["dtype"] = "bfloat16"
    print(f"[bench_device] {arm.name} ...", flush=True)
    res = harness.run_command(
        [*job, "--job=" + json.dumps(fields)], folder / "log.txt",
        mode.arm_timeout_s, env)
    res.update(metrics=str(metrics), trace_dir=str(folder / "trace"),
               traced_step=harness.traced_step(workload))
    print(f"[bench_device] {arm.name}: exit {res['returncode']},"
          f" {res['wall_s']:.0f} s", flush=True)
    runs[arm.name] = [res]
  micro_dir = out / "micro"
  for f in micro_dir.glob("*.json"):
    f.unlink()
  print("[bench_device] micro-benchmarks ...", flush=True)
  micro_run = harness.run_command(
      [*job, f"--micro={micro_dir}", *micro_args], micro_dir / "log.txt",
      150, env)
  micro = {"runs": {"hosts": micro_run}, "config": {"shape": shape},
           "hosts": [json.loads(p.read_text())
                     for p in sorted(micro_dir.glob("hosts_host*.json"))]}
  machine = harness.machine_info(load_before=load_before,
                                 load_after=harness._load(),  # pylint: disable=protected-access
                                 accelerator=accelerator)
  report = report_lib.build_report(mode, runs, micro, machine=machine)
  report["bench_wall_s"] = time.perf_counter() - t0
  report["budget_s"] = BUDGET_S
  report_lib.write_outputs(report, out)
  print((out / "report.md").read_text(), flush=True)
  print(f"[bench_device] wrote {out / 'report.json'} in"
        f" {report['bench_wall_s']:.0f} s (budget {BUDGET_S} s)", flush=True)
  failed = [n for n, a in report["arms"].items() if not a["ok"]]
  if failed or micro_run["returncode"] != 0:
    sys.exit(f"bench_device: failed: arms {failed}, micro exit"
             f" {micro_run['returncode']} (logs under {out}).")


if __name__ == "__main__":
  main()
