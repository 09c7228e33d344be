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

"""Options of the disaggregated backend, shared by the trainer and Ray sides."""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import time

# Ray names the rollout actors by these, in one namespace per job.
ROLLOUT_ACTOR_PREFIX = "mcjax_da_rollout_"
# A plain `ray_local.RaySession`'s namespace; a job's is `job_namespace()`.
DEFAULT_NAMESPACE = "tunix_mcjax_da"
# Each launch of a job: this prefix, then its UTC time, pid and a random tag.
NAMESPACE_PREFIX = "tunix_mcjax_da_"
# What a namespace of ours may hold: shell-, log- and Ray-safe.
_NAMESPACE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
# Ray placement-group strategies the hosts' bundles may be placed with
# (`launcher.Placement`; the entry points' --ray_placement_strategy).
PLACEMENT_STRATEGIES = ("SPREAD", "STRICT_SPREAD", "PACK", "STRICT_PACK")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DaOptions:
  """How trainer hosts reach their rollout hosts and how stale rollouts are.

  Attributes:
    trainer_hosts: processes of the trainers' JAX program (T).
    rollout_hosts: rollout processes (R); each trainer host owns R / T of
      them and sends them only its own rows.
    max_staleness: K, the most policy versions a trained rollout may lag the
      trainer. 0: synchronous (generate with the latest weights, then train).
      K >= 1: rollout hosts generate the next K batches with the last
      published policy while the trainers train.
    is_cap: C of the truncated importance weight `min(exp(logp_prox -
      logp_sampler), C)` applied per token when `max_staleness` >= 1.
    namespace: the Ray namespace the job runs in and names its actors and
      placement group in. None (default): the launcher gives each launch a
      namespace of its own (`job_namespace()`), so that jobs sharing a Ray
      cluster never see each other's actors; trainer hosts look their
      rollout actors up in the namespace their job runs in.
    timeout_s: how long a trainer host waits for a rollout host (a batch of
      completions, a weight installation) before it stops with an error.
  """

  trainer_hosts: int = 1
  rollout_hosts: int = 2
  max_staleness: int = 1
  is_cap: float = 2.0
  namespace: str | None = None
  timeout_s: float = 600.0

  def __post_init__(self):
    for name in ("trainer_hosts", "rollout_hosts"):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}.")
    if self.rollout_hosts % self.trainer_hosts:
      raise ValueError(
          f"rollout_hosts ({self.rollout_hosts}) must be a multiple of"
          f" trainer_hosts ({self.trainer_hosts}): each trainer host owns the"
          " same number of rollout hosts and sends them only its own rows."
      )
    if (not isinstance(self.max_staleness, int)
        or isinstance(self.max_staleness, bool) or self.max_staleness < 0):
      raise ValueError(
          f"max_staleness must be an integer >= 0, got {self.max_staleness!r}"
          " (0 = synchronous)."
      )
    if not self.is_cap >= 1.0:
      raise ValueError(
          f"is_cap must be >= 1 (a cap below 1 would shrink on-policy"
          f" tokens), got {self.is_cap}."
      )
    if not self.timeout_s > 0:
      raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}.")
    if self.namespace is not None:
      check_namespace(self.namespace)

  @property
  def rollouts_per_trainer(self) -> int:
    return self.rollout_hosts // self.trainer_hosts

  def rollout_actor_names(self, trainer_index: int) -> list[str]:
    """Names of the rollout actors trainer host `trainer_index` owns."""
    per = self.rollouts_per_trainer
    return [
        f"{ROLLOUT_ACTOR_PREFIX}{i}"
        for i in range(trainer_index * per, (trainer_index + 1) * per)
    ]


def job_namespace() -> str:
  """A fresh Ray namespace for one launch of a job.

  `NAMESPACE_PREFIX`, the UTC time, this process's pid and a random tag:
  unique per launch (a resumed job is a new launch with new actors; nothing
  looks up a previous launch's).
  """
  stamp = time.strftime("%Y%m%d_%H%M%S", time.gmtime())
  return f"{NAMESPACE_PREFIX}{stamp}_{os.getpid()}_{secrets.token_hex(4)}"


def check_namespace(namespace: object) -> str:
  """`namespace` if it is a valid job namespace; ValueError otherwise."""
  if not isinstance(namespace, str) or not _NAMESPACE_RE.fullmatch(namespace):
    raise ValueError(
        f"namespace must be 1-128 letters, digits, '_', '.' or '-' (starting"
        f" with a letter or digit), got {namespace!r}."
    )
  return namespace


def placement_group_name(namespace: str) -> str:
  """The name of the job's placement group (one bundle per host)."""
  return f"{namespace}_hosts"
