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

"""A trainer host of the disaggregated mode, as a Ray actor runs it.

Kept apart from `launcher` so that a trainer process imports only what it
runs: the GRPO job as one process of the trainers' multi-controller JAX
program (its environment, set by the launcher, names the coordinator).
"""

from __future__ import annotations

from collections.abc import Mapping
import os
from typing import Any


class TrainerHost:
  """One trainer process; `run` runs the job as host JAX_PROCESS_ID."""

  def coordinator_address(self, *, loopback: bool) -> str:
    """HOST:PORT for the trainers' JAX coordinator, run by this host (0).

    Args:
      loopback: 127.0.0.1 (a local head); otherwise this node's IP as Ray
        knows it (IPv4), for trainer hosts on other nodes.
    """
    # pylint: disable=g-import-not-at-top
    import ray
    from tunix_mcjax import launch
    # pylint: enable=g-import-not-at-top

    host = launch.LOOPBACK if loopback else ray.util.get_node_ip_address()
    # Free on this node now; the coordinator binds it when the job starts.
    return f"{host}:{launch.free_port(host)}"

  def set_env(self, env: Mapping[str, str]) -> None:
    """The job's variables (coordinator, host id), before JAX starts here."""
    os.environ.update(env)

  def run(self, task: Any) -> dict[str, Any]:
    """Runs `task` (a `model_source.TrainerTask`); returns its summary."""
    summary = task.run()
    return {k: summary[k] for k in ("backend", "num_hosts", "steps",
                                    "wall_s", "records") if k in summary}
