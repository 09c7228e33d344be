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
from typing import Any

import numpy as np

from tunix_mcjax import advisor
from tunix_mcjax import telemetry
from tunix_mcjax.bench import arms as arms_lib
from tunix_mcjax.bench import stats
from tunix_mcjax.bench import traces

PHASES = telemetry.PHASES
OVERHEADS = telemetry.HOST_OVERHEADS
PARTS = PHASES + OVERHEADS


def load_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
  p = pathlib.Path(path)
  if not p.exists():
    return []
  return [json.loads(line) for line in p.read_text().splitlines() if line]


def step_tokens(record: Mapping[str, Any]) -> int:
  """A step record's completion tokens (over all hosts), checked.

  Per-token times divide by it, so a missing or non-positive count is an
  error rather than a stand-in value (which would report the step time as
  the time per token).

  Raises:
    ValueError: naming the step.
  """
  tokens = record.get("completion_tokens")
  if tokens is None or isinstance(tokens, bool) or int(tokens) < 1:
    raise ValueError(
        f"step {record.get('step')} of the bench records has"
        f" completion_tokens={tokens!r}; per-token times need the count of"
        " completion tokens (>= 1): check that the run wrote complete step"
        " records (telemetry.StepRecord) and rerun the arm."
    )
  return int(tokens)


