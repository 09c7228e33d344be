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

The model and its assumptions: `advice` (LoCoJAX, Appendix C, Eq. 4); the
command line: `python -m tunix_mcjax.advisor` (docs/advisor.md). JAX-free:
it reads the record schema (`telemetry.records`) only.
"""

from tunix_mcjax.advisor.advice import Advice
from tunix_mcjax.advisor.advice import AdvisorConfig
from tunix_mcjax.advisor.advice import DEFAULT_ROLLOUT_PHASES
from tunix_mcjax.advisor.advice import DEFAULT_TRAINER_PHASES
from tunix_mcjax.advisor.advice import DEFAULT_TRAINER_SHARES
from tunix_mcjax.advisor.advice import fit_exponents
from tunix_mcjax.advisor.advice import format_report
from tunix_mcjax.advisor.advice import load_records
from tunix_mcjax.advisor.advice import PhaseTimes
from tunix_mcjax.advisor.advice import Placement
from tunix_mcjax.advisor.advice import predict
from tunix_mcjax.advisor.advice import PUBLISH_PHASE
from tunix_mcjax.advisor.advice import RECORD_PHASES
from tunix_mcjax.advisor.advice import recommendation
from tunix_mcjax.advisor.advice import scale
from tunix_mcjax.advisor.advice import STATISTICS
from tunix_mcjax.advisor.advice import steady_phase_times

__all__ = [
    "Advice",
    "AdvisorConfig",
    "DEFAULT_ROLLOUT_PHASES",
    "DEFAULT_TRAINER_PHASES",
    "DEFAULT_TRAINER_SHARES",
    "PUBLISH_PHASE",
    "PhaseTimes",
    "Placement",
    "RECORD_PHASES",
    "STATISTICS",
    "fit_exponents",
    "format_report",
    "load_records",
    "predict",
    "recommendation",
    "scale",
    "steady_phase_times",
]
