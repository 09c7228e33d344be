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

r"""The wheels the prepared GPU run carries (scripts/bench_device.py).

  .venv/bin/python scripts/device_wheels.py            # -> wheels/
  .venv/bin/python scripts/device_wheels.py --record   # after a dependency change

`requirements/device-job.json` lists what the device job imports: every
distribution (at its version in requirements/main.lock) and every Tunix
module. `--record` regenerates it by running the job's three processes
(both arms and the micro-benchmarks, smoke size, on CPU) and reading what
they imported.

The default run downloads (from the package index pip is configured with)
the lock-file versions of those distributions, keeps the GPU image's own
build of the compiled ones it has (`requirements/device-image.txt`; --also
NAME carries ours instead) and of JAX, builds this package's wheel, and
checks that all of it fits what one device call carries. So the machine
runs the tested pure-Python stack on its own JAX (the pinned Tunix ran with
jax 0.11.2, the image's, on CPU: docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import atexit
import importlib.metadata
import json
import os
import pathlib
import re
import runpy
import shutil
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
JOB_FILE = REPO / "requirements" / "device-job.json"
IMAGE_FILE = REPO / "requirements" / "device-image.txt"
LOCK = REPO / "requirements" / "main.lock"
# One device call carries at most 64 MiB; the repository takes the rest.
BUDGET_BYTES = 56 * 2**20
# Always carried: the pinned Tunix whatever the image has.
ALWAYS = ("google-tunix",)
# The image's JAX is used, never carried.
IMAGE_JAX = ("jax", "jaxlib")
_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64",
              "manylinux_2_17_x86_64", "manylinux2014_x86_64",
              "manylinux1_x86_64")


def normalize(name: str) -> str:
  return re.sub(r"[-_.]+", "-", name).lower()


def pinned() -> dict[str, str]:
  """requirements/main.lock as {normalized name: version}."""
  out = {}
  for line in LOCK.read_text().splitlines():
    line = line.split("#", 1)[0].strip()
    if "==" in line:
      name, version = line.split("==", 1)
      out[normalize(name)] = version.split(";")[0].strip()
  return out


def image_packages() -> set[str]:
  """The GPU image's distributions (normalized names)."""
  return {normalize(line.split("==")[0]) for line in
          IMAGE_FILE.read_text().splitlines()
          if line.strip() and not line.startswith("#")}


def to_carry(job: dict, also: list[str]) -> dict[str, str]:
  """{name: version} of the wheels to fetch: everything the job imports but
  JAX itself (the image's build has the CUDA plugin)."""
  need = {n: v for n, v in job["distributions"].items() if n not in IMAGE_JAX}
  lock = pinned()
  for name in also:
    n = normalize(name)
    if n not in lock:
      sys.exit(f"device_wheels: --also {name}: not in {LOCK.name}.")
    need[n] = lock[n]
  return dict(sorted(need.items()))


def use_image(wheel: str, image: set[str], also: list[str]) -> bool:
  """Whether the image's build replaces this wheel: compiled ones the image
  has (their size; the image's ran with its CUDA stack) unless --also."""
  dist = normalize(wheel.split("-", 1)[0])
  pure = wheel.endswith("-none-any.whl")
  return (not pure and dist in image and dist not in ALWAYS
          and dist not in {normalize(a) for a in also})


def _record_one(out: str, argv: list[str]) -> None:
  """Runs the device job in this process; at exit writes what it imported."""

  def dump():
    dists = importlib.metadata.packages_distributions()
    found = set()
    for module in list(sys.modules):
      for dist in dists.get(module.split(".")[0], ()):
        found.add(normalize(dist))
    tunix = sorted(m for m in sys.modules
                   if m == "tunix" or m.startswith("tunix."))
    pathlib.Path(out).write_text(json.dumps(
        {"distributions": sorted(found), "modules": tunix}))

  atexit.register(dump)
  sys.argv = ["device_job", *argv]
  runpy.run_module("tunix_mcjax.bench.device_job", run_name="__main__")


