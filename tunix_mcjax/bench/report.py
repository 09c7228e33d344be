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

"""The benchmark report: report.json, report.md and PNG plots."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import dataclasses
import json
import os
import pathlib
import platform
from typing import Any

import numpy as np

from tunix_mcjax import telemetry
from tunix_mcjax.bench import arms as arms_lib
from tunix_mcjax.bench import stats

PHASES = telemetry.PHASES
OVERHEADS = telemetry.HOST_OVERHEADS
PARTS = PHASES + OVERHEADS


def machine_info() -> dict[str, Any]:
  """What the numbers were measured on."""
  info: dict[str, Any] = {
      "machine": platform.machine(),
      "system": platform.system(),
      "python": platform.python_version(),
      "cpu_count": os.cpu_count(),
      "accelerator": "none (CPU only; JAX fake CPU devices)",
  }
  try:
    pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    info["memory_gib"] = round(pages * size / 2**30, 1)
  except (ValueError, OSError, AttributeError):
    pass
  try:
    import jax  # pylint: disable=g-import-not-at-top
    info["jax"] = jax.__version__
  except ImportError:
    pass
  return info


def load_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
  p = pathlib.Path(path)
  if not p.exists():
    return []
  return [json.loads(line) for line in p.read_text().splitlines() if line]


def summarize_arm(
    arm: arms_lib.Arm,
    workload: arms_lib.Workload,
    records: Sequence[Mapping[str, Any]],
    run: Mapping[str, Any],
) -> dict[str, Any]:
  """One arm's scored steps, medians with intervals, and phase breakdown."""
  expected = workload.steps * workload.passes
  scored = [r for r in records if workload.scored(int(r["step"]))]
  out: dict[str, Any] = {
      "config": {"backend": arm.backend, "num_hosts": arm.num_hosts,
                 "devices_per_host": arm.devices_per_host,
                 "profile": arm.profile},
      "run": dict(run),
      "steps_recorded": len(records),
      "steps_scored": len(scored),
      "ok": run.get("returncode") == 0 and len(records) == expected
            and len(scored) == workload.steps,
  }
  if not out["ok"]:
    out["error"] = (f"exit {run.get('returncode')}, {len(records)} of"
                    f" {expected} steps recorded; see {run.get('log')}")
  if not scored:
    return out
  times = [float(r["step_time_s"]) for r in scored]
  tokens = [max(int(r.get("completion_tokens") or 0), 1) for r in scored]
  per_token = [t / n for t, n in zip(times, tokens)]
  out["step_times_s"] = times
  out["step_time_per_token_s"] = per_token
  out["median_step_s"] = stats.median_interval(times).as_dict()
  out["median_step_per_token_s"] = stats.median_interval(per_token).as_dict()
  out["tokens_per_step_median"] = float(np.median(tokens))
  # Means, so that the parts add up to the mean step time of the slowest
  # host (medians of parts need not add up to anything).
  parts = {}
  for p in PHASES:
    parts[p] = float(np.mean([r["phases"].get(p, 0.0) for r in scored]))
  for o in OVERHEADS:
    parts[o] = float(np.mean([(r.get("host_overhead") or {}).get(o, 0.0)
                              for r in scored]))
  out["mean_parts_s"] = parts
  out["mean_step_s"] = float(np.mean(times))
  waits = [(r.get("straggler_wait") or {}).get("total", 0.0) for r in scored]
  out["straggler_wait_median_s"] = float(np.median(waits))
  out["straggler_wait_by_point_median_s"] = {
      p: float(np.median([(r.get("straggler_wait") or {}).get(p, 0.0)
                          for r in scored]))
      for p in telemetry.CROSS_HOST_POINTS
  }
  iters = [r.get("decode_iter_s") for r in scored
           if r.get("decode_iter_s") is not None]
  out["decode_iter_median_s"] = float(np.median(iters)) if iters else None
  out["work"] = dataclasses.asdict(stats.summarize_work(scored))
  out["work"]["prompts"] = list(out["work"]["prompts"])
  return out


