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
own batch on every host. The learner's private parts involved:

- `_orchestrator_producer` yields each finished group (G episodes of one
  prompt); the subclass tells the cluster (`agent_turns.group_done`).
- `_rollout_sync_lock` makes a weight sync wait until no episode runs.
  With pinned turns a sync cannot change an episode's policy, and the wait
  would deadlock: Tunix takes the lock for a new episode on its event-loop
  thread, which then stops every episode the sync waits for. Where the
  cluster pins turns (`observe_groups()` is True) the lock is one that
  never waits.

Evaluation: Tunix numbers an evaluation pass's groups like the training
step's (from global_steps x batch) and generates them with mode TRAIN,
while the training producer may still run. Its evaluation calls
`_orchestrator_producer` with the prompts as a list: the subclass numbers
those groups from `EVAL_GROUP_OFFSET` (group k of the pass: the k-th
evaluation prompt, through `_create_agent_env_pair`), so that the cluster
keys their turns by evaluation identities, and holds the cluster's
`agent_turns.evaluation()` while the pass runs.

The cluster side is its `agent_turns` (`tunix_mcjax.agent_turns`), where
it has one. `learner_class()` is the subclass; Tunix's CLI builds it inside
`compat.tunix_cli.agentic_learner()`.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

MODULE = "tunix.rl.agentic.agentic_grpo_learner"
# Evaluation groups' ids (module doc); training ids stay far below.
EVAL_GROUP_OFFSET = 2**40
# The key that carries an evaluation prompt's index to its agents.
_EVAL_INDEX = "_tunix_mcjax_eval_index"


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
  """Tunix's agentic `GRPOLearner`, reporting finished groups and
  evaluation passes to its cluster's `agent_turns` (module doc)."""
  from tunix.rl.agentic import agentic_grpo_learner  # pylint: disable=g-import-not-at-top

  class McJaxAgenticGRPOLearner(agentic_grpo_learner.GRPOLearner):
    """GRPOLearner whose cluster sees each trajectory group end."""

    def __init__(self, *args: Any, **kwargs: Any):
      super().__init__(*args, **kwargs)
      turns = getattr(self.rl_cluster, "agent_turns", None)
      if turns is not None and turns.observe_groups():
        self._rollout_sync_lock = _NoWaitSyncLock()

    async def _orchestrator_producer(self, orchestrator: Any,
                                     prompt_iterator: Any, *args: Any,
                                     **kwargs: Any):
      turns = getattr(self.rl_cluster, "agent_turns", None)
      evaluating = isinstance(prompt_iterator, list)
      if evaluating:
        prompt_iterator = [{**p, _EVAL_INDEX: i}
                           for i, p in enumerate(prompt_iterator)]
      with (turns.evaluation() if evaluating and turns is not None
            else contextlib.nullcontext()):
        async for group in super()._orchestrator_producer(
            orchestrator, prompt_iterator, *args, **kwargs):
          if turns is not None and not evaluating:
            turns.group_done()
          yield group

    def _create_agent_env_pair(self, single_example: Any, group_id: int,
                               pair_index: int) -> Any:
      # A copy for this agent (Tunix deep-copies the prompt per pair).
      index = single_example.pop(_EVAL_INDEX, None)
      if index is not None:
        group_id = EVAL_GROUP_OFFSET + index
      return super()._create_agent_env_pair(single_example, group_id,
                                            pair_index)

  return McJaxAgenticGRPOLearner