def work_extras(scored: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
  """Per-launch work statistics beyond the equal-work check's.

  The place for statistics of what an arm processed that the report shows
  per arm ("Work" table), e.g. the padded-token share of sequence packing.
  """
  tokens = [step_tokens(r) for r in scored]
  unpacked = _shares(scored, "unpacked_padded_token_share")
  packed = _shares(scored, "padded_token_share")
  return {
      "completion_tokens_per_step": float(np.mean(tokens))
                                    if tokens else None,
      # The token slots the train step computed over that hold no token the
      # loss reads: packed rows' padding with packing, else the unpacked
      # batch's (prompt and completion padding as Tunix pads them). Mean
      # over scored steps.
      "padded_token_share": packed if packed is not None else unpacked,
      "packed": packed is not None,
      # What the same rows pad unpacked (with packing: the comparison).
      "unpacked_padded_token_share": unpacked,
  }


def _shares(scored: Sequence[Mapping[str, Any]], key: str) -> float | None:
  """Mean of a per-step share over the steps; None unless every step has it.

  A share some steps lack would mix packed and unpacked steps (or steps of
  a run that did not record it), so it is refused as a whole.
  """
  xs = [r.get(key) for r in scored]
  if not xs or any(x is None for x in xs):
    return None
  return float(np.mean(xs))


def _startup_and_compile(records: Sequence[Mapping[str, Any]],
                         workload: arms_lib.Workload, run: Mapping[str, Any],
                         steady_median: float | None) -> dict[str, Any]:
  """Start-up and compilation time of one launch, each on its own.

  - start-up: the launch's wall time outside its recorded steps (process
    and JAX start, model build, the learner's set-up, shutdown);
  - compile: what the first pass's steps took beyond the steady median
    (their first-time compilations; the second pass runs the same batches
    with everything compiled).
  """
  out: dict[str, Any] = {"startup_s": None, "compile_s": None}
  if not records or run.get("wall_s") is None:
    return out
  steps_s = sum(float(r["step_time_s"]) for r in records)
  out["startup_s"] = max(0.0, float(run["wall_s"]) - steps_s)
  if steady_median is not None:
    first = [float(r["step_time_s"]) for r in records
             if not workload.scored(int(r["step"]))]
    out["compile_s"] = float(sum(max(0.0, t - steady_median) for t in first))
  return out


def summarize_launch(
    arm: arms_lib.Arm,
    workload: arms_lib.Workload,
    records: Sequence[Mapping[str, Any]],
    run: Mapping[str, Any],
) -> dict[str, Any]:
  """One launch: scored steps, medians with intervals, phase breakdown."""
  expected = workload.steps * workload.passes
  scored = [r for r in records if workload.scored(int(r["step"]))]
  out: dict[str, Any] = {
      "run": dict(run),
      "steps_recorded": len(records),
      "steps_scored": len(scored),
      "ok": run.get("returncode") == 0 and len(records) == expected
            and len(scored) == workload.steps,
  }
  if not out["ok"]:
    out["error"] = (f"exit {run.get('returncode')}, {len(records)} of"
                    f" {expected} steps recorded; see {run.get('log')}")
  if run.get("trace_dir"):
    try:
      out["trace"] = traces.analyse_dir(run["trace_dir"])
    except (ValueError, OSError, KeyError) as e:
      out["trace"] = {"error": f"{type(e).__name__}: {e}"}
  if not scored:
    return out
  times = [float(r["step_time_s"]) for r in scored]
  tokens = [step_tokens(r) for r in scored]
  per_token = [t / n for t, n in zip(times, tokens)]
  out["step_times_s"] = times
  out["step_time_per_token_s"] = per_token
  out["median_step_s"] = stats.median_interval(times).as_dict()
  out["median_step_per_token_s"] = stats.median_interval(per_token).as_dict()
  out.update(_startup_and_compile(records, workload, run,
                                  float(np.median(times))))
  out["work"] = dataclasses.asdict(stats.summarize_work(scored))
  out["work"]["prompts"] = list(out["work"]["prompts"])
  out["work_extras"] = work_extras(scored)
  out["_scored"] = scored
  return out


def da_prediction(
    arm: arms_lib.Arm,
    workload: arms_lib.Workload,
    reference: Sequence[Sequence[Mapping[str, Any]]],
    measured: Sequence[Sequence[Mapping[str, Any]]],
) -> dict[str, Any]:
  """The advisor's predicted step time of a DA arm vs its measured one.

  Per launch pair k: the advisor's terms (`advisor.steady_phase_times`)
  from launch k of the colocated reference arm (its scored pass: the same
  steady steps the report scores), the prediction (`advisor.predict`) at
  the arm's split (H = T + R hosts, trainer share T / H; the advisor's
  defaults otherwise: linear scaling, d_L = d_pub, A = tau = 0), and the
  median of launch k's scored DA step times.

  Which prediction is compared: with max_staleness >= 1 the paper's
  overlapped schedule (Eq. 4, `lambda_DA`); with max_staleness = 0 nothing
  overlaps, so the same terms add up serially: rollout branch + trainer
  branch + o (+ tau). Both are recorded.

  Args:
    arm: the DA arm (`predicted_from` names the reference).
    workload: the mode's workload (which steps are scored).
    reference: the reference arm's records, one list per launch.
    measured: the DA arm's records, one list per launch.

  Returns:
    `predicted_s`, `measured_s` (medians over launch pairs), `error`
    (predicted / measured - 1) and `by_launch`; or `error_message` when no
    launch pair gave both.
  """
  t, r = arm.trainer_hosts, arm.rollout_hosts
  config = advisor.AdvisorConfig(hosts=t + r, trainer_shares=(t / (t + r),))
  skip = workload.steps * (workload.passes - 1)
  overlapped = arm.max_staleness >= 1
  by_launch, problems = [], []
  for k, (ref, da) in enumerate(zip(reference, measured)):
    scored = [float(x["step_time_s"]) for x in da
              if workload.scored(int(x["step"]))]
    if not scored:
      problems.append(f"launch {k + 1}: no scored {arm.name} steps")
      continue
    try:
      times = advisor.steady_phase_times(ref, skip_steps=skip)
    except ValueError as e:
      problems.append(f"launch {k + 1}: {arm.predicted_from}: {e}")
      continue
    advice = advisor.predict(times, config)
    (split,) = advice.da
    serial = (split.rollout_branch_s + split.trainer_branch_s
              + times.overhead_s + config.ray_overhead_s)
    predicted = split.step_s if overlapped else serial
    meas = float(np.median(scored))
    by_launch.append({
        "reference_hosts": times.hosts,
        "rollout_s": times.rollout_s, "train_s": times.train_s,
        "publish_s": times.publish_s, "overhead_s": times.overhead_s,
        "reference_measured_s": times.measured_step_s,
        "co_predicted_s": advice.co.step_s,
        "rollout_branch_s": split.rollout_branch_s,
        "trainer_branch_s": split.trainer_branch_s,
        "eq4_s": split.step_s, "serial_s": serial,
        "predicted_s": predicted, "measured_s": meas,
        "error": predicted / meas - 1,
    })
  out: dict[str, Any] = {
      "reference": arm.predicted_from,
      "split": f"DA {t}/{r}",
      "max_staleness": arm.max_staleness,
      "model": ("overlapped: max(D_R(H_r) + d_L, D_T(H_t) + d_pub) + o"
                if overlapped else
                "serial (K=0): D_R(H_r) + d_L + D_T(H_t) + d_pub + o"),
      "assumptions": "linear scaling from the reference's host count;"
                     " d_L = d_pub; A = tau = 0 (advisor defaults)",
      "by_launch": by_launch,
  }
  if problems:
    out["problems"] = problems
  if not by_launch:
    out["error_message"] = "; ".join(problems) or "no launches"
    return out
  out["predicted_s"] = float(np.median([b["predicted_s"] for b in by_launch]))
  out["measured_s"] = float(np.median([b["measured_s"] for b in by_launch]))
  out["error"] = out["predicted_s"] / out["measured_s"] - 1
  return out


def _mean_or_none(xs: Sequence[float | None]) -> float | None:
  xs = [x for x in xs if x is not None]
  return float(np.mean(xs)) if xs else None


def summarize_arm(
    arm: arms_lib.Arm,
    workload: arms_lib.Workload,
    launches: Sequence[tuple[Sequence[Mapping[str, Any]], Mapping[str, Any]]],
) -> dict[str, Any]:
  """An arm over its launches ((records, run) each)."""
  per = [summarize_launch(arm, workload, rec, run) for rec, run in launches]
  scored = [r for p in per for r in p.pop("_scored", [])]
  out: dict[str, Any] = {
      "config": {"backend": arm.backend, "num_hosts": arm.num_hosts,
                 "devices_per_host": arm.devices_per_host,
                 "profile": arm.profile, "stock_rollout": arm.stock_rollout,
                 "trainer_hosts": arm.trainer_hosts,
                 "rollout_hosts": arm.rollout_hosts,
                 "max_staleness": arm.max_staleness},
      "description": arm.describe(),
      "launches": per,
      "ok": bool(per) and all(p["ok"] for p in per),
      "steps_scored": sum(p["steps_scored"] for p in per),
      "startup_s": _mean_or_none([p.get("startup_s") for p in per]),
      "compile_s": _mean_or_none([p.get("compile_s") for p in per]),
  }
  errors = [f"launch {i + 1}: {p['error']}" for i, p in enumerate(per)
            if "error" in p]
  if errors:
    out["error"] = "; ".join(errors)
  loads = [(p["run"].get("load_before"), p["run"].get("load_after"))
           for p in per]
  out["load_before_after"] = loads
  broken = [p["trace"] for p in per
            if isinstance(p.get("trace"), dict) and "step" in p["trace"]]
  if broken:
    out["trace"] = {
        "overhead": float(np.mean([t["overhead"] for t in broken])),
        "overhead_by_launch": [t["overhead"] for t in broken],
        "step": {k: float(np.mean([t["step"][k] for t in broken]))
                 for k in broken[0]["step"]},
        "phases": broken[0]["phases"],
        "hosts": len(broken[0]["hosts"]),
    }
  if not scored:
    return out
  times = [float(r["step_time_s"]) for r in scored]
  tokens = [step_tokens(r) for r in scored]
  out["step_times_s"] = times
  out["step_time_per_token_s"] = [t / n for t, n in zip(times, tokens)]
  out["launch_medians_s"] = [p["median_step_s"]["value"] for p in per
                             if "median_step_s" in p]
  out["launch_medians_per_token_s"] = [
      p["median_step_per_token_s"]["value"] for p in per
      if "median_step_per_token_s" in p]
  # Pooled over launches (descriptive; verdicts use launches, see
  # `_comparison`).
  out["median_step_s"] = stats.median_interval(times).as_dict()
  out["median_step_per_token_s"] = stats.median_interval(
      out["step_time_per_token_s"]).as_dict()
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
  out["work"] = next(p["work"] for p in per if "work" in p)
  out["work_extras"] = next(p["work_extras"] for p in per
                            if "work_extras" in p)
  pads = [p["work_extras"]["padded_token_share"] for p in per
          if p.get("work_extras", {}).get("padded_token_share") is not None]
  out["work_extras"] = dict(out["work_extras"]) | {
      "padded_token_share_by_launch": pads}
  return out


def _work_summary(d: Mapping[str, Any]) -> stats.WorkSummary:
  return stats.WorkSummary(**(dict(d) | {"prompts": tuple(d["prompts"])}))


def _comparison(summaries: Mapping[str, Mapping[str, Any]], base: str,
                other: str) -> dict[str, Any] | None:
  """One comparison under the paper's rules (`stats.decide`).

  Launch k of `other` is compared with launch k of `base` (bootstrap over
  their steady steps, per step and per token; equal work); with 2+
  launches each, also the Welch interval on log launch medians.
  """
  a, b = summaries.get(base), summaries.get(other)
  if not a or not b:
    return None
  pairs = [(x, y) for x, y in zip(a["launches"], b["launches"])
           if "step_times_s" in x and "step_times_s" in y]
  if not pairs:
    return None
  per_step = tuple(stats.ratio_interval(x["step_times_s"], y["step_times_s"])
                   for x, y in pairs)
  per_token = tuple(stats.ratio_interval(x["step_time_per_token_s"],
                                         y["step_time_per_token_s"])
                    for x, y in pairs)
  work = [stats.equal_work(_work_summary(x["work"]), _work_summary(y["work"]))
          for x, y in pairs]
  welch_step = stats.welch_ratio_interval(a["launch_medians_s"],
                                          b["launch_medians_s"])
  welch_token = stats.welch_ratio_interval(a["launch_medians_per_token_s"],
                                           b["launch_medians_per_token_s"])
  ev = stats.Evidence(
      per_step=per_step, per_token=per_token, welch_per_step=welch_step,
      welch_per_token=welch_token,
      equal_work=tuple(w["equal"] for w in work),
      launches=(len(a["launches"]), len(b["launches"])))
  decision = stats.decide(ev)
  return {
      "baseline": base,
      "other": other,
      # Launch 1's bootstrap intervals (the one-launch summary).
      "speedup_per_step": per_step[0].as_dict(),
      "speedup_per_token": per_token[0].as_dict(),
      "per_launch": [{"per_step": s.as_dict(), "per_token": t.as_dict(),
                      "equal_work": w["equal"]}
                     for s, t, w in zip(per_step, per_token, work)],
      "welch_per_step": welch_step.as_dict() if welch_step else None,
      "welch_per_token": welch_token.as_dict() if welch_token else None,
      "launches": list(ev.launches),
      "verdict": decision["verdict"],
      "reasons": decision["reasons"],
      # Each interval's own reading, for information.
      "verdict_per_step_interval": stats.verdict(per_step[0]),
      "verdict_per_token_interval": stats.verdict(per_token[0]),
  }


def build_report(
    mode: arms_lib.BenchMode,
    runs: Mapping[str, Sequence[Mapping[str, Any]]],
    micro: Mapping[str, Any] | None,
    *,
    machine: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
  """Everything the benchmark measured, as one JSON-able dict.

  Args:
    mode: what ran.
    runs: per arm, one run dict per launch (`harness.run_arm`).
    micro: the micro-benchmarks' raw results, or None.
    machine: `harness.machine_info(...)`.
  """
  summaries = {}
  records = {}
  for arm in mode.arms:
    launches = [(load_records(run.get("metrics", "")), run)
                for run in runs.get(arm.name) or [{"returncode": None}]]
    records[arm.name] = [rec for rec, _ in launches]
    summaries[arm.name] = summarize_arm(arm, mode.workload, launches)
  predictions = {
      arm.name: da_prediction(arm, mode.workload, records[arm.predicted_from],
                              records[arm.name])
      for arm in mode.arms
      if arm.backend == arms_lib.DA_BACKEND and arm.predicted_from in records
  }
  base = arms_lib.BASELINE if arms_lib.BASELINE in summaries else (
      mode.arms[0].name)
  pairs = [(base, a.name) for a in mode.arms if a.name != base]
  pairs += [p for p in arms_lib.EXTRA_COMPARISONS
            if p[0] in summaries and p[1] in summaries and p[0] != base]
  ratios = [c for c in (_comparison(summaries, *p) for p in pairs) if c]
  equal = {}
  bl = summaries[base]["launches"]
  for name, s in summaries.items():
    if name == base:
      continue
    checks = [stats.equal_work(_work_summary(x["work"]),
                               _work_summary(y["work"]))
              for x, y in zip(bl, s["launches"])
              if "work" in x and "work" in y]
    if checks:
      equal[name] = {"equal": all(c["equal"] for c in checks),
                     "checks": checks[0]["checks"],
                     "by_launch": [c["equal"] for c in checks]}
  return {
      "machine": dict(machine or {}),
      "mode": mode.name,
      "protocol": {
          "scored": f"the last of {mode.workload.passes} passes over the"
                    f" same {mode.workload.steps} batches",
          "launches": mode.launches,
          "step_time": "per launch, the median over scored steps",
          "interval": f"{int(stats.CONFIDENCE * 100)}% percentile bootstrap,"
                      f" {stats.RESAMPLES} resamples, per launch pair; Welch"
                      " interval on log launch medians with 2+ launches",
          "faster_if": f"per-step and per-token lower bounds >"
                       f" {stats.FASTER_THRESHOLD} in every comparison,"
                       f" equal work, {stats.REQUIRED_LAUNCHES} launches per"
                       " arm",
          "faster_if_lower_bound_above": stats.FASTER_THRESHOLD,
          "equal_work": "same prompts in order; mean and longest output"
                        f" length ratio in {list(stats.LENGTH_RATIO_RANGE)};"
                        " truncation shares within"
                        f" {int(stats.TRUNCATION_POINTS * 100)} points",
          "traced_step": (mode.workload.steps if mode.workload.passes > 1
                          else 1) if mode.trace else None,
      },
      "workload": dataclasses.asdict(mode.workload),
      "baseline": base,
      "arms": summaries,
      "ratios": ratios,
      "equal_work": equal,
      "da_predictions": predictions,
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
    out["publication_hosts"] = [h.get("host") for h in hosts
                                if "publication" in h]
    out["publication"] = {k: v for k, v in worst.items()
                          if not k.endswith("_times")}
    out["publication"]["one_call_over_allgather"] = (
        worst["one_call_s"] / worst["floor_allgather_s"])
    out["publication"]["per_parameter_over_allgather"] = (
        worst["per_parameter_s"] / worst["floor_allgather_s"])
  local = [h["decode"] for h in hosts if "decode" in h]
  single = [h["decode"] for h in micro.get("single") or [] if "decode" in h]
  if local and not single:
    # One host (the device run): its engine's own iteration time.
    out["decode"] = {"host_local_iter_s": max(d["decode_iter_s"]
                                              for d in local),
                     "host_local": local}
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
  if micro.get("gsm8k_extraction"):
    out["gsm8k_extraction"] = micro["gsm8k_extraction"]
  return out


# --- outputs ----------------------------------------------------------------


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


def markdown(report: Mapping[str, Any]) -> str:
  """The report as markdown tables."""
  m = report["machine"]
  proto = report["protocol"]
  lines = [
      f"# Benchmark report ({report['mode']} mode)",
      "",
      _machine_line(m),
      "The arms run the GRPO example's simulated hosts (JAX CPU devices,"
      " sharing the cores): compare ratios within this report, not absolute"
      " times across machines. 'load' is the machine's 1-minute load average"
      " before and after each launch.",
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