def record() -> None:
  """Regenerates JOB_FILE from the job's three smoke processes."""
  lock = pinned()
  with tempfile.TemporaryDirectory() as tmp:
    job = {"steps": 1, "passes": 1, "batch_size": 2, "num_generations": 2,
           "max_new_tokens": 2}
    runs = {
        "tunix": ["--shape=tiny", "--job=" + json.dumps(
            {**job, "backend": "tunix", "engine": "vanilla",
             "metrics_out": f"{tmp}/t.jsonl"})],
        "mcjax": ["--shape=tiny", "--job=" + json.dumps(
            {**job, "backend": "mcjax", "engine": "native",
             "profile": "optimized", "metrics_out": f"{tmp}/m.jsonl"})],
        "micro": ["--shape=tiny", f"--micro={tmp}/micro", "--repeats=1",
                  "--rows=2", "--max_tokens=2"],
    }
    dists, modules = set(), set()
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    for name, argv in runs.items():
      out = f"{tmp}/{name}.json"
      print(f"[device_wheels] recording the {name} process ...", flush=True)
      subprocess.run([sys.executable, __file__, "--_record", out, "--",
                      *argv], check=True, env=env, cwd=REPO,
                     stdout=subprocess.DEVNULL)
      got = json.loads(pathlib.Path(out).read_text())
      dists |= set(got["distributions"])
      modules |= set(got["modules"])
  # This package travels as its own wheel; the rest at the lock's versions.
  dists.discard("tunix-mcjax")
  missing = sorted(d for d in dists if d not in lock)
  if missing:
    sys.exit(f"device_wheels: imported but not pinned in {LOCK.name}:"
             f" {missing}")
  JOB_FILE.write_text(json.dumps({
      "note": "Generated by scripts/device_wheels.py --record: what the"
              " device job (scripts/bench_device.py) imports.",
      "distributions": {d: lock[d] for d in sorted(dists)},
      "modules": sorted(modules),
  }, indent=1) + "\n")
  print(f"[device_wheels] wrote {JOB_FILE.relative_to(REPO)}:"
        f" {len(dists)} distributions, {len(modules)} Tunix modules")


def download(dest: pathlib.Path, also: list[str]) -> int:
  """Fills `dest` with the wheels to carry; returns their total bytes."""
  job = json.loads(JOB_FILE.read_text())
  need = to_carry(job, also)
  if dest.exists():
    shutil.rmtree(dest)
  dest.mkdir(parents=True)
  platforms = [a for p in _PLATFORMS for a in ("--platform", p)]
  subprocess.run(
      [sys.executable, "-m", "pip", "download", "-q", "--no-deps",
       "--only-binary=:all:", "--python-version", "3.12",
       "--implementation", "cp", *platforms, "-d", str(dest),
       *(f"{n}=={v}" for n, v in need.items())], check=True)
  image = image_packages()
  for wheel in sorted(dest.glob("*.whl")):
    if use_image(wheel.name, image, also):
      print(f"  the image's own: {wheel.name}")
      wheel.unlink()
  with tempfile.TemporaryDirectory() as tmp:
    # From a copy: setuptools leaves a build/ folder beside the sources,
    # which in the repository would shadow the `build` package.
    src = pathlib.Path(tmp) / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
      shutil.copy(REPO / name, src)
    # maxtext_patches/: the wheel's tunix_mcjax.maxtext.patches (pyproject).
    for name in ("tunix_mcjax", "maxtext_patches"):
      shutil.copytree(REPO / name, src / name,
                      ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", tmp, str(src)], check=True)
    for wheel in pathlib.Path(tmp).glob("tunix_mcjax-*.whl"):
      shutil.copy(wheel, dest)
  total = sum(f.stat().st_size for f in dest.glob("*.whl"))
  for f in sorted(dest.glob("*.whl")):
    print(f"  {f.stat().st_size / 2**20:7.2f} MiB  {f.name}")
  count = len(list(dest.glob("*.whl")))
  print(f"[device_wheels] {count} wheels (tunix_mcjax's included) in {dest}:"
        f" {total / 2**20:.1f} MiB (budget {BUDGET_BYTES / 2**20:.0f} MiB)")
  if total > BUDGET_BYTES:
    sys.exit("device_wheels: the wheels do not fit one device call; carry"
             " fewer (the image's own versions) or split the run.")
  return total


def main() -> None:
  if len(sys.argv) > 2 and sys.argv[1] == "--_record":
    _record_one(sys.argv[2], sys.argv[sys.argv.index("--") + 1:])
    return
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--record", action="store_true",
                      help=f"regenerate {JOB_FILE.relative_to(REPO)}")
  parser.add_argument("--dest", default=str(REPO / "wheels"))
  parser.add_argument("--also", action="append", default=[],
                      help="carry this lock-file package too (its version"
                           " on the image did not work)")
  args = parser.parse_args()
  if args.record:
    record()
  else:
    download(pathlib.Path(args.dest), args.also)


if __name__ == "__main__":
  main()
