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

"""Everything tunix_mcjax relies on beyond the public APIs of its upstreams.

Every private (or undocumented) name of Tunix, vLLM, Ray, JAX or
tpu-inference that we use is reached only through this package and listed
once in `touch_points.TOUCH_POINTS`, which tests/test_compat.py walks against
the installed packages: an upgrade is one table to read and one test to run.
Submodules, by upstream area:

- `rl_cluster`: `RLCluster`'s private hooks, the trainer's buffered metrics,
  and two Tunix fixes installed for the lifetime of a cluster.
- `sampler`: the sampling step of Tunix's `Sampler` (native engine).
- `vllm_rollout`: the model runner behind Tunix's `VllmRollout`
  (tpu-inference engine).
- `vllm_engine`: the worker inside an in-process `vllm.LLM` (vllm engine).
- `ray_cluster`: how a local Ray head is kept on loopback (da/ray_local).
- `jax_runtime`: JAX's cluster detectors and backend state (runtime).
- `gc_hooks`: the `gc` module attribute of Tunix modules (optimization O2).
- `packing`: Tunix's sequence-packing path made exact (causal same-segment
  mask, mcjax's packer) while a cluster with `max_seq_token_per_tpu` lives.
- `chunked_logps`: per-token log-probs over sequence chunks, without the
  full [B, T, vocab] logits, while a job with `logps_chunk_size` runs.
- `tunix_cli`: the names of Tunix's GRPO CLI that `tunix_mcjax.cli` rebinds.
- `agentic_learner`: Tunix's agentic learner, reporting each finished
  trajectory group to the cluster (mcjax_da's off-policy schedule).
- `metric_keys`: metric names Tunix writes as string literals.
- `versions`: differences between the supported JAX versions.
- `touch_points` (the table) and `reaches` (the check that nothing outside
  compat reaches a private upstream name, from the package's source).

The names most callers need are re-exported here (`compat.RLCluster`,
`compat.install_fixes`, ...), imported on first use: importing this package
(or a light submodule such as `jax_runtime`, which runtime.py reads before
JAX starts) imports no Tunix and no JAX.
"""

from __future__ import annotations

import importlib
from typing import Any

from tunix_mcjax.compat import metric_keys
from tunix_mcjax.compat import touch_points

# Re-exported name -> the submodule that defines it.
_EXPORTS = {
    "ClusterConfig": "rl_cluster",
    "FixesHandle": "rl_cluster",
    "install_fixes": "rl_cluster",
    "is_sharing_weights": "rl_cluster",
    "key_safe_memory_moves": "rl_cluster",
    "last_train_metrics": "rl_cluster",
    "metrics_logger": "rl_cluster",
    "Mode": "rl_cluster",
    "put_on_memory_kind": "rl_cluster",
    "REQUIRED_CLUSTER_MEMBERS": "rl_cluster",
    "RLCluster": "rl_cluster",
    "RLTrainingConfig": "rl_cluster",
    "Role": "rl_cluster",
    "scope_trainer_eval": "rl_cluster",
    "tunix_is_sharing_weights": "rl_cluster",
    "HookedSampler": "sampler",
    "SamplingState": "sampler",
    "torch_from_jax": "versions",
}


def __getattr__(name: str) -> Any:
  """Imports a re-exported name's submodule on first use (PEP 562)."""
  module = _EXPORTS.get(name)
  if module is None:
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
  value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
  globals()[name] = value
  return value


def __dir__() -> list[str]:
  return sorted(set(globals()) | set(_EXPORTS))


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
