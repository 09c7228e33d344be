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

"""Learner and role rules: the training mode and learner, the roles mcjax
runs (colocated on the actor's mesh, no CPU offload), and the loss sequence
packing keeps."""

from __future__ import annotations

from tunix_mcjax.rules.agentic import TRAINING_MODES
from tunix_mcjax.rules.problem import Problem

# Learners mcjax runs (Tunix's GRPO family, and its agentic GRPO learner);
# PPO needs a critic model.
LEARNERS = ("grpo", "dapo", "drgrpo", "agentic_grpo")

# Roles whose models mcjax does not run (GRPO needs none of them).
UNSUPPORTED_ROLES = ("critic", "reward")


def training_mode(mode: str) -> Problem | None:
  """Tunix's standard and agentic GRPO modes; the agentic one's limits are
  `rules.agentic.agentic_job`'s."""
  if mode in TRAINING_MODES:
    return None
  return Problem(
      message=f"training_mode={mode!r}: mcjax's CLI runs"
      f" training_mode={' or '.join(TRAINING_MODES)}.",
      error=NotImplementedError,
  )


def learner(name: str) -> Problem | None:
  """mcjax runs Tunix's GRPO-family learners; PPO needs a critic."""
  if name in LEARNERS:
    return None
  if name == "ppo":
    return unsupported_role("learner='ppo' (a critic model)")
  return Problem(
      message=f"learner={name!r}: mcjax runs one of {list(LEARNERS)}.",
  )


def unsupported_role(name: str) -> Problem:
  """`name` (a role, or its config key) is set but mcjax cannot run it."""
  return Problem(
      message=f"{name} is set: mcjax supports GRPO's actor, reference and"
      " rollout roles only (critic and reward models are not supported yet);"
      " remove it.",
      error=NotImplementedError,
  )


def disjoint_role(role: str, *, cause: str, fix: str) -> Problem:
  """`role` runs on devices other than the actor's mesh (disaggregated)."""
  return Problem(
      message=f"{cause}; mcjax is colocated: every role shares the actor's"
      " global mesh (every host generates on its own devices; disjoint"
      f" trainer/rollout meshes are the disaggregated mode). {fix}",
  )


def offload_to_cpu(offload: bool) -> Problem | None:
  if not offload:
    return None
  return Problem(
      message="offload_to_cpu is not supported by mcjax; set it to false.",
  )


# The one loss_agg_mode whose loss packing leaves unchanged
# (`tunix_mcjax.packing`): a sum over the micro-batch's completion tokens
# divided by their count, whatever rows they are packed into. The sequence-*
# modes reduce per row, and a packed row holds several sequences.
PACKING_LOSS_MODE = "token-mean"


def sequence_packing(
    max_seq_token_per_tpu: int | None,
    *,
    loss_agg_mode: str | None = None,
    num_iterations: int = 1,
    prefix: str = "",
) -> Problem | None:
  """Packing (`tunix_mcjax.packing`) only where it gives the unpacked loss.

  Args:
    max_seq_token_per_tpu: Tunix's packing budget (None: no packing).
    loss_agg_mode: the learner's; None when not known yet (the cluster
      checks the learner's own before the first packed micro-batch).
    num_iterations: the learner's (GRPO's mu); packing with several
      iterations per batch is not verified against unpacked.
    prefix: config path of the knob in messages.
  """
  if max_seq_token_per_tpu is None:
    return None
  if max_seq_token_per_tpu < 1:
    return Problem(
        message=f"{prefix}max_seq_token_per_tpu={max_seq_token_per_tpu}"
        " must be a positive number of tokens per packed row (at least the"
        " longest prompt plus max_tokens_to_generate), or unset.",
    )
  if loss_agg_mode is not None and loss_agg_mode != PACKING_LOSS_MODE:
    return Problem(
        message=f"{prefix}max_seq_token_per_tpu (sequence packing) with"
        f" loss_agg_mode={loss_agg_mode!r}: a packed row holds several"
        " sequences, so a per-row (sequence-*) reduction no longer averages"
        " over sequences and the loss differs from the unpacked run's."
        f" Use loss_agg_mode={PACKING_LOSS_MODE!r} (DAPO's default) or unset"
        " max_seq_token_per_tpu.",
        error=NotImplementedError,
    )
  if num_iterations != 1:
    return Problem(
        message=f"{prefix}max_seq_token_per_tpu (sequence packing) with"
        f" num_iterations={num_iterations}: mcjax has verified packing"
        " against the unpacked run only for num_iterations=1. Use 1 or"
        " unset max_seq_token_per_tpu.",
        error=NotImplementedError,
    )
  return None
