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

"""Tunix's agentic GRPO learner, telling the mcjax cluster when a group ends.

Under `mcjax_da` with `off_policy_steps` K >= 1 the producer of Tunix's
agentic learner (0.1.7) generates the next K batches while its consumer
trains. mcjax fixes that schedule (`agent_turns`): every agent turn runs on
the policy its batch is pinned to, and a batch's agents start only once
every group of the batch before has ended, so each step trains exactly its
own batch on every host. Two private parts of the learner are involved:

- `_orchestrator_producer` yields each finished group (G episodes of one
  prompt); the subclass tells the cluster (`agent_group_done`).
- `_rollout_sync_lock` makes a weight sync wait until no episode runs.
  With pinned turns a sync cannot change an episode's policy, and the wait
  would deadlock: Tunix takes the lock for a new episode on its event-loop
  thread, which then stops every episode the sync waits for. Where the
  cluster pins turns (`observe_agent_groups()` is True) the lock is one
  that never waits.

`learner_class()` is the subclass; `rebound()` makes Tunix's CLI build it.
"""

from __future__ import annotations

from collections.abc import Iterator
import contextlib
import functools
from typing import Any

MODULE = "tunix.rl.agentic.agentic_grpo_learner"


class _NoWaitSyncLock:
  """Tunix's RolloutSyncLock interface, never waiting (module doc)."""

  def acquire_rollout(self) -> None:
    pass

  def release_rollout(self) -> None:
    pass

  def acquire_weight_sync(self) -> None:
    pass

  def release_weight_sync(self) -> None:
    pass


@functools.cache
def learner_class() -> type[Any]:
  """Tunix's agentic `GRPOLearner`, reporting finished groups to its
  cluster (`agent_group_done`, where the cluster has it)."""
  from tunix.rl.agentic import agentic_grpo_learner  # pylint: disable=g-import-not-at-top

  class McJaxAgenticGRPOLearner(agentic_grpo_learner.GRPOLearner):
    """GRPOLearner whose cluster sees each trajectory group end."""

    def __init__(self, *args: Any, **kwargs: Any):
      super().__init__(*args, **kwargs)
      observe = getattr(self.rl_cluster, "observe_agent_groups", None)
      if observe is not None and observe():
        self._rollout_sync_lock = _NoWaitSyncLock()

    async def _orchestrator_producer(self, *args: Any, **kwargs: Any):
      done = getattr(self.rl_cluster, "agent_group_done", None)
      async for group in super()._orchestrator_producer(*args, **kwargs):
        if done is not None:
          done()
        yield group

  return McJaxAgenticGRPOLearner


@contextlib.contextmanager
def rebound() -> Iterator[None]:
  """Inside the block, `agentic_grpo_learner.GRPOLearner` (the name Tunix's
  CLI imports when it builds the agentic learner) is `learner_class()`."""
  from tunix.rl.agentic import agentic_grpo_learner  # pylint: disable=g-import-not-at-top

  saved = agentic_grpo_learner.GRPOLearner
  agentic_grpo_learner.GRPOLearner = learner_class()
  try:
    yield
  finally:
    agentic_grpo_learner.GRPOLearner = saved
