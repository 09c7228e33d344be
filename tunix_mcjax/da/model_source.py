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

"""Where a rollout host gets its model, tokenizer and engine settings.

A rollout host (`rollout_host.RolloutHost`) builds the actor's model on its
own devices (the trainers' first publication then replaces its weights) and
an engine around it. What describes the job differs by entry point: the GRPO
example's `GrpoJobConfig` (`GrpoJobSource`) or Tunix's GRPO command line
(`CliSource`: its arguments and `CliOptions`). A source is picklable (Ray
sends it to the rollout process) and does its work there, in `build`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Protocol


class ModelSource(Protocol):
  """What a rollout host builds its model and engine from."""

  @property
  def engine(self) -> str:
    """The registered mcjax engine name (e.g. "native")."""

  @property
  def seed(self) -> int:
    """Base seed of the engine's per-row sampling keys."""

  @property
  def cache_size(self) -> int:
    """KV-cache length of a native engine (longest prompt + completion)."""

  def rollout_config(self) -> Any:
    """The job's TRAIN `RolloutConfig` (engines built from one)."""

  def build(self, mesh: Any) -> tuple[Any, Any]:
    """The actor's model on `mesh` (host-local) and the tokenizer."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class GrpoJobSource:
  """The GRPO example's job (`recipes.job_config.GrpoJobConfig`)."""

  job: Any

  @property
  def engine(self) -> str:
    # 'vanilla' (Tunix's own sampler) is the native engine here.
    return "native" if self.job.engine == "vanilla" else self.job.engine

  @property
  def seed(self) -> int:
    return self.job.seed

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


@dataclasses.dataclass(frozen=True, kw_only=True)
class CliSource:
  """Tunix's GRPO command line: its arguments (base config resolved) and
  `CliOptions`; parsed again in the rollout process.

  The model is the actor's as Tunix's `create_rl_cluster` builds it (the
  reference section's model without LoRA, then the actor's LoRA), so that
  the trainers' publications fit it; `cli.disaggregated.plan` has refused a
  rollout section whose model differs.
  """

  argv: tuple[str, ...]
  options: Any

  @functools.cached_property
  def _settings(self) -> dict[str, Any]:
    # pylint: disable=g-import-not-at-top
    from tunix_mcjax import support
    from tunix_mcjax.engines import base as engine_base
    # pylint: enable=g-import-not-at-top

    pipeline = self._pipeline()
    rollout_config = pipeline.create_rollout_config()
    engine = self.options.engine or support.mcjax_engine_name(
        pipeline.config.get("rollout_engine") or "vanilla")
    return {
        "engine": engine,
        "rollout_config": rollout_config,
        # As the colocated engine resolves them (no explicit seed or size).
        "seed": engine_base.default_seed(rollout_config),
        "cache_size": engine_base.default_cache_size(rollout_config),
    }

  def _pipeline(self) -> Any:
    from tunix_mcjax.cli import grpo_main  # pylint: disable=g-import-not-at-top

    return grpo_main.GrpoCliPipeline(list(self.argv), options=self.options)

  @property
  def engine(self) -> str:
    return self._settings["engine"]

  @property
  def seed(self) -> int:
    return self._settings["seed"]

  @property
  def cache_size(self) -> int:
    return self._settings["cache_size"]

  def rollout_config(self) -> Any:
    return self._settings["rollout_config"]

  def build(self, mesh: Any) -> tuple[Any, Any]:
    pipeline = self._pipeline()
    return pipeline.create_actor_model(mesh), pipeline.create_tokenizer()

  def __getstate__(self) -> dict[str, Any]:
    # Only the arguments travel; the settings are derived where used.
    return {"argv": self.argv, "options": self.options}

  def __setstate__(self, state: dict[str, Any]) -> None:
    self.__dict__.update(state)


def as_source(job_or_source: Any) -> ModelSource:
  """A `ModelSource` as is; a `GrpoJobConfig` as a `GrpoJobSource`."""
  if callable(getattr(type(job_or_source), "build", None)):
    return job_or_source
  return GrpoJobSource(job=job_or_source)
