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

"""Placement advisor: Eq. 4 arithmetic against hand-computed values."""

import dataclasses
import json
import os
import pathlib
import subprocess
import sys

import pytest

from tunix_mcjax import advisor
from tunix_mcjax import telemetry
from tunix_mcjax.advisor import advice as advice_lib

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
# Prints the modules of the packages named that importing the modules named
# loaded, and fails if there are any.
_LIGHT_IMPORTS = REPO_ROOT / "tests" / "support" / "light_imports.py"


def _record(step, *, generate, train, publish, hosts=2, digest=None,
            admission=0.1, logps=0.2, reward=0.1, learner_host=0.2,
            metrics_export=0.06, gc=0.04):
  phases = dict(admission=admission, generate=generate, logps=logps,
                reward=reward, learner_host=learner_host, train=train,
                publish=publish)
  overhead = dict(metrics_export=metrics_export, gc=gc)
  return {
      "step": step, "backend": "mcjax", "num_hosts": hosts,
      "step_time_s": sum(phases.values()) + sum(overhead.values()),
      "phases": phases, "host_overhead": overhead,
      "prompts_digest": digest or f"d{step}",
  }


# Steady steps 2-4: D_R = admission+generate+reward+learner_host = 2.4, 2.6,
# 2.5 (median 2.5); D_T = logps+train = 1.2, 1.1, 1.3 (median 1.2);
# d_pub = 0.3, 0.2, 0.4 (median 0.3); o = 0.1. Step 1 (compile) is huge.
RECORDS = [
    _record(1, generate=50.0, train=30.0, publish=9.0),
    _record(2, generate=2.0, train=1.0, publish=0.3),
    _record(3, generate=2.2, train=0.9, publish=0.2),
    _record(4, generate=2.1, train=1.1, publish=0.4),
]


def _write(tmp_path, records, name="metrics.jsonl"):
  path = tmp_path / name
  path.write_text("".join(json.dumps(r) + "\n" for r in records))
  return path


@pytest.fixture(name="times")
def _times():
  return advisor.steady_phase_times(RECORDS)


def test_steady_medians(times):
  assert times.hosts == 2
  assert times.steps == (2, 3, 4)
  assert times.rollout_s == pytest.approx(2.5)
  assert times.train_s == pytest.approx(1.2)
  assert times.publish_s == pytest.approx(0.3)
  assert times.overhead_s == pytest.approx(0.1)
  means = advisor.steady_phase_times(RECORDS, statistic="mean")
  assert means.publish_s == pytest.approx(0.3)
  assert means.train_s == pytest.approx((1.2 + 1.1 + 1.3) / 3)
  with_compile = advisor.steady_phase_times(RECORDS, skip_steps=0)
  assert with_compile.steps == (1, 2, 3, 4)


def test_eq4_at_the_runs_host_count(times):
  advice = advisor.predict(times, advisor.AdvisorConfig())
  # CO = 2.5 + 1.2 + 0.3 + 0.1.
  assert advice.co.step_s == pytest.approx(4.1)
  # Only the 1/2 share gives whole hosts on 2 hosts: DA 1/1,
  # max(2.5*2 + 0.3, 1.2*2 + 0.3) + 0.1 = 5.4.
  assert [p.name for p in advice.da] == ["DA 1/1"]
  assert advice.da[0].rollout_branch_s == pytest.approx(5.3)
  assert advice.da[0].trainer_branch_s == pytest.approx(2.7)
  assert advice.da[0].step_s == pytest.approx(5.4)
  assert len(advice.skipped) == 2
  assert advice.best is advice.co
  assert advisor.recommendation(advice).startswith("CO: no DA split beats")


def test_eq4_at_8_hosts_linear_scaling(times):
  advice = advisor.predict(times, advisor.AdvisorConfig(hosts=8))
  # CO: 2.5/4 + 1.2/4 + 0.3 + 0.1.
  assert advice.co.step_s == pytest.approx(1.325)
  steps = {p.name: p.step_s for p in advice.da}
  assert steps == pytest.approx({
      "DA 4/4": max(2.5 / 2 + 0.3, 1.2 / 2 + 0.3) + 0.1,  # 1.65
      "DA 2/6": max(2.5 * 2 / 6 + 0.3, 1.2 + 0.3) + 0.1,  # 1.6
      "DA 1/7": max(2.5 * 2 / 7 + 0.3, 1.2 * 2 + 0.3) + 0.1,  # 2.8
  })
  assert advice.best.name == "CO"


def test_a_tau_and_weight_load_can_make_da_win(times):
  config = advisor.AdvisorConfig(hosts=8, weight_load_s=0.2,
                                 straggler_absorbed_s=0.5, ray_overhead_s=0.1)
  advice = advisor.predict(times, config)
  steps = {p.name: p.step_s for p in advice.da}
  # DA 4/4: max(1.25 + 0.2, 0.6 + 0.3) + 0.1 - 0.5 + 0.1 = 1.15.
  assert steps["DA 4/4"] == pytest.approx(1.15)
  # DA 2/6: max(0.8333 + 0.2, 1.2 + 0.3) + 0.1 - 0.5 + 0.1 = 1.2.
  assert steps["DA 2/6"] == pytest.approx(1.2)
  assert advice.best.name == "DA 4/4"
  text = advisor.recommendation(advice)
  assert "DA with 4 trainer / 4 rollout hosts" in text
  assert f"{1 - 1.15 / 1.325:.1%}" in text  # 13.2% shorter


