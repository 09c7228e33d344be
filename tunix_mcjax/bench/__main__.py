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

r"""Benchmark command line.

  python -m tunix_mcjax.bench --mode=quick            # make bench
  python -m tunix_mcjax.bench --mode=full --out=runs/bench-full
  python -m tunix_mcjax.bench --mode=quick --arms=tunix-stock,mcjax-optimized \
      --steps=2 --nomicro                             # a short subset
  python -m tunix_mcjax.bench --mode=packing          # GSM8K, packed vs not
  python -m tunix_mcjax.bench --mode=da     # CO vs DA at K=0 and K=1, with
                                            # the advisor's predicted steps
  python -m tunix_mcjax.bench --mode=scale  # Qwen3-0.6B memory, 2 hosts,
                                            # log-probs unchunked vs chunked
  python -m tunix_mcjax.bench --mode=scale --beta=0.04  # with a reference

Exit status: 0 when every arm ran and the report was written, 1 otherwise
(the report is written either way and names the failed arms).
"""

from collections.abc import Sequence
import dataclasses
import pathlib
import sys

from absl import app
from absl import flags

from tunix_mcjax.bench import arms as arms_lib
from tunix_mcjax.bench import harness

_MODE = flags.DEFINE_enum("mode", "quick", sorted([*arms_lib.MODES, "scale"]),
                          "quick: < 10 min on 2 cores; full: the protocol's"
                          " 20 batches x 2 passes and the whole 0.6B tree;"
                          " scale: Qwen3-0.6B memory per host"
                          " (docs/memory.md).")
_OUT = flags.DEFINE_string("out", "runs/bench", "Output folder.")
_ARMS = flags.DEFINE_list("arms", [], "Run only these arms (default: all).")
_STEPS = flags.DEFINE_integer("steps", None, "Override batches per pass.")
_MICRO = flags.DEFINE_boolean("micro", True, "Run the micro-benchmarks.")
_BETA = flags.DEFINE_float(
    "beta", None, "--mode=scale: the GRPO KL weight (default 0: no"
    " reference model; Tunix's 0.04 gives each host one).")
_LAUNCHES = flags.DEFINE_integer(
    "launches", None, "Override launches per arm (the verdict needs 3).")


def _main_scale() -> None:
  """--mode=scale: its own runner and report (bench.scale)."""
  from tunix_mcjax.bench import scale  # pylint: disable=g-import-not-at-top

  cfg = scale.SCALE
  if _STEPS.value is not None:
    cfg = dataclasses.replace(cfg, steps=_STEPS.value)
  if _BETA.value is not None:
    cfg = dataclasses.replace(cfg, beta=_BETA.value)
  out = pathlib.Path(
      "runs/bench-scale" if _OUT.value == _OUT.default else _OUT.value)
  report = scale.run_scale(cfg, out)
  print((out / "report.md").read_text(), flush=True)
  print(f"[bench] wrote {out / 'report.json'} and {out / 'report.md'} in"
        f" {report['bench_wall_s']:.0f} s", flush=True)
  failed = [n for n, a in report["arms"].items() if not a["ok"]]
  if failed:
    print(f"[bench] FAILED arms: {failed}", file=sys.stderr, flush=True)
    sys.exit(1)


def main(argv: Sequence[str]) -> None:
  del argv
  if _MODE.value == "scale":
    _main_scale()
    return
  mode = arms_lib.MODES[_MODE.value]
  if _ARMS.value:
    known = {a.name: a for a in mode.arms}
    unknown = sorted(set(_ARMS.value) - set(known))
    if unknown:
      raise app.UsageError(f"Unknown arms {unknown}; known: {sorted(known)}.")
    mode = dataclasses.replace(
        mode, arms=tuple(known[n] for n in _ARMS.value))
  if _STEPS.value is not None:
    mode = dataclasses.replace(
        mode, workload=dataclasses.replace(mode.workload, steps=_STEPS.value))
  if _LAUNCHES.value is not None:
    mode = dataclasses.replace(mode, launches=_LAUNCHES.value)
  out = pathlib.Path(_OUT.value)
  report = harness.run_bench(mode, out, with_micro=_MICRO.value)
  print((out / "report.md").read_text(), flush=True)
  print(f"[bench] wrote {out / 'report.json'}, {out / 'report.md'} and"
        f" {len(report['outputs']['plots'])} plots in"
        f" {report['bench_wall_s']:.0f} s", flush=True)
  failed = [n for n, a in report["arms"].items() if not a["ok"]]
  if failed:
    print(f"[bench] FAILED arms: {failed}", file=sys.stderr, flush=True)
    sys.exit(1)


if __name__ == "__main__":
  app.run(main)
