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

r"""Placement advisor command line (docs/advisor.md).

  python -m tunix_mcjax.advisor runs/co/metrics.jsonl --hosts=16
  python -m tunix_mcjax.advisor runs/co2/metrics.jsonl \
      --second_metrics=runs/co4/metrics.jsonl     # measured scaling exponents

Prints the predicted step time of CO and of each DA split and a
recommendation. Exit status 1 with a message on bad input.
"""

from collections.abc import Sequence
import sys

from absl import app
from absl import flags

from tunix_mcjax import advisor

_HOSTS = flags.DEFINE_integer(
    "hosts", None, "Hosts to place (default: the run's own host count).")
_SKIP_STEPS = flags.DEFINE_integer(
    "skip_steps", 1,
    "Steps 1..N are not steady (compile, start-up) and are left out. With"
    " --passes=2 use --skip_steps=<steps> to keep the second pass only.")
_STATISTIC = flags.DEFINE_enum(
    "statistic", "median", list(advisor.STATISTICS),
    "Per-term statistic over steady steps (the paper adds means).")
_SECOND_METRICS = flags.DEFINE_string(
    "second_metrics", None,
    "A second CO run of the same work at another host count: fit the"
    " scaling exponents e_R, e_T from the two runs instead of assuming 1.")
_ROLLOUT_EXPONENT = flags.DEFINE_float(
    "rollout_exponent", 1.0,
    "e_R in D_R(n) = D_R(H0) * (H0/n)^e_R (1: linear scaling).")
_TRAIN_EXPONENT = flags.DEFINE_float(
    "train_exponent", 1.0, "e_T, the same for D_T.")
_WEIGHT_LOAD_S = flags.DEFINE_float(
    "weight_load_s", None,
    "d_L, a rollout host's weight load in DA (s); default: the measured"
    " d_pub.")
_STRAGGLER_ABSORBED_S = flags.DEFINE_float(
    "straggler_absorbed_s", 0.0,
    "A, the straggler wait one-step staleness absorbs in DA (s).")
_RAY_OVERHEAD_S = flags.DEFINE_float(
    "ray_overhead_s", 0.0,
    "tau, DA's residual Ray overhead incl. the batch transfer (s).")
_TRAINER_SHARES = flags.DEFINE_list(
    "trainer_shares", ["0.5", "0.25", "0.125"],
    "Trainer shares of the hosts to try (the paper's splits).")
_ROLLOUT_PHASES = flags.DEFINE_list(
    "rollout_phases", list(advisor.DEFAULT_ROLLOUT_PHASES),
    "Record phases that make D_R.")
_TRAINER_PHASES = flags.DEFINE_list(
    "trainer_phases", list(advisor.DEFAULT_TRAINER_PHASES),
    "Record phases that make D_T ('publish' is d_pub).")


def _times(path: str) -> advisor.PhaseTimes:
  return advisor.steady_phase_times(
      advisor.load_records(path), skip_steps=_SKIP_STEPS.value,
      rollout_phases=_ROLLOUT_PHASES.value,
      trainer_phases=_TRAINER_PHASES.value, statistic=_STATISTIC.value)


def main(argv: Sequence[str]) -> None:
  if len(argv) != 2:
    raise app.UsageError(
        "Pass exactly one metrics file: python -m tunix_mcjax.advisor"
        " METRICS.jsonl [--hosts N].")
  try:
    times = _times(argv[1])
    e_r, e_t = _ROLLOUT_EXPONENT.value, _TRAIN_EXPONENT.value
    note = None
    if _SECOND_METRICS.value:
      if _ROLLOUT_EXPONENT.present or _TRAIN_EXPONENT.present:
        raise ValueError("--second_metrics fits the exponents; drop"
                         " --rollout_exponent/--train_exponent.")
      second = _times(_SECOND_METRICS.value)
      e_r, e_t = advisor.fit_exponents(times, second)
      note = (f"measured from runs at {times.hosts} and {second.hosts}"
              " hosts")
    try:
      shares = tuple(float(s) for s in _TRAINER_SHARES.value)
    except ValueError as e:
      raise ValueError(f"--trainer_shares must be numbers: {e}") from e
    config = advisor.AdvisorConfig(
        hosts=_HOSTS.value, trainer_shares=shares,
        weight_load_s=_WEIGHT_LOAD_S.value,
        straggler_absorbed_s=_STRAGGLER_ABSORBED_S.value,
        ray_overhead_s=_RAY_OVERHEAD_S.value,
        rollout_exponent=e_r, train_exponent=e_t)
    print(advisor.format_report(advisor.predict(times, config), note),
          flush=True)
  except ValueError as e:
    print(f"advisor: {e}", file=sys.stderr, flush=True)
    sys.exit(1)


if __name__ == "__main__":
  app.run(main)
