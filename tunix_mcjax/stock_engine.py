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

"""Stock Tunix's single-controller cluster running an mcjax engine.

The comparison runs (the example's `--backend=tunix`, the CLI's
placement-invariant mode) admit every prompt on one host into a training and
an evaluation ledger, and key the engine's sampling by those rows'
identities, so that the stock cluster draws the same per-row samples as
mcjax hosts do. Both entry points build it here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
import functools
from typing import Any

from tunix_mcjax import admission as admission_lib
# Importing the engines package registers the built-in engines.
from tunix_mcjax import engines
from tunix_mcjax.registry import ENGINES


class StockAdmission:
  """Single-host admission, its row ids, and an engine keyed by them."""

  def __init__(
      self,
      *,
      num_generations: int,
      length_fn: Callable[[Sequence[str]], Sequence[int]] | None = None,
  ):
    def one_host() -> admission_lib.AdmissionConfig:
      return admission_lib.AdmissionConfig(
          num_hosts=1, host_index=0, num_generations=num_generations)

    self.train = admission_lib.Admission(one_host(), length_fn=length_fn)
    # Evaluation prompts: their own ledger and identities, as under mcjax.
    self.eval = admission_lib.Admission(one_host())
    self.row_ids = admission_lib.TrainEvalRowIds(
        self.train.ledger, self.eval.ledger)

  def engine_context(self, **fields: Any) -> engines.EngineContext:
    """The engine's context: these row ids, and the stock cluster's
    `sync_weights` leaving the layout of process-local weights to it."""
    return engines.EngineContext(
        row_ids=self.row_ids, reshard_on_update=True, **fields)

  def rollout_engine(
      self, engine: str, context: engines.EngineContext | None = None
  ) -> Callable[..., Any]:
    """What `ClusterConfig.rollout_engine` takes: the registered engine
    `engine` bound to `context` (default: `engine_context()`)."""
    return functools.partial(
        ENGINES.get(engine),
        context=self.engine_context() if context is None else context)

  def route_eval(self, cluster: Any) -> None:
    """Makes `cluster`'s evaluation generate calls take evaluation ids."""
    admission_lib.route_eval_generate(cluster, self.row_ids)
