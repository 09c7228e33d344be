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

"""The benchmark report as people read it: report.md tables and PNG plots.

`report.build_report` computes the numbers; this module only presents them.
"""

from __future__ import annotations

from collections.abc import Mapping
import pathlib
from typing import Any

import numpy as np

from tunix_mcjax import telemetry

PARTS = telemetry.PHASES + telemetry.HOST_OVERHEADS


def _fmt_interval(iv: Mapping[str, float] | None, scale: float = 1.0,
                  digits: int = 3) -> str:
  if not iv:
    return "n/a"
  return (f"{iv['value'] * scale:.{digits}f} [{iv['low'] * scale:.{digits}f},"
          f" {iv['high'] * scale:.{digits}f}]")


def _machine_line(m: Mapping[str, Any]) -> str:
  acc = m.get("accelerator") or {}
  if acc.get("platform") in (None, "cpu"):
    acc_s = ("none detected (JAX's default devices: "
             f"{acc.get('count', '?')} x {acc.get('device_kind', '?')})"
             if acc.get("platform") else acc.get("error", "unknown"))
  else:
    acc_s = f"{acc.get('count')} x {acc.get('device_kind')} ({acc['platform']})"
  load = "/".join("?" if m.get(k) is None else f"{m[k]:.1f}"
                  for k in ("load_before", "load_after"))
  return (f"Machine: {m.get('cpu_model', '?')}, {m.get('cpu_count')} cores,"
          f" {m.get('memory_gib', '?')} GiB; accelerator: {acc_s}; jax"
          f" {acc.get('jax', '?')}; load before/after the bench: {load}.")


def _arms_line(m: Mapping[str, Any]) -> str:
  acc = m.get("accelerator") or {}
  if acc.get("platform") in (None, "cpu"):
    where = ("The arms run the GRPO example's simulated hosts (JAX CPU"
             " devices, sharing the cores)")
  else:
    where = (f"The arms run on this machine's {acc.get('platform')} devices"
             " (one process per host)")
  return (where + ": compare ratios within this report, not absolute times"
          " across machines. 'load' is the machine's 1-minute load average"
          " before and after each launch.")