def _comparison(summaries: Mapping[str, Mapping[str, Any]], base: str,
                other: str) -> dict[str, Any] | None:
  a, b = summaries.get(base), summaries.get(other)
  if not a or not b or "step_times_s" not in a or "step_times_s" not in b:
    return None
  per_step = stats.ratio_interval(a["step_times_s"], b["step_times_s"])
  per_token = stats.ratio_interval(a["step_time_per_token_s"],
                                   b["step_time_per_token_s"])
  return {
      "baseline": base,
      "other": other,
      "speedup_per_step": per_step.as_dict(),
      "speedup_per_token": per_token.as_dict(),
      "verdict": stats.verdict(per_step),
      "verdict_per_token": stats.verdict(per_token),
  }


def build_report(
    mode: arms_lib.BenchMode,
    runs: Mapping[str, Mapping[str, Any]],
    micro: Mapping[str, Any] | None,
) -> dict[str, Any]:
  """Everything the benchmark measured, as one JSON-able dict."""
  summaries = {}
  for arm in mode.arms:
    run = runs.get(arm.name, {"returncode": None})
    records = load_records(run.get("metrics", "")) if run else []
    summaries[arm.name] = summarize_arm(arm, mode.workload, records, run)
  base = arms_lib.BASELINE if arms_lib.BASELINE in summaries else (
      mode.arms[0].name)
  pairs = [(base, a.name) for a in mode.arms if a.name != base]
  pairs += [p for p in arms_lib.EXTRA_COMPARISONS
            if p[0] in summaries and p[1] in summaries]
  ratios = [c for c in (_comparison(summaries, *p) for p in pairs) if c]
  equal = {}
  if "work" in summaries.get(base, {}):
    bw = stats.WorkSummary(**(summaries[base]["work"] | {
        "prompts": tuple(summaries[base]["work"]["prompts"])}))
    for name, s in summaries.items():
      if name == base or "work" not in s:
        continue
      ow = stats.WorkSummary(**(s["work"] | {
          "prompts": tuple(s["work"]["prompts"])}))
      equal[name] = stats.equal_work(bw, ow)
  return {
      "machine": machine_info(),
      "mode": mode.name,
      "protocol": {
          "scored": f"the last of {mode.workload.passes} passes over the"
                    f" same {mode.workload.steps} batches",
          "step_time": "median over scored steps",
          "interval": f"{int(stats.CONFIDENCE * 100)}% percentile bootstrap,"
                      f" {stats.RESAMPLES} resamples",
          "faster_if_lower_bound_above": stats.FASTER_THRESHOLD,
          "equal_work": "same prompts in order; mean and longest output"
                        f" length ratio in {list(stats.LENGTH_RATIO_RANGE)};"
                        " truncation shares within"
                        f" {int(stats.TRUNCATION_POINTS * 100)} points",
      },
      "workload": dataclasses.asdict(mode.workload),
      "baseline": base,
      "arms": summaries,
      "ratios": ratios,
      "equal_work": equal,
      "micro": summarize_micro(micro) if micro else None,
  }


def summarize_micro(micro: Mapping[str, Any]) -> dict[str, Any]:
  out: dict[str, Any] = {"config": micro.get("config"),
                         "runs": micro.get("runs")}
  hosts = micro.get("hosts") or []
  pubs = [h["publication"] for h in hosts if "publication" in h]
  if pubs:
    # The publication finishes when the slowest host has its copy.
    worst = max(pubs, key=lambda p: p["one_call_s"])
    out["publication"] = {k: v for k, v in worst.items()
                          if not k.endswith("_times")}
    out["publication"]["one_call_over_allgather"] = (
        worst["one_call_s"] / worst["floor_allgather_s"])
    out["publication"]["per_parameter_over_allgather"] = (
        worst["per_parameter_s"] / worst["floor_allgather_s"])
  local = [h["decode"] for h in hosts if "decode" in h]
  single = [h["decode"] for h in micro.get("single") or [] if "decode" in h]
  if local and single:
    host_local = max(d["decode_iter_s"] for d in local)
    controller = single[0]["decode_iter_s"]
    out["decode"] = {
        "host_local_iter_s": host_local,
        "host_local": local,
        "single_controller_iter_s": controller,
        "single_controller": single[0],
        "single_over_host_local": controller / host_local,
    }
  if micro.get("admission"):
    out["admission"] = micro["admission"]
  return out


