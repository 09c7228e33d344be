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

"""What the disaggregated backend ("mcjax_da") can run today.

One function per rule, each returning a `Problem` (or None), called before
any host or Ray process starts (`recipes.job_checks.check_job`) so that a
refused setting costs one line and exit status 2.
"""

from __future__ import annotations

from tunix_mcjax.rules.problem import Problem

# Engines the rollout hosts can run ('vllm' where vLLM is installed:
# .venv-maxtext-vllm; the experimental 'vllm_tpu' has not run there).
ROLLOUT_ENGINES = ("native", "vanilla", "vllm")


def disaggregated_job(
    *,
    engine: str,
    batch_size: int,
    num_iterations: int,
    max_seq_token_per_tpu: int | None,
    trainer_hosts: int,
) -> list[Problem]:
  """Every setting the disaggregated schedule does not support yet.

  Whatever the colocated backend accepts and is not named here works under
  mcjax_da too: Tunix and MaxText trainers (MaxText maps its parameters into
  the engines' Tunix layout before publishing, as under mcjax), checkpoint
  and resume, gradient accumulation over micro-batches, several optimizer
  updates per batch (mini-batches: the batch's rows all come from the
  policy published before it, as under the colocated backends; weights are
  published once per batch).
  """
  problems = []
  if engine not in ROLLOUT_ENGINES:
    problems.append(Problem(message=(
        f"--backend=mcjax_da rollout hosts run {list(ROLLOUT_ENGINES)} for"
        f" now; got --engine={engine}.")))
  if num_iterations != 1:
    problems.append(Problem(message=(
        f"--backend=mcjax_da needs --num_iterations=1 for now, got"
        f" {num_iterations}.")))
  if max_seq_token_per_tpu is not None:
    problems.append(Problem(message=(
        "--backend=mcjax_da does not pack sequences yet: drop"
        " --max_seq_token_per_tpu.")))
  if batch_size % trainer_hosts:
    problems.append(Problem(message=(
        f"--batch_size={batch_size} does not divide over"
        f" --trainer_hosts={trainer_hosts}.")))
  return problems
