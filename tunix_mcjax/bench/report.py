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

"""The benchmark report: the numbers (report.json); `render` presents them."""

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
from tunix_mcjax.bench import render
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


def write_outputs(report: dict[str, Any], out: pathlib.Path) -> None:
  """report.json, report.md and the plots under `out`."""
  out.mkdir(parents=True, exist_ok=True)
  report["outputs"] = {
      "json": str(out / "report.json"),
      "table": str(out / "report.md"),
      "plots": render.plots(report, out),
  }
  (out / "report.md").write_text(render.markdown(report))
  (out / "report.json").write_text(json.dumps(report, indent=1))