# --- outputs ----------------------------------------------------------------


def _fmt_interval(iv: Mapping[str, float] | None, scale: float = 1.0,
                  digits: int = 3) -> str:
  if not iv:
    return "n/a"
  return (f"{iv['value'] * scale:.{digits}f} [{iv['low'] * scale:.{digits}f},"
          f" {iv['high'] * scale:.{digits}f}]")


def markdown(report: Mapping[str, Any]) -> str:
  """The report as markdown tables."""
  m = report["machine"]
  lines = [
      f"# Benchmark report ({report['mode']} mode)",
      "",
      f"Machine: {m.get('machine')}, {m.get('cpu_count')} cores,"
      f" {m.get('memory_gib', '?')} GiB, {m.get('accelerator')}; jax"
      f" {m.get('jax', '?')}. Simulated hosts share the cores: compare ratios"
      " within this report, not absolute times across machines. 'load' is the"
      " machine's 1-minute load average before and after each arm: other"
      " work running at the same time slows an arm down.",
      "",
      f"Protocol: {report['protocol']['scored']} are scored; step time ="
      f" {report['protocol']['step_time']}; intervals:"
      f" {report['protocol']['interval']}; 'faster' only if the lower bound"
      f" > {report['protocol']['faster_if_lower_bound_above']}.",
      "",
      "## Arms",
      "",
      "| arm | hosts x devices | profile | scored steps |"
      " median step s [95% CI] | ms per token [95% CI] | straggler wait s |"
      " decode iter ms | equal work | load before/after |",
      "|---|---|---|---|---|---|---|---|---|---|",
  ]
  for name, a in report["arms"].items():
    c = a["config"]
    eq = report["equal_work"].get(name)
    eq_s = "baseline" if name == report["baseline"] else (
        "n/a" if eq is None else ("yes" if eq["equal"] else "NO: " + ", ".join(
            k for k, v in eq["checks"].items() if not v["ok"])))
    it = a.get("decode_iter_median_s")
    run = a.get("run") or {}
    load = "/".join("?" if run.get(k) is None else f"{run[k]:.1f}"
                    for k in ("load_before", "load_after"))
    lines.append(
        f"| {name}{'' if a['ok'] else ' (FAILED)'} | {c['num_hosts']} x"
        f" {c['devices_per_host']} | {c['profile'] or '-'} |"
        f" {a['steps_scored']} | {_fmt_interval(a.get('median_step_s'))} |"
        f" {_fmt_interval(a.get('median_step_per_token_s'), 1e3, 2)} |"
        f" {a.get('straggler_wait_median_s', float('nan')):.3f} |"
        f" {'n/a' if it is None else f'{it * 1e3:.2f}'} | {eq_s} | {load} |")
  lines += ["", "## Speedups (baseline time / other time)", "",
            "| baseline | other | per step [95% CI] | verdict | per token"
            " [95% CI] | verdict |", "|---|---|---|---|---|---|"]
  for r in report["ratios"]:
    lines.append(
        f"| {r['baseline']} | {r['other']} |"
        f" {_fmt_interval(r['speedup_per_step'], digits=2)} | {r['verdict']}"
        f" | {_fmt_interval(r['speedup_per_token'], digits=2)} |"
        f" {r['verdict_per_token']} |")
  lines += ["", "## Where the step time goes (slowest host, mean s per scored"
            " step)", "",
            "| arm | " + " | ".join(PARTS) + " | step |",
            "|---|" + "---|" * (len(PARTS) + 1)]
  for name, a in report["arms"].items():
    parts = a.get("mean_parts_s")
    if not parts:
      continue
    lines.append(f"| {name} | " + " | ".join(
        f"{parts[p]:.3f}" for p in PARTS) + f" | {a['mean_step_s']:.3f} |")
  micro = report.get("micro")
  if micro:
    lines += ["", "## Micro-benchmarks", ""]
    pub = micro.get("publication")
    if pub:
      lines += [
          f"Publication of a Qwen3-0.6B-shaped tree ({pub['layers']} layers,"
          f" {pub['num_params']} parameters, {pub['bytes'] / 2**20:.0f} MiB"
          " bf16) from FSDP over 2 hosts into each host's replicated layout"
          " (slowest host, median):", "",
          "| | seconds | / floor | / all-gather only |", "|---|---|---|---|",
          f"| one call (O4) | {pub['one_call_s']:.3f} |"
          f" {pub['one_call_over_floor']:.2f} |"
          f" {pub['one_call_over_allgather']:.2f} |",
          f"| per parameter ({pub['per_parameter_calls']} calls) |"
          f" {pub['per_parameter_s']:.3f} |"
          f" {pub['per_parameter_over_floor']:.2f} |"
          f" {pub['per_parameter_over_allgather']:.2f} |",
          f"| floor: raw all-gather of one buffer + one copy |"
          f" {pub['floor_s']:.3f} (= {pub['floor_allgather_s']:.3f} +"
          f" {pub['floor_copy_s']:.3f}) | 1.00 | |", ""]
    dec = micro.get("decode")
    if dec:
      lines += [
          "Decode iteration (generate time / iterations, same total rows):",
          "", "| engine | ms per iteration |", "|---|---|",
          f"| host-local (each of 2 hosts, its own devices) |"
          f" {dec['host_local_iter_s'] * 1e3:.2f} |",
          f"| single controller (one engine over all devices) |"
          f" {dec['single_controller_iter_s'] * 1e3:.2f} |", ""]
    adm = micro.get("admission")
    if adm:
      lines += [
          f"Admission of {adm['rows'][0]['prompts']} {adm['source']} prompts"
          " per step, one host's time (tokenization included):", "",
          "| hosts | dataset order ms | balanced (O3) ms |", "|---|---|---|"]
      lines += [f"| {r['hosts']} | {r['base_s'] * 1e3:.2f} |"
                f" {r['balanced_s'] * 1e3:.2f} |" for r in adm["rows"]]
  return "\n".join(lines) + "\n"