def markdown(report: Mapping[str, Any]) -> str:
  """The report as markdown tables."""
  m = report["machine"]
  proto = report["protocol"]
  lines = [
      f"# Benchmark report ({report['mode']} mode)",
      "",
      _machine_line(m),
      _arms_line(m),
      "",
      f"Protocol: {proto['scored']} are scored, {proto['launches']}"
      f" launch(es) per arm; step time = {proto['step_time']}; intervals:"
      f" {proto['interval']}; 'faster' only if {proto['faster_if']}.",
      "",
      "## Arms",
      "",
      "| arm | what it runs | hosts x devices | scored steps |"
      " median step s [95% CI] | launch medians s | ms per token [95% CI] |"
      " straggler wait s | decode iter ms | equal work | load before/after |",
      "|---|---|---|---|---|---|---|---|---|---|---|",
  ]
  for name, a in report["arms"].items():
    c = a["config"]
    eq = report["equal_work"].get(name)
    eq_s = "baseline" if name == report["baseline"] else (
        "n/a" if eq is None else ("yes" if eq["equal"] else "NO: " + ", ".join(
            k for k, v in eq["checks"].items() if not v["ok"])))
    it = a.get("decode_iter_median_s")
    load = ", ".join("/".join("?" if v is None else f"{v:.1f}" for v in lb)
                     for lb in a.get("load_before_after", []))
    meds = ", ".join(f"{x:.3f}" for x in a.get("launch_medians_s", []))
    wait = a.get("straggler_wait_median_s")
    lines.append(
        f"| {name}{'' if a['ok'] else ' (FAILED)'} | {a['description']} |"
        f" {c['num_hosts']} x {c['devices_per_host']} |"
        f" {a['steps_scored']} | {_fmt_interval(a.get('median_step_s'))} |"
        f" {meds or 'n/a'} |"
        f" {_fmt_interval(a.get('median_step_per_token_s'), 1e3, 2)} |"
        f" {'n/a' if wait is None else f'{wait:.3f}'} |"
        f" {'n/a' if it is None else f'{it * 1e3:.2f}'} | {eq_s} | {load} |")
  lines += ["", "## Speedups (baseline time / other time)", "",
            "| baseline | other | per step [95% CI] | per token [95% CI] |"
            " Welch per step | Welch per token | verdict | why not faster |",
            "|---|---|---|---|---|---|---|---|"]
  for r in report["ratios"]:
    lines.append(
        f"| {r['baseline']} | {r['other']} |"
        + " ".join(
            ", ".join(_fmt_interval(pl[k], digits=2)
                      for pl in r["per_launch"]) + " |"
            for k in ("per_step", "per_token"))
        + f" {_fmt_interval(r['welch_per_step'], digits=2)} |"
        f" {_fmt_interval(r['welch_per_token'], digits=2)} |"
        f" {r['verdict']} | {'; '.join(r['reasons']) or '-'} |")
  preds = report.get("da_predictions") or {}
  if preds:
    lines += ["", "## DA: the advisor's predicted vs measured step time", "",
              "From the colocated reference arm's scored steps (medians of"
              " the advisor's terms; linear scaling, d_L = d_pub, A = tau ="
              " 0). K >= 1: Eq. 4 (overlapped); K = 0: the same terms added"
              " serially. error = predicted / measured - 1 (median over"
              " launch pairs).", "",
              "| arm | split | K | from | rollout branch s | trainer branch s"
              " | o s | Eq. 4 s | serial s | predicted s | measured median s"
              " | error |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, pr in preds.items():
      if "predicted_s" not in pr:
        lines.append(f"| {name} | {pr['split']} | {pr['max_staleness']} |"
                     f" {pr['reference']} | n/a: {pr['error_message']} |"
                     + " |" * 7)
        continue
      b = pr["by_launch"][0]
      lines.append(
          f"| {name} | {pr['split']} | {pr['max_staleness']} |"
          f" {pr['reference']} | {b['rollout_branch_s']:.3f} |"
          f" {b['trainer_branch_s']:.3f} | {b['overhead_s']:.3f} |"
          f" {b['eq4_s']:.3f} | {b['serial_s']:.3f} |"
          f" {pr['predicted_s']:.3f} | {pr['measured_s']:.3f} |"
          f" {pr['error']:+.1%} |")
  lines += ["", "## Start-up and compilation (mean over launches)", "",
            "start-up: launch wall time outside its steps; compile: the"
            " first pass's time beyond the steady median.", "",
            "| arm | start-up s | compile s |", "|---|---|---|"]
  for name, a in report["arms"].items():
    su, co = a.get("startup_s"), a.get("compile_s")
    lines.append(f"| {name} | {'n/a' if su is None else f'{su:.1f}'} |"
                 f" {'n/a' if co is None else f'{co:.2f}'} |")
  lines += ["", "## Work per arm (scored steps, first launch)", "",
            "padded-token share: token slots of the train batch that hold no"
            " token the loss reads (packed rows with packing, else prompt and"
            " completion padding as Tunix pads them); unpacked: the same rows"
            " without packing.", "",
            "| arm | mean length | longest | truncated share |"
            " completion tokens per step | padded-token share |"
            " unpacked padded-token share |", "|---|---|---|---|---|---|---|"]
  for name, a in report["arms"].items():
    w, x = a.get("work"), a.get("work_extras") or {}
    if not w:
      continue
    tr = w.get("truncated_share")
    tok = x.get("completion_tokens_per_step")
    pad, unp = x.get("padded_token_share"), x.get("unpacked_padded_token_share")
    pad_s = "n/a" if pad is None else (
        f"{pad:.3f}" + (" (packed)" if x.get("packed") else ""))
    lines.append(
        f"| {name} | {w['mean_length']:.2f} | {w['longest']:.0f} |"
        f" {'n/a' if tr is None else f'{tr:.2f}'} |"
        f" {'n/a' if tok is None else f'{tok:.0f}'} | {pad_s} |"
        f" {'n/a' if unp is None else f'{unp:.3f}'} |")
  lines += ["", "## Step breakdown from the profiler traces (traced step"
            f" {proto.get('traced_step')}, slowest host)", "",
            "compute: devices busy outside collectives; collective: devices"
            " in collectives (on CPU including the rendezvous wait); host:"
            " the rest. overhead = 1 - compute / step.", "",
            "| arm | step s | compute s | collective s | host s | overhead |"
            " per phase: compute / collective / host s |",
            "|---|---|---|---|---|---|---|"]
  for name, a in report["arms"].items():
    t = a.get("trace")
    if not t:
      continue
    st = t["step"]
    ph = "; ".join(
        f"{p} {v['compute_s']:.3f}/{v['collective_s']:.3f}/{v['host_s']:.3f}"
        for p, v in t["phases"].items())
    lines.append(
        f"| {name} | {st['wall_s']:.3f} | {st['compute_s']:.3f} |"
        f" {st['collective_s']:.3f} | {st['host_s']:.3f} |"
        f" {t['overhead']:.2f} | {ph} |")
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
          f" bf16) from FSDP over {len(micro.get('publication_hosts') or [])}"
          " host(s) into each host's replicated layout"
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
          f"| host-local (each host, its own devices) |"
          f" {dec['host_local_iter_s'] * 1e3:.2f} |"]
      if "single_controller_iter_s" in dec:
        lines += [f"| single controller (one engine over all devices) |"
                  f" {dec['single_controller_iter_s'] * 1e3:.2f} |"]
      lines += [""]
    adm = micro.get("admission")
    if adm:
      lines += [
          f"Admission of {adm['rows'][0]['prompts']} {adm['source']} prompts"
          " per step, one host's time (tokenization included):", "",
          "| hosts | dataset order ms | balanced (O3) ms |", "|---|---|---|"]
      lines += [f"| {r['hosts']} | {r['base_s'] * 1e3:.2f} |"
                f" {r['balanced_s'] * 1e3:.2f} |" for r in adm["rows"]]
    ext = micro.get("gsm8k_extraction")
    if ext:
      lines += ["", f"GSM8K answer extraction: slowest shape"
                f" {ext['largest_s'] * 1e3:.2f} ms for a"
                f" {max(ext['sizes']) // 1000} KB completion; growth for 10x"
                f" the length: {ext['worst_growth']:.1f}x (linear: ~10x)."]
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

  traced = {n: a["trace"] for n, a in report["arms"].items()
            if a.get("trace")}
  if traced:
    fig, ax = plt.subplots(figsize=(9, 4.5))
    names = list(traced)
    bottom = np.zeros(len(names))
    for key, label in (("compute_s", "compute (devices busy)"),
                       ("collective_s", "collectives"),
                       ("host_s", "host orchestration")):
      vals = np.array([traced[n]["step"][key] for n in names])
      ax.bar(names, vals, bottom=bottom, label=label)
      bottom += vals
    for i, n in enumerate(names):
      ax.text(i, bottom[i], f"overhead {traced[n]['overhead']:.0%}",
              ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("s (traced step, slowest host)")
    ax.set_title("Step breakdown from profiler traces")
    ax.tick_params(axis="x", labelrotation=20)
    ax.legend(fontsize=8)
    fig.tight_layout()
    p = out / "breakdown.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(str(p))
  return paths
