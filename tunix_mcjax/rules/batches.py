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

"""Batch rules: global batch knobs split over the hosts, the mesh axes a batch
is split over, O3's (balance_admission) dealing, and checkpoint intervals that
end on a global step; and each host's share of the batch knobs.
"""

from __future__ import annotations

from collections.abc import Sequence
import copy
from typing import Any

from tunix_mcjax.rules.problem import Problem
from tunix_mcjax.rules.problem import raise_first

# Batch knobs of Tunix's RLTrainingConfig that count the whole job's rows
# (as in a single-controller recipe); each host's learner gets 1/H of each.
GLOBAL_BATCH_KNOBS = (
    "mini_batch_size",
    "train_micro_batch_size",
    "rollout_micro_batch_size",
    "compute_logps_micro_batch_size",
)

# Loss aggregation modes of Tunix (`tunix.rl.common.aggregate_loss`) whose
# gradient, accumulated as the mean over equal-sized micro-batches, does not
# depend on which rows share a micro-batch: each normalises per row (by the
# row's own token count, a constant, or the micro-batch's row count, equal in
# every micro-batch). Exact as long as every row has a completion token
# (rows count by `completion_mask`; a generated EOS counts). 'token-mean'
# divides by the micro-batch's token count, which changes when rows move.
ROW_NORMALISED_LOSS_MODES = (
    "sequence-mean-token-mean",
    "sequence-mean-token-scale",
    "seq-mean-token-sum",
    "sequence-mean-token-sum-norm",
)


def balanced_micro_batches(
    *,
    balance_by_length: bool,
    loss_agg_mode: str,
    micro_batch_size: int | None,
    mini_batch_size: int | None,
    prefix: str = "",
) -> Problem | None:
  """O3 with gradient accumulation keeps the update only for row-normalised
  losses.

  With balance_admission (O3) each global micro-batch holds other rows than
  the single controller's (the host shares are dealt by length, not in
  micro-batch chunks). The optimizer step averages the micro-batches'
  gradients, so the update is unchanged exactly when the loss normalises per
  row (`ROW_NORMALISED_LOSS_MODES`); 'token-mean' divides by each
  micro-batch's token count, which moving rows changes.
  """
  if not balance_by_length or loss_agg_mode in ROW_NORMALISED_LOSS_MODES:
    return None
  if micro_batch_size is None or mini_batch_size is None or (
      micro_batch_size >= mini_batch_size):
    return None
  return Problem(
      message=f"{prefix}loss_agg_mode={loss_agg_mode!r} with"
      f" balance_admission (O3) and train_micro_batch_size={micro_batch_size}"
      f" < mini_batch_size={mini_batch_size}: O3 moves rows between"
      " micro-batches, which changes a per-micro-batch token-mean (not the"
      " single-controller update). Turn balance_admission off, use one"
      " micro-batch per update, or a row-normalised loss_agg_mode (one of"
      f" {list(ROW_NORMALISED_LOSS_MODES)}).",
  )


def balanced_updates(
    *,
    balance_by_length: bool,
    mini_batch_size: int | None,
    batch_size: int | None,
    prefix: str = "",
) -> Problem | None:
  """O3 keeps the single controller's updates only with one per batch.

  Balanced dealing spreads the batch's prompts over the hosts by length,
  so with several optimizer updates per batch (mini_batch_size <
  batch_size) each update would hold other prompts than the single
  controller's, whatever the loss. Admission refuses it on every host
  (`admission.AdmissionConfig.host_prompt_indices`); this is the same rule
  for the checks that run before any host starts.
  """
  if not balance_by_length or mini_batch_size is None or batch_size is None:
    return None
  if mini_batch_size >= batch_size:
    return None
  return Problem(
      message=f"balance_admission (O3) with {prefix}mini_batch_size="
      f"{mini_batch_size} < batch_size={batch_size}: O3 deals each batch's"
      " prompts by length, so every optimizer update but one per batch would"
      " hold other prompts than the single controller's. Turn"
      " balance_admission off, or set mini_batch_size = batch_size.",
  )


