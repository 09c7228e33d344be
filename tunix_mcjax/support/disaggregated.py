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
any host or Ray process starts (`recipes.job_config.check_job`) so that a
refused setting costs one line and exit status 2.
"""

from __future__ import annotations

from tunix_mcjax.support.problem import Problem

# Engines the rollout hosts can run ('vllm' where vLLM is installed:
# .venv-maxtext-vllm; the experimental 'vllm_tpu' has not run there).
ROLLOUT_ENGINES = ("native", "vanilla", "vllm")


def disaggregated_job(
    *,
    trainer: str,
    engine: str,
    batch_size: int,
    mini_batch_size: int | None,
    micro_batch_size: int | None,
    num_iterations: int,
    checkpoint_dir: str | None = None,
    max_seq_token_per_tpu: int | None,
    trainer_hosts: int,
) -> list[Problem]:
  """Every setting the disaggregated schedule does not support yet.

  `checkpoint_dir` and `micro_batch_size` take any value the colocated
  backend takes (no rule left; kept so callers need not change):
  checkpoint and resume, and gradient accumulation over micro-batches, work
  under mcjax_da.
  """
  problems = []
  # MaxText trainers too: they map their parameters into the engines' Tunix
  # layout before publishing (as under mcjax), so rollout hosts run the
  # same engines for both; `support.engines` says which engines in which
  # environment.
  del trainer
  if engine not in ROLLOUT_ENGINES:
    problems.append(Problem(message=(
        f"--backend=mcjax_da rollout hosts run {list(ROLLOUT_ENGINES)} for"
        f" now; got --engine={engine}.")))
  # Micro-batches (gradient accumulation) keep one update per batch: every
  # micro-batch of a batch is sampled with one policy version.
  del micro_batch_size
  if mini_batch_size not in (None, batch_size):
    problems.append(Problem(message=(
        "--backend=mcjax_da makes one optimizer update per batch for now"
        " (each batch's policy version is checked against one update):"
        f" set --mini_batch_size={batch_size} (or leave it unset);"
        " --micro_batch_size below it accumulates gradients.")))
  if num_iterations != 1:
    problems.append(Problem(message=(
        f"--backend=mcjax_da needs --num_iterations=1 for now, got"
        f" {num_iterations}.")))
  # Checkpoints are the trainer hosts' (as under mcjax); a resumed run
  # publishes the restored policy as the checkpoint's version. With K >= 1
  # its first batch is sampled with that policy (staleness 0): the older
  # policies are not saved (docs/disaggregated.md).
  del checkpoint_dir
  if max_seq_token_per_tpu is not None:
    problems.append(Problem(message=(
        "--backend=mcjax_da does not pack sequences yet: drop"
        " --max_seq_token_per_tpu.")))
  if batch_size % trainer_hosts:
    problems.append(Problem(message=(
        f"--batch_size={batch_size} does not divide over"
        f" --trainer_hosts={trainer_hosts}.")))
  return problems
