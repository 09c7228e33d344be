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

"""The private hooks of Tunix's `RLCluster` and trainer, and two fixes.

The mcjax cluster runs Tunix's stock `GRPOLearner` unchanged; it needs:

- `RLCluster._get_mesh_and_logical_axis_rules_cm(role)`: the mesh a role runs
  under. mcjax returns the host-local mesh for ROLLOUT. Upstream: a public,
  overridable `role_context(role)`.
- Tunix's own one-off policy snapshot (`_anchor_policy_state`, taken in
  `RLCluster._init_cluster`): made key-safe by `key_safe_memory_moves`. Only
  `get_actor_per_token_logps` reads it, which mcjax computes from the live
  trainer state (`agent_turns`), so mcjax's `sync_weights` does not refresh
  it every step as the stock one does (the one snapshot stays: a
  trainer-sized tree in host memory per host, docs/memory.md).
- Two Tunix 0.1.7 bugs met by MaxText actors, fixed below in upstreamable
  form: `put_on_memory_kind`, `is_sharing_weights` (installed for the
  lifetime of a cluster by `install_fixes`, undone by its handle).
- `RLCluster._rl_metrics_logger`: Tunix's metrics logger (TensorBoard etc.),
  used by host 0 to log the cross-host step metrics.
- `PeftTrainer._prev_buffered_train_metrics` / `_buffered_train_metrics`: the
  losses of the step that just ran (Tunix writes them one step late).

Tunix main renamed `RLCluster` to `RLEngine` and keeps an alias; `RLCluster`
below resolves either.
"""

from __future__ import annotations

import contextlib
import threading
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

# The RLCluster members McJaxRLCluster overrides or calls (checked by
# tests/test_compat.py); the private ones are also rows of TOUCH_POINTS.
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


# Tunix's own function, whatever `install_fixes` did to the module since.
tunix_is_sharing_weights = _is_sharing_weights

_fixes_lock = threading.Lock()
_fixes_users = 0


class FixesHandle:
  """Undoes one `install_fixes` call (idempotent); also a context manager."""

  def __init__(self):
    self._active = True

  @property
  def active(self) -> bool:
    return self._active

  def undo(self) -> None:
    """Drops this holder; the last one restores Tunix's own functions."""
    global _fixes_users
    with _fixes_lock:
      if not self._active:
        return
      self._active = False
      _fixes_users -= 1
      if _fixes_users == 0 and (
          _rl_utils.is_sharing_weights is is_sharing_weights
      ):
        _rl_utils.is_sharing_weights = _is_sharing_weights

  def __enter__(self) -> FixesHandle:
    return self

  def __exit__(self, *exc: Any) -> None:
    self.undo()


def install_fixes() -> FixesHandle:
  """Installs the fixes above into Tunix until the returned handle is undone.

  Only `is_sharing_weights` is replaced module-wide (the stock learner calls
  it through `tunix.rl.utils`); it behaves as before wherever the old one
  did not raise. Calls nest: Tunix's own function comes back when the
  handles of all calls are undone (a cluster undoes its own at `close()`).

  Returns:
    The handle that undoes this call.
  """
  global _fixes_users
  with _fixes_lock:
    _fixes_users += 1
    _rl_utils.is_sharing_weights = is_sharing_weights
  return FixesHandle()


def scope_trainer_eval(trainer: Any, scope: Any) -> None:
  """Runs `trainer`'s evaluation pass (PeftTrainer's `_run_eval`, called
  inside its `train`) within `scope()`, on this trainer only."""
  run_eval = trainer._run_eval  # pylint: disable=protected-access

  def scoped(*args, **kwargs):
    with scope():
      return run_eval(*args, **kwargs)

  trainer._run_eval = scoped  # pylint: disable=protected-access


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
