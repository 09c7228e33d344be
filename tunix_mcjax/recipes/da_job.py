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

"""The GRPO example's job under `--backend=mcjax_da`.

`GrpoJobTask` is what its trainer hosts run and `GrpoJobSource` where its
rollout hosts get their model: the two protocols of `da.model_source`, which
the example hands to `da.launcher.run_local`.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True, kw_only=True)
class GrpoJobTask:
  """What the example's trainer hosts run (`da.model_source.TrainerTask`)."""

  job: Any  # recipes.job_config.GrpoJobConfig

  def da_options(self) -> Any:
    return self.job.da_options()

  def run(self) -> dict[str, Any]:
    from tunix_mcjax.recipes import grpo_job  # pylint: disable=g-import-not-at-top

    return grpo_job.run(self.job)


@dataclasses.dataclass(frozen=True, kw_only=True)
class GrpoJobSource:
  """Where the GRPO example's rollout hosts get their model
  (`da.model_source.ModelSource`)."""

  job: Any

  @property
  def engine(self) -> str:
    # 'vanilla' (Tunix's own sampler) is the native engine here.
    from tunix_mcjax import rules  # pylint: disable=g-import-not-at-top

    return rules.registered_engine(self.job.engine)

  @property
  def seed(self) -> int:
    return self.job.seed

  @property
  def engine_tp(self) -> int:
    return self.job.engine_tp

  @property
  def cache_size(self) -> int:
    from tunix_mcjax.engines import base as engine_base  # pylint: disable=g-import-not-at-top

    return engine_base.default_cache_size(self.rollout_config())

  def rollout_config(self) -> Any:
    from tunix_mcjax.recipes import grpo_job  # pylint: disable=g-import-not-at-top

    return grpo_job.train_rollout_config(self.job)

  def build(self, mesh: Any) -> tuple[Any, Any]:
    from tunix_mcjax.recipes import grpo_job  # pylint: disable=g-import-not-at-top

    if self.job.trainer == "maxtext":
      # The engine's Tunix Qwen3, not the MaxText actor: the trainers map
      # their parameters into its layout before publishing.
      return grpo_job.maxtext_engine_model(self.job, mesh)
    # The job's own model code (with its LoRA adapters, if any).
    actor, _, tokenizer = grpo_job._build_models(self.job, mesh)  # pylint: disable=protected-access
    return actor, tokenizer