def test_scaling_assumption_and_fitted_exponents():
  assert advisor.scale(1.0, 2, 8, 1.0) == pytest.approx(0.25)
  assert advisor.scale(1.0, 2, 8, 0.5) == pytest.approx(0.5)
  assert advisor.scale(1.0, 2, 8, 0.0) == pytest.approx(1.0)
  # Run a: 2 hosts, D_R = 4, D_T = 2. Run b: 8 hosts, D_R = 1 (linear),
  # D_T = 1 (e = 0.5), same work (digests).
  a = advisor.steady_phase_times([
      _record(1, generate=9, train=9, publish=1),
      _record(2, generate=3.6, train=1.8, publish=0.3, digest="x")])
  b = advisor.steady_phase_times([
      _record(1, generate=9, train=9, publish=1, hosts=8),
      _record(2, generate=0.6, train=0.8, publish=0.3, hosts=8,
              digest="x")])
  e_r, e_t = advisor.fit_exponents(a, b)
  assert (e_r, e_t) == pytest.approx((1.0, 0.5))
  # With the fitted exponents, CO predicted from run a at 8 hosts is run
  # b's measured CO step.
  config = advisor.AdvisorConfig(hosts=8, rollout_exponent=e_r,
                                 train_exponent=e_t)
  assert advisor.predict(a, config).co.step_s == pytest.approx(
      b.rollout_s + b.train_s + b.publish_s + b.overhead_s)
  other_work = dataclasses.replace(b, prompts_digests=("y",))
  with pytest.raises(ValueError, match="different work"):
    advisor.fit_exponents(a, other_work)
  with pytest.raises(ValueError, match="two host counts"):
    advisor.fit_exponents(a, a)


def test_schema_matches_telemetry():
  assert advisor.RECORD_PHASES == telemetry.PHASES
  fields = {f.name for f in dataclasses.fields(telemetry.StepRecord)}
  assert set(advice_lib._REQUIRED_FIELDS) <= fields
  assert (set(advisor.DEFAULT_ROLLOUT_PHASES)
          | set(advisor.DEFAULT_TRAINER_PHASES)
          | {advisor.PUBLISH_PHASE}) == set(telemetry.PHASES)


@pytest.mark.parametrize("records, message", [
    (RECORDS[:1], "No steady steps"),
    (RECORDS + RECORDS[1:2], "Step 2 appears twice"),
    ([{k: v for k, v in RECORDS[1].items() if k != "phases"}],
     r"lacks \['phases'\]"),
    ([RECORDS[0], {**RECORDS[1], "num_hosts": 4}], "num_hosts 4"),
    ([{**RECORDS[1], "phases": {**RECORDS[1]["phases"], "new": 1.0}}],
     r"Phases \['new'\]"),
    ([{**RECORDS[1], "phases": {"generate": 1.0}}],
     r"lack phases \['admission'"),
])
def test_bad_records(records, message):
  with pytest.raises(ValueError, match=message):
    advisor.steady_phase_times(records)


def test_bad_config_and_files(tmp_path):
  with pytest.raises(ValueError, match="trainer share"):
    advisor.AdvisorConfig(trainer_shares=(1.0,))
  with pytest.raises(ValueError, match="straggler_absorbed_s"):
    advisor.AdvisorConfig(straggler_absorbed_s=-1.0)
  with pytest.raises(ValueError, match="both rollout and trainer"):
    advisor.steady_phase_times(RECORDS, trainer_phases=("train", "generate"))
  with pytest.raises(ValueError, match="No metrics file"):
    advisor.load_records(tmp_path / "missing.jsonl")
  bad = tmp_path / "bad.jsonl"
  bad.write_text('{"step": 1}\nnot json\n')
  with pytest.raises(ValueError, match=r"bad.jsonl:2 is not JSON"):
    advisor.load_records(bad)


def test_the_advisor_imports_without_jax():
  # It reads only the record schema, which the telemetry package imports
  # without JAX (its JAX-using names load on first use).
  env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
  out = subprocess.run(
      [sys.executable, str(_LIGHT_IMPORTS), "jax", "tunix_mcjax.advisor"],
      capture_output=True, text=True, env=env, timeout=120, check=True)
  assert out.stdout.strip() == "[]"


def _cli(*args):
  env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
  return subprocess.run(
      [sys.executable, "-m", "tunix_mcjax.advisor", *map(str, args)],
      capture_output=True, text=True, env=env, timeout=120, check=False)


def test_cli_prints_table_and_recommendation(tmp_path):
  path = _write(tmp_path, RECORDS)
  out = _cli(path, "--hosts=8", "--weight_load_s=0.2",
             "--straggler_absorbed_s=0.5", "--ray_overhead_s=0.1")
  assert out.returncode == 0, out.stderr
  assert "DA 2/6" in out.stdout and "DA 1/7" in out.stdout
  assert ("Recommendation: DA with 4 trainer / 4 rollout hosts: predicted"
          " step 1.150 s vs CO 1.325 s") in out.stdout
  assert "linear, assumed" in out.stdout
  plain = _cli(path)
  assert plain.returncode == 0, plain.stderr
  assert "Recommendation: CO: no DA split beats it" in plain.stdout
  # The same work on 4 hosts, D_R and D_T halved: fitted exponents are 1.
  four = _write(tmp_path, [
      {**_record(r["step"], generate=0, train=0, publish=0.3, hosts=4,
                 admission=0, logps=0, reward=0, learner_host=0),
       "phases": {k: (v / 2 if k != "publish" else v)
                  for k, v in r["phases"].items()}}
      for r in RECORDS], "four.jsonl")
  fitted = _cli(path, f"--second_metrics={four}", "--hosts=8")
  assert fitted.returncode == 0, fitted.stderr
  assert "e_R=1, e_T=1 (measured from runs at 2 and 4 hosts)" in fitted.stdout
  empty = _cli(_write(tmp_path, RECORDS[:1], "compile_only.jsonl"))
  assert empty.returncode == 1
  assert "No steady steps" in empty.stderr