def plots(report: Mapping[str, Any], out: pathlib.Path) -> list[str]:
  """Step time per arm, and the stacked phase breakdown; returns paths."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  paths = []
  arms = {n: a for n, a in report["arms"].items() if a.get("step_times_s")}
  if not arms:
    return paths
  fig, ax = plt.subplots(figsize=(8, 4.5))
  names = list(arms)
  data = [arms[n]["step_times_s"] for n in names]
  ax.boxplot(data, showfliers=True)
  for i, d in enumerate(data, start=1):
    ax.scatter(np.full(len(d), i), d, s=10, alpha=0.6)
  ax.set_xticks(range(1, len(names) + 1), names, rotation=20, ha="right")
  ax.set_ylabel("step time, s (scored steps)")
  ax.set_title("Step time per arm (" + report["mode"] + " mode)")
  fig.tight_layout()
  p = out / "step_time.png"
  fig.savefig(p, dpi=110)
  plt.close(fig)
  paths.append(str(p))

  fig, ax = plt.subplots(figsize=(10, 4.5))
  bottom = np.zeros(len(names))
  for part in PARTS:
    vals = np.array([arms[n]["mean_parts_s"][part] for n in names])
    ax.bar(names, vals, bottom=bottom, label=part)
    bottom += vals
  waits = np.array([arms[n].get("straggler_wait_median_s", 0.0)
                    for n in names])
  ax.scatter(names, waits, color="black", marker="x", zorder=3,
             label="straggler wait (median)")
  ax.set_ylabel("s per step (mean over scored steps)")
  ax.set_title("Where the step time goes (slowest host)")
  ax.tick_params(axis="x", labelrotation=20)
  ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
  fig.tight_layout()
  p = out / "phases.png"
  fig.savefig(p, dpi=110)
  plt.close(fig)
  paths.append(str(p))
  return paths


def write_outputs(report: dict[str, Any], out: pathlib.Path) -> None:
  """report.json, report.md and the plots under `out`."""
  out.mkdir(parents=True, exist_ok=True)
  report["outputs"] = {
      "json": str(out / "report.json"),
      "table": str(out / "report.md"),
      "plots": plots(report, out),
  }
  (out / "report.md").write_text(markdown(report))
  (out / "report.json").write_text(json.dumps(report, indent=1))