def batch_axes(data_sharding_axis: Sequence[Any]) -> tuple[str, ...]:
  """The mesh axes the batch (leading) dimension is split over.

  Accepts mcjax's flat form ("data", "fsdp") and Tunix's per-dimension form
  (("data", "fsdp"),), which Tunix's shard_input reads as
  PartitionSpec(("data", "fsdp")): the one way to split the batch over two
  axes that the stock backend honours too.
  """
  axes = tuple(data_sharding_axis)
  if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
    return tuple(axes[0])
  return axes


def data_sharding_axes(
    axes: Sequence[Any], mesh_axes: Sequence[str], *, prefix: str = ""
) -> Problem | None:
  missing = [a for a in batch_axes(axes) if a not in mesh_axes]
  if not missing:
    return None
  return Problem(
      message=f"{prefix}data_sharding_axis={list(axes)} names axes"
      f" {missing} missing from the actor mesh's axis names"
      f" {list(mesh_axes)}.",
  )


def global_batch(
    name: str, value: int | None, num_hosts: int
) -> Problem | None:
  """A global batch knob must split evenly over the hosts."""
  if value is None or value % num_hosts == 0:
    return None
  return Problem(
      message=f"{name}={value} is global and must divide over {num_hosts}"
      f" hosts; use a multiple of {num_hosts}.",
  )


def checkpoint_interval(
    save_interval_steps: int | None,
    *,
    batch_size: int | None,
    mini_batch_size: int | None,
    num_iterations: int | None = 1,
    prefix: str = "",
) -> Problem | None:
  """A save interval (in optimizer updates) must end on a global step.

  Tunix counts `save_interval_steps` in optimizer updates: (batch_size /
  mini_batch_size) x num_iterations per global step. A checkpoint written
  inside a global step cannot be resumed exactly (its batch is half
  trained), and its resume would stop with an error; refused up front.
  """
  if not save_interval_steps or not batch_size:
    return None
  mini = mini_batch_size or batch_size
  if mini <= 0 or batch_size % mini:
    return None  # Reported by Tunix's own batch checks.
  updates = (batch_size // mini) * (num_iterations or 1)
  if save_interval_steps % updates == 0:
    return None
  return Problem(
      message=f"{prefix}checkpointing_options.save_interval_steps="
      f"{save_interval_steps} counts optimizer updates, and each global step"
      f" is {updates} (batch_size/mini_batch_size x num_iterations): a"
      " checkpoint inside a global step cannot be resumed exactly. Use a"
      f" multiple of {updates} ({updates} x the global steps between"
      " checkpoints).",
  )


def per_host_training_config(tc: Any, num_hosts: int) -> Any:
  """A copy of Tunix's RLTrainingConfig with this host's batch knobs.

  Args:
    tc: The job's RLTrainingConfig (global batch knobs).
    num_hosts: Hosts in the job.

  Returns:
    The copy; each knob of GLOBAL_BATCH_KNOBS divided by `num_hosts`, and
    data_sharding_axis in Tunix's per-dimension form ((axes...),) so that
    Tunix's own shard_input splits the batch as `batch_axes` does (e.g.
    ("data", "fsdp") of an hsdp mesh, which it would otherwise read as
    batch over "data" and sequence over "fsdp").

  Raises:
    ValueError: A knob does not divide over the hosts.
  """
  local = copy.copy(tc)
  for name in GLOBAL_BATCH_KNOBS:
    value = getattr(tc, name)
    raise_first(global_batch(f"training_config.{name}", value, num_hosts))
    if value is not None:
      setattr(local, name, value // num_hosts)
  axes = batch_axes(tc.data_sharding_axis)
  if len(axes) > 1:
    local.data_sharding_axis = (axes,)
  return local
