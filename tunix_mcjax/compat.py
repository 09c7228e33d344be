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

"""Everything tunix_mcjax relies on beyond Tunix's public API, in one place.

The mcjax cluster runs Tunix's stock `GRPOLearner` unchanged; it needs a few
private hooks of `RLCluster` and of the trainer. Each is reached only through
this module, so a Tunix upgrade is checked in one place (tests/test_compat.py
asserts each hook still exists), and each could become a public hook upstream:

- `RLCluster._get_mesh_and_logical_axis_rules_cm(role)`: the mesh a role runs
  under. mcjax returns the host-local mesh for ROLLOUT. Upstream: a public,
  overridable `role_context(role)`.
- `RLCluster._anchor_policy_state`: snapshot of the policy for old log-probs,
  refreshed by `sync_weights` exactly as the stock method does.
- `RLCluster._rl_metrics_logger`: Tunix's metrics logger (TensorBoard etc.),
  used by host 0 to log the cross-host step metrics.
- `PeftTrainer._prev_buffered_train_metrics` / `_buffered_train_metrics`: the
  losses of the step that just ran (Tunix writes them one step late).

Tunix main renamed `RLCluster` to `RLEngine` and keeps an alias; `RLCluster`
below resolves either.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tunix.rl import rl_cluster as _rl_cluster

RLCluster = getattr(_rl_cluster, "RLCluster", None) or getattr(
    _rl_cluster, "RLEngine"
)
Role = _rl_cluster.Role
Mode = _rl_cluster.Mode
ClusterConfig = _rl_cluster.ClusterConfig
RLTrainingConfig = _rl_cluster.RLTrainingConfig

# Names of private members relied on, checked by tests/test_compat.py.
REQUIRED_CLUSTER_MEMBERS = (
    "_get_mesh_and_logical_axis_rules_cm",
    "_log_metrics",
    "buffer_metrics",
    "sync_weights",
    "update_actor",
    "generate",
    "get_ref_per_token_logps",
    "get_old_per_token_logps",
)


def set_anchor_policy_state(cluster: Any, state: Any) -> None:
  cluster._anchor_policy_state = state  # pylint: disable=protected-access


def metrics_logger(cluster: Any) -> Any:
  return cluster._rl_metrics_logger  # pylint: disable=protected-access


def last_train_metrics(trainer: Any) -> dict[str, float]:
  """Mean loss and grad norm of the latest optimizer step, if recorded."""
  for attr in ("_prev_buffered_train_metrics", "_buffered_train_metrics"):
    buf = getattr(trainer, attr, None)
    if buf is not None and getattr(buf, "losses", None):
      out = {"loss": float(np.mean([np.asarray(l) for l in buf.losses]))}
      extra = getattr(buf, "additional_metrics", {}) or {}
      if "grad_norm" in extra:
        out["grad_norm"] = float(np.mean([np.asarray(v) for v in
                                          extra["grad_norm"][0]]))
      return out
  return {}
