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

"""What the disaggregated mode takes from an entry point: two protocols.

A rollout host (`rollout_host.RolloutHost`) builds the actor's model on its
own devices (the trainers' first publication then replaces its weights) and
an engine around it, from a `ModelSource`; a trainer host
(`trainer_host.TrainerHost`) runs a `TrainerTask`. The entry points implement
both (`recipes.da_job` for the GRPO example's job, `cli.disaggregated` for
Tunix's command line) and hand them to `launcher.run_local` explicitly: this
mode never imports an entry point. Both are picklable (Ray sends them to the
host processes) and do their work there.
"""

from __future__ import annotations

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

  @property
  def engine_tp(self) -> int:
    """Devices per engine replica on a rollout host (`McJaxOptions.engine_tp`):
    its engine mesh is (devices // engine_tp, engine_tp)."""

  def rollout_config(self) -> Any:
    """The job's TRAIN `RolloutConfig` (engines built from one)."""

  def build(self, mesh: Any) -> tuple[Any, Any]:
    """The actor's model on `mesh` (host-local) and the tokenizer."""


class TrainerTask(Protocol):
  """What every trainer host runs (the job's GRPO loop, on the
  `McJaxDaRLCluster` backend)."""

  def da_options(self) -> Any:
    """The job's `da.options.DaOptions` (host counts, staleness, namespace)."""

  def run(self) -> dict[str, Any]:
    """Runs this trainer host (the launcher's environment names it) and
    returns its summary (backend, num_hosts, steps, wall_s, records)."""
