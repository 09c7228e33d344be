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

Every private (or undocumented) upstream name we use is reached only through
this package and listed once in `touch_points.TOUCH_POINTS`, which
tests/test_compat.py walks against the installed packages: a Tunix upgrade
is one table to read and one test to run. Submodules, by upstream area:

- `rl_cluster`: `RLCluster`'s private hooks, the trainer's buffered metrics,
  and two Tunix fixes installed for the lifetime of a cluster.
- `sampler`: the sampling step of Tunix's `Sampler` (native engine).
- `vllm_rollout`: the model runner behind Tunix's `VllmRollout`
  (tpu-inference engine).
- `gc_hooks`: the `gc` module attribute of Tunix modules (optimization O2).
- `packing`: Tunix's sequence-packing path made exact (causal same-segment
  mask, mcjax's packer) while a cluster with `max_seq_token_per_tpu` lives.
- `tunix_cli`: the names of Tunix's GRPO CLI that `tunix_mcjax.cli` rebinds.
- `metric_keys`: metric names Tunix writes as string literals.
- `versions`: differences between the supported JAX versions.

The names most callers need are re-exported here (`compat.RLCluster`,
`compat.install_fixes`, ...).
"""

from tunix_mcjax.compat import metric_keys
from tunix_mcjax.compat import touch_points
from tunix_mcjax.compat.rl_cluster import ClusterConfig
from tunix_mcjax.compat.rl_cluster import FixesHandle
from tunix_mcjax.compat.rl_cluster import install_fixes
from tunix_mcjax.compat.rl_cluster import is_sharing_weights
from tunix_mcjax.compat.rl_cluster import key_safe_memory_moves
from tunix_mcjax.compat.rl_cluster import last_train_metrics
from tunix_mcjax.compat.rl_cluster import metrics_logger
from tunix_mcjax.compat.rl_cluster import Mode
from tunix_mcjax.compat.rl_cluster import put_on_memory_kind
from tunix_mcjax.compat.rl_cluster import REQUIRED_CLUSTER_MEMBERS
from tunix_mcjax.compat.rl_cluster import RLCluster
from tunix_mcjax.compat.rl_cluster import RLTrainingConfig
from tunix_mcjax.compat.rl_cluster import Role
from tunix_mcjax.compat.rl_cluster import scope_trainer_eval
from tunix_mcjax.compat.rl_cluster import tunix_is_sharing_weights
from tunix_mcjax.compat.sampler import HookedSampler
from tunix_mcjax.compat.sampler import SamplingState
from tunix_mcjax.compat.versions import torch_from_jax

__all__ = [
    "ClusterConfig",
    "FixesHandle",
    "HookedSampler",
    "Mode",
    "REQUIRED_CLUSTER_MEMBERS",
    "RLCluster",
    "RLTrainingConfig",
    "Role",
    "SamplingState",
    "install_fixes",
    "metric_keys",
    "touch_points",
    "is_sharing_weights",
    "key_safe_memory_moves",
    "last_train_metrics",
    "metrics_logger",
    "put_on_memory_kind",
    "scope_trainer_eval",
    "torch_from_jax",
    "tunix_is_sharing_weights",
]
