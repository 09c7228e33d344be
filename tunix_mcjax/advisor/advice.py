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

"""Placement advisor: colocated (CO) or disaggregated (DA), from a CO run.

Reads the step records (`docs/metrics.md`) of a COLOCATED run and predicts,
with the paper's critical-path accounting (LoCoJAX, Appendix C, Eq. 4), the
steady step time of CO and of DA at each trainer/rollout split:

  lambda_CO = D_R(H) + D_T(H) + d_pub + o
  lambda_DA = max(D_R(H_r) + d_L, D_T(H_t) + d_pub) + o - A + tau

Symbols (the paper's, plus `o`):

- H: hosts of the placement (`--hosts`; default the run's host count).
  H_t trainer hosts = share * H for share in 1/2, 1/4, 1/8 (the paper's
  splits); H_r = H - H_t rollout hosts. A split is skipped unless H_t is a
  whole number and both sides get >= 1 host.
- D_R(n): rollout time on n hosts: the record's phases `admission`,
  `generate`, `reward` and `learner_host` (host-local work on the host's
  own rows), slowest host.
- D_T(n): training time on n hosts: phases `logps` (reference and old-policy
  log-probs; in DA they are recomputed on the trainer hosts) and `train`.
- d_pub: weight publication, the `publish` phase. Assumed the same in DA
  (trainer gathers once and hands the weights over) as measured in CO.
- d_L: rollout weight load (a rollout host fetches a full copy and installs
  it). Not measurable in a CO run: default = the measured d_pub (CO's
  publication also ends with a full copy in every host's engine), or
  `weight_load_s`.
- A >= 0: the straggler wait that one-step staleness absorbs (the paper
  simulates it). Not measurable in a CO run: default 0 (no absorption, the
  conservative choice for DA), or `straggler_absorbed_s`.
- tau: residual Ray overhead of DA, including the batch transfer rollout ->
  trainer (the paper's residual). Not measurable in a CO run: default 0
  (DA's prediction is optimistic by tau), or `ray_overhead_s`.
- o: per-step host work outside the phases (`host_overhead`: metrics
  export, garbage collection). Every process pays it once per step in
  either mode, so it is added once to both; Eq. 4 is the case o = 0.

Scaling to other host counts (an explicit assumption, fixed global batch):
D(n) = D(H0) * (H0 / n) ** e with e = 1 (linear: rollout and training time
inversely proportional to host count), separately for D_R and D_T; d_pub,
d_L, o, A and tau do not change with n. Given a second CO run at another
host count on the same work, `fit_exponents` measures e_R and e_T instead.

Phase times are per-phase medians (or means) over steady steps: steps after
`skip_steps` (compilation and start-up excluded). Medians do not add, so
lambda_CO at the run's own host count may differ from the median measured
step time; both are reported. The paper calls this an accounting of
measured step times, not a validated predictor; so is this.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import dataclasses
import json
import math
import os
import pathlib
from typing import Any

import numpy as np

from tunix_mcjax.telemetry import records as records_lib

# The record's phases, from the JAX-free record schema.
RECORD_PHASES = records_lib.PHASES
PUBLISH_PHASE = "publish"
DEFAULT_ROLLOUT_PHASES = ("admission", "generate", "reward", "learner_host")
DEFAULT_TRAINER_PHASES = ("logps", "train")
# The paper's splits: the trainer's share of the hosts.
DEFAULT_TRAINER_SHARES = (1 / 2, 1 / 4, 1 / 8)
STATISTICS = ("median", "mean")
_REQUIRED_FIELDS = ("step", "num_hosts", "step_time_s", "phases",
                    "host_overhead")


def _finite_nonneg(name: str, value: float) -> None:
  if not (math.isfinite(value) and value >= 0):
    raise ValueError(f"{name} must be a finite number >= 0, got {value}.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PhaseTimes:
  """Steady-step times of one CO run, split into the model's terms.

  Attributes:
    hosts: hosts of the run (H0).
    rollout_s: D_R(H0), seconds.
    train_s: D_T(H0), seconds.
    publish_s: d_pub, seconds.
    overhead_s: o, seconds.
    measured_step_s: the same statistic of `step_time_s` (for comparison).
    steps: the steady steps used.
    prompts_digests: their `prompts_digest` values (None: not recorded).
  """

  hosts: int
  rollout_s: float
  train_s: float
  publish_s: float
  overhead_s: float
  measured_step_s: float
  steps: tuple[int, ...]
  prompts_digests: tuple[str | None, ...] = ()

  def __post_init__(self):
    if self.hosts < 1:
      raise ValueError(f"hosts must be >= 1, got {self.hosts}.")
    for name in ("rollout_s", "train_s", "publish_s", "overhead_s",
                 "measured_step_s"):
      _finite_nonneg(name, getattr(self, name))
    if not self.steps:
      raise ValueError("PhaseTimes needs at least one steady step.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AdvisorConfig:
  """Inputs of the model that a CO run does not give.

  Attributes:
    hosts: H, hosts to place (None: the run's own).
    trainer_shares: the trainer's shares of the hosts to try, each in (0, 1).
    weight_load_s: d_L (None: the measured d_pub).
    straggler_absorbed_s: A.
    ray_overhead_s: tau.
    rollout_exponent: e_R of D_R(n) = D_R(H0) * (H0 / n) ** e_R.
    train_exponent: e_T, the same for D_T.
  """

  hosts: int | None = None
  trainer_shares: tuple[float, ...] = DEFAULT_TRAINER_SHARES
  weight_load_s: float | None = None
  straggler_absorbed_s: float = 0.0
  ray_overhead_s: float = 0.0
  rollout_exponent: float = 1.0
  train_exponent: float = 1.0

  def __post_init__(self):
    if self.hosts is not None and self.hosts < 1:
      raise ValueError(f"hosts must be >= 1, got {self.hosts}.")
    if not self.trainer_shares:
      raise ValueError("trainer_shares must name at least one share.")
    for s in self.trainer_shares:
      if not 0 < s < 1:
        raise ValueError(
            f"Each trainer share must be in (0, 1), got {s}; e.g. 0.25 gives"
            " the trainer a quarter of the hosts.")
    if self.weight_load_s is not None:
      _finite_nonneg("weight_load_s", self.weight_load_s)
    _finite_nonneg("straggler_absorbed_s", self.straggler_absorbed_s)
    _finite_nonneg("ray_overhead_s", self.ray_overhead_s)
    for name in ("rollout_exponent", "train_exponent"):
      if not math.isfinite(getattr(self, name)):
        raise ValueError(f"{name} must be finite, got {getattr(self, name)}.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Placement:
  """One predicted placement.

  Attributes:
    name: "CO" or "DA t/r" (trainer/rollout hosts).
    trainer_hosts: H_t (CO: H, shared).
    rollout_hosts: H_r (CO: H, shared).
    rollout_branch_s: DA: D_R(H_r) + d_L; CO: D_R(H).
    trainer_branch_s: DA: D_T(H_t) + d_pub; CO: D_T(H) + d_pub.
    step_s: the predicted step time (lambda).
  """

  name: str
  trainer_hosts: int
  rollout_hosts: int
  rollout_branch_s: float
  trainer_branch_s: float
  step_s: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class Advice:
  """The advisor's answer.

  Attributes:
    hosts: H.
    times: the CO run's terms the prediction started from.
    config: the model inputs.
    weight_load_s: the d_L used.
    co: CO's prediction.
    da: DA's, one per feasible split (trainer share order).
    skipped: why a share gave no split.
    best: the fastest placement (CO on a tie).
  """

  hosts: int
  times: PhaseTimes
  config: AdvisorConfig
  weight_load_s: float
  co: Placement
  da: tuple[Placement, ...]
  skipped: tuple[str, ...]
  best: Placement


def load_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
  """Reads a metrics JSONL file (one step record a line)."""
  p = pathlib.Path(path)
  if not p.is_file():
    raise ValueError(f"No metrics file at {p}; pass the --metrics_out file of"
                     " a colocated run.")
  records = []
  for n, line in enumerate(p.read_text().splitlines(), start=1):
    if not line.strip():
      continue
    try:
      record = json.loads(line)
    except json.JSONDecodeError as e:
      raise ValueError(f"{p}:{n} is not JSON ({e}); the advisor reads the"
                       " step records of --metrics_out.") from e
    if not isinstance(record, dict):
      raise ValueError(f"{p}:{n} is not a JSON object (a step record).")
    records.append(record)
  if not records:
    raise ValueError(f"{p} holds no step records.")
  return records


def steady_phase_times(
    records: Sequence[Mapping[str, Any]],
    *,
    skip_steps: int = 1,
    rollout_phases: Sequence[str] = DEFAULT_ROLLOUT_PHASES,
    trainer_phases: Sequence[str] = DEFAULT_TRAINER_PHASES,
    statistic: str = "median",
) -> PhaseTimes:
  """The model's terms from a CO run's step records.

  Args:
    records: the run's step records.
    skip_steps: records with `step <= skip_steps` are not steady (compile,
      start-up).
    rollout_phases: phases that make D_R.
    trainer_phases: phases that make D_T (`publish` is d_pub on its own).
    statistic: "median" or "mean" over steady steps, per term.

  Returns:
    The terms.

  Raises:
    ValueError: a record lacks a field, the phases are not each assigned
      exactly once, the file holds more than one run, or no step is steady.
  """
  if statistic not in STATISTICS:
    raise ValueError(f"statistic must be one of {STATISTICS}, got"
                     f" {statistic!r}.")
  if skip_steps < 0:
    raise ValueError(f"skip_steps must be >= 0, got {skip_steps}.")
  both = set(rollout_phases) & set(trainer_phases)
  if both:
    raise ValueError(f"Phases {sorted(both)} are assigned to both rollout and"
                     " trainer; give each to one side.")
  if PUBLISH_PHASE in set(rollout_phases) | set(trainer_phases):
    raise ValueError(f"'{PUBLISH_PHASE}' is d_pub, a term of its own; remove"
                     " it from the rollout and trainer phases.")
  assigned = set(rollout_phases) | set(trainer_phases) | {PUBLISH_PHASE}
  seen_steps: set[int] = set()
  steady = []
  hosts = None
  for i, r in enumerate(records):
    missing = [f for f in _REQUIRED_FIELDS if f not in r]
    if missing:
      raise ValueError(
          f"Record {i + 1} lacks {missing}: not a step record of"
          " docs/metrics.md (written by --metrics_out).")
    if r.get("backend") == "mcjax_da":
      raise ValueError("These are records of a disaggregated run; the"
                       " advisor reads a colocated run's.")
    step = int(r["step"])
    if step in seen_steps:
      raise ValueError(
          f"Step {step} appears twice: the file holds more than one run (the"
          " record sink appends); write each run to a fresh --metrics_out.")
    seen_steps.add(step)
    if hosts is None:
      hosts = int(r["num_hosts"])
    elif int(r["num_hosts"]) != hosts:
      raise ValueError(f"Record {i + 1} has num_hosts {r['num_hosts']}, an"
                       f" earlier one {hosts}: one run per file.")
    phases = r["phases"]
    unknown = sorted(set(phases) - assigned)
    if unknown:
      raise ValueError(
          f"Phases {unknown} of record {i + 1} are neither rollout nor"
          " trainer phases; add them to --rollout_phases or"
          " --trainer_phases.")
    if step > skip_steps:
      steady.append(r)
  if not steady:
    raise ValueError(
        f"No steady steps: all {len(records)} records are within the first"
        f" {skip_steps} step(s) (compile, start-up). Run more steps or lower"
        " --skip_steps.")
  missing = sorted(assigned - set(steady[0]["phases"]))
  if missing:
    raise ValueError(f"Step records lack phases {missing}; remove them from"
                     " --rollout_phases/--trainer_phases or use records of"
                     " this version (docs/metrics.md).")
  stat = np.median if statistic == "median" else np.mean

  def term(fn) -> float:
    return float(stat(np.asarray([fn(r) for r in steady], dtype=np.float64)))

  return PhaseTimes(
      hosts=hosts,
      rollout_s=term(lambda r: sum(r["phases"][p] for p in rollout_phases)),
      train_s=term(lambda r: sum(r["phases"][p] for p in trainer_phases)),
      publish_s=term(lambda r: r["phases"][PUBLISH_PHASE]),
      overhead_s=term(lambda r: sum(r["host_overhead"].values())),
      measured_step_s=term(lambda r: r["step_time_s"]),
      steps=tuple(int(r["step"]) for r in steady),
      prompts_digests=tuple(r.get("prompts_digest") for r in steady),
  )


def fit_exponents(a: PhaseTimes, b: PhaseTimes) -> tuple[float, float]:
  """e_R, e_T from two CO runs of the same work at different host counts.

  Solves D(H_b) = D(H_a) * (H_a / H_b) ** e for rollout and training.

  Args:
    a: one run's terms.
    b: the other's.

  Returns:
    (rollout exponent, train exponent).

  Raises:
    ValueError: same host count, different work, or a zero time.
  """
  if a.hosts == b.hosts:
    raise ValueError(f"Both runs have {a.hosts} hosts; the exponent needs two"
                     " host counts.")
  da = [d for d in a.prompts_digests if d]
  db = [d for d in b.prompts_digests if d]
  if da and db and set(da) != set(db):
    raise ValueError(
        "The two runs did different work (their steady steps' prompt digests"
        " differ); run both with the same seed, dataset, batch size, steps"
        " and --skip_steps.")
  out = []
  for name in ("rollout_s", "train_s"):
    ta, tb = getattr(a, name), getattr(b, name)
    if ta <= 0 or tb <= 0:
      raise ValueError(f"{name} is 0 in one run; no exponent can be fitted.")
    out.append(math.log(ta / tb) / math.log(b.hosts / a.hosts))
  return out[0], out[1]


def scale(seconds: float, from_hosts: int, to_hosts: int,
          exponent: float) -> float:
  """D(to) = D(from) * (from / to) ** exponent (1: linear scaling)."""
  return seconds * (from_hosts / to_hosts) ** exponent


def predict(times: PhaseTimes, config: AdvisorConfig) -> Advice:
  """CO and DA step times at each split (module docstring: Eq. 4)."""
  h = config.hosts or times.hosts
  d_l = (times.publish_s if config.weight_load_s is None
         else config.weight_load_s)

  def d_r(n: int) -> float:
    return scale(times.rollout_s, times.hosts, n, config.rollout_exponent)

  def d_t(n: int) -> float:
    return scale(times.train_s, times.hosts, n, config.train_exponent)

  o = times.overhead_s
  co = Placement(
      name="CO", trainer_hosts=h, rollout_hosts=h,
      rollout_branch_s=d_r(h), trainer_branch_s=d_t(h) + times.publish_s,
      step_s=d_r(h) + d_t(h) + times.publish_s + o)
  da, skipped = [], []
  for share in config.trainer_shares:
    ht = share * h
    if abs(ht - round(ht)) > 1e-9 or round(ht) < 1 or h - round(ht) < 1:
      skipped.append(f"trainer share {share:g} of {h} hosts gives"
                     f" {ht:g} trainer hosts (needs a whole number, >= 1 on"
                     " each side)")
      continue
    ht = int(round(ht))
    hr = h - ht
    rb = d_r(hr) + d_l
    tb = d_t(ht) + times.publish_s
    da.append(Placement(
        name=f"DA {ht}/{hr}", trainer_hosts=ht, rollout_hosts=hr,
        rollout_branch_s=rb, trainer_branch_s=tb,
        step_s=max(rb, tb) + o - config.straggler_absorbed_s
        + config.ray_overhead_s))
  best = min([co, *da], key=lambda p: p.step_s)  # min keeps CO on a tie.
  return Advice(hosts=h, times=times, config=config, weight_load_s=d_l,
                co=co, da=tuple(da), skipped=tuple(skipped), best=best)


def recommendation(advice: Advice) -> str:
  """One sentence: the predicted fastest placement and by how much."""
  co = advice.co
  if advice.best is co:
    if not advice.da:
      return (f"CO: no DA split is possible on {advice.hosts} host(s);"
              f" predicted step {co.step_s:.3f} s.")
    runner = min(advice.da, key=lambda p: p.step_s)
    return (f"CO: no DA split beats it; predicted step {co.step_s:.3f} s,"
            f" best DA split ({runner.name}) {runner.step_s:.3f} s"
            f" ({runner.step_s / co.step_s - 1:+.1%}).")
  b = advice.best
  return (f"DA with {b.trainer_hosts} trainer / {b.rollout_hosts} rollout"
          f" hosts: predicted step {b.step_s:.3f} s vs CO {co.step_s:.3f} s"
          f" ({1 - b.step_s / co.step_s:.1%} shorter).")


def format_report(advice: Advice, scaling_note: str | None = None) -> str:
  """The table, the assumptions and the recommendation, as text.

  Args:
    advice: the prediction.
    scaling_note: where the exponents came from (None: "linear, assumed"
      when both are 1).

  Returns:
    The report.
  """
  t, c = advice.times, advice.config
  if scaling_note is None and (c.rollout_exponent, c.train_exponent) == (
      1.0, 1.0):
    scaling_note = "linear, assumed"
  lines = [
      f"CO run: {t.hosts} host(s), {len(t.steps)} steady steps"
      f" ({t.steps[0]}..{t.steps[-1]});"
      f" D_R={t.rollout_s:.4f} s D_T={t.train_s:.4f} s"
      f" d_pub={t.publish_s:.4f} s o={t.overhead_s:.4f} s;"
      f" measured step {t.measured_step_s:.4f} s",
      f"Model inputs: H={advice.hosts}, d_L={advice.weight_load_s:.4f} s"
      f"{' (assumed = d_pub)' if c.weight_load_s is None else ''},"
      f" A={c.straggler_absorbed_s:.4f} s, tau={c.ray_overhead_s:.4f} s",
      f"Scaling: D(n) = D({t.hosts}) * ({t.hosts}/n)^e, e_R="
      f"{c.rollout_exponent:.3g}, e_T={c.train_exponent:.3g}"
      f"{f' ({scaling_note})' if scaling_note else ''};"
      " d_pub, d_L, o, A, tau fixed",
      "",
      f"{'placement':<10} {'H_t':>4} {'H_r':>4} {'rollout br. s':>14}"
      f" {'trainer br. s':>14} {'step s':>9} {'vs CO':>8}",
  ]
  for p in (advice.co, *advice.da):
    lines.append(
        f"{p.name:<10} {p.trainer_hosts:>4} {p.rollout_hosts:>4}"
        f" {p.rollout_branch_s:>14.4f} {p.trainer_branch_s:>14.4f}"
        f" {p.step_s:>9.4f} {p.step_s / advice.co.step_s:>7.3f}x")
  lines += [f"skipped: {s}" for s in advice.skipped]
  lines += ["", "Recommendation: " + recommendation(advice)]
  return "\n".join(lines)
