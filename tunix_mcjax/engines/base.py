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


"""The rollout-engine interface the multi-controller cluster relies on.

Tunix only knows `BaseRollout`. The cluster additionally needs to know where
an engine runs, which parameter layout it wants, and that it installs
parameters published in that layout as they are. `Engine` names exactly that
and nothing more, so that other engines (vLLM, MaxText) can implement it.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
import dataclasses
from typing import Any, Protocol, runtime_checkable

from absl import logging
from flax import nnx
import jax
import jaxtyping
import numpy as np
from tunix.rl.rollout import base_rollout


@runtime_checkable
class RowIdSource(Protocol):
  """Supplies the identity of every row an engine is asked to generate.

  Sampling noise is keyed on these identities instead of a row's position in
  a batch, which makes completions independent of how rows are split across
  hosts, calls and devices.
  """

  def take(self, num_rows: int) -> np.ndarray:
    """Returns the identities of the next `num_rows` rows, in order.

    Args:
      num_rows: how many rows the engine is about to generate.

    Returns:
      An int64 array of shape (num_rows, 2): (global prompt index, sample
      index within the prompt's group) per row.
    """
    ...


class Engine(base_rollout.BaseRollout, abc.ABC):
  """A Tunix rollout engine that the multi-controller cluster can drive.

  Beyond `BaseRollout`, the cluster needs:

  * `engine_mesh`: the (host-local) mesh the engine runs on. It is
    deliberately not called `mesh`: Tunix's `RLCluster` replaces its ROLLOUT
    mesh with `rollout.mesh` when that attribute exists, which would make the
    ROLLOUT and ACTOR meshes differ and switch on Tunix's async-rollout
    thread, whose collectives are not ordered across hosts. Engines must not
    define an attribute named `mesh`.
  * `param_shardings()`: the layout published parameters must arrive in.
  * `update_params(params)`: installs parameters that already have that
    layout, without copies or resharding.
  """

  @property
  @abc.abstractmethod
  def engine_mesh(self) -> jax.sharding.Mesh:
    """The mesh the engine's model and all its computations live on."""

  @abc.abstractmethod
  def param_shardings(self) -> Any:
    """Returns the layout the engine wants published parameters in.

    Returns:
      A tree with the structure of `nnx.state(model, nnx.Param)` whose leaves
      are `jax.sharding.NamedSharding`s on `engine_mesh`; usable directly as
      `out_shardings` of a jitted publication step.
    """

  @abc.abstractmethod
  def update_params(
      self,
      params: jaxtyping.PyTree,
      filter_types: tuple[Any, ...] | None = None,
  ) -> None:
    """Installs new parameters.

    Args:
      params: parameters already laid out as `param_shardings()` says (same
        tree paths, shapes, dtypes and shardings). They are installed as they
        are; a mismatch raises `ValueError` naming the parameter instead of
        silently resharding through the host.
      filter_types: when given, `params` may hold only the subset of the
        parameters selected by these variable types (e.g. LoRA parameters);
        the others are kept.
    """

  def publication_target(self) -> Any:
    """The tree the cluster publishes into (names, shapes, dtypes, layout).

    Leaves are arrays or `jax.ShapeDtypeStruct`s with a `NamedSharding` on
    `engine_mesh`, structured like `nnx.state(model, nnx.Param)`; the
    published tree is handed to `update_params` in one call. Engines whose
    weights live outside JAX (e.g. vLLM with PyTorch) return the JAX-side
    staging layout they convert from.
    """
    return nnx.state(self.model(), nnx.Param)


@dataclasses.dataclass(frozen=True, kw_only=True)
class EngineModelSpec:
  """An engine architecture that differs from the trainer's.

  By default an engine runs a replicated copy of the actor itself. When the
  trainer's model cannot sample (e.g. a MaxText Transformer behind MaxText's
  Tunix adapter), the engine runs `create()`'s model instead and every
  publication passes the actor's parameters through `mapping` first.

  Attributes:
    create: builds the engine's model (called under `nnx.eval_shape`, so it
      allocates nothing); its parameters are then published from the actor.
    mapping: the actor's flat parameters (`jax.tree_util.keystr` names of
      `nnx.state(actor, nnx.Param)`) -> the engine model's flat parameters.
      Pure array code: it is traced into the publication program.
    axis_names: the two axis names of the engine's host-local mesh that
      the engine model's sharding annotations use.
  """

  create: Callable[[], Any]
  mapping: Callable[[dict[str, Any]], dict[str, Any]]
  axis_names: tuple[str, str] = ("fsdp", "tp")

  def __post_init__(self):
    if not callable(self.create) or not callable(self.mapping):
      raise TypeError("EngineModelSpec needs callables `create` and `mapping`.")
    if len(tuple(self.axis_names)) != 2:
      raise ValueError(
          f"axis_names must name two mesh axes, got {self.axis_names!r}."
      )


# --- Helpers shared by engine implementations ---------------------------


class CounterRowIds:
  """Fallback row identities: a running counter (not placement-invariant)."""

  def __init__(self):
    self._next = 0

  def take(self, num_rows: int) -> np.ndarray:
    rows = np.arange(self._next, self._next + num_rows, dtype=np.int64)
    self._next += num_rows
    return np.stack([rows, np.zeros_like(rows)], axis=1)


def default_seed(rollout_config: base_rollout.RolloutConfig | None) -> int:
  """The engine's base seed: RolloutConfig.seed when it is an int, else 0."""
  seed = None if rollout_config is None else rollout_config.seed
  if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
    return int(seed)
  return 0


def engine_mesh_and_source(
    engine: str,
    *,
    mesh: jax.sharding.Mesh | None,
    engine_mesh: jax.sharding.Mesh | None,
    rollout_actor: Any,
    initial_model: Any,
) -> tuple[jax.sharding.Mesh, Any]:
  """The checked engine mesh (default: Tunix's ROLLOUT `mesh`) and the model
  to take the first weights from (`initial_model`, else `rollout_actor`)."""
  engine_mesh = mesh if engine_mesh is None else engine_mesh
  if engine_mesh is None:
    raise ValueError(f"{engine} needs `engine_mesh` (or `mesh`).")
  check_engine_mesh(engine_mesh)
  source = rollout_actor if initial_model is None else initial_model
  if source is None:
    raise ValueError(f"{engine} needs `rollout_actor` or `initial_model`.")
  return engine_mesh, source


def row_ids_or_counter(engine: str, row_ids: RowIdSource | None
                       ) -> RowIdSource:
  """`row_ids`, or (with a warning) a per-engine counter."""
  if row_ids is not None:
    return row_ids
  logging.warning(
      "%s has no row-id source: rows are keyed by a per-engine counter, so"
      " sampled completions depend on how rows are split across hosts and"
      " calls (sampling is not placement-invariant).", engine,
  )
  return CounterRowIds()


def default_cache_size(rollout_config: base_rollout.RolloutConfig) -> int:
  """Longest prompt + completion an engine must hold for `rollout_config`."""
  return int(max(
      rollout_config.kv_cache_size,
      rollout_config.max_prompt_length + rollout_config.max_tokens_to_generate,
  ))


def check_engine_mesh(mesh: jax.sharding.Mesh) -> None:
  """Raises unless `mesh` is host-local with Auto axes (engines need both)."""
  if not isinstance(mesh, jax.sharding.Mesh):
    raise TypeError(f"engine_mesh must be a jax.sharding.Mesh; got {mesh!r}.")
  foreign = [
      d for d in mesh.devices.flat if d.process_index != jax.process_index()
  ]
  if foreign:
    raise ValueError(
        "engine_mesh must hold only this process's devices (it is"
        f" host-local); it includes {foreign[:4]}."
    )
  axis_types = getattr(mesh, "axis_types", ())
  auto = getattr(jax.sharding, "AxisType", None)
  if auto is not None and any(t != auto.Auto for t in axis_types):
    raise ValueError(
        f"engine_mesh must have Auto axis types; got {axis_types}. Note that"
        " jax.make_mesh defaults to Explicit axes: pass"
        " axis_types=(jax.sharding.AxisType.Auto,) * ndim."
    )


def key_part(k: Any) -> Any:
  """A tree-path entry as a plain dict key / index / attribute name."""
  for attr in ("key", "idx", "name"):
    if hasattr(k, attr):
      return getattr(k, attr)
  return str(k)


def path_name(path: tuple[Any, ...]) -> str:
  """A `flat_arrays` path for error messages."""
  return "/".join(str(p) for p in path)


def flat_arrays(tree: Any) -> dict[tuple[Any, ...], Any]:
  """Flattens an nnx.State / nested dict of (Variables of) arrays by path."""
  if isinstance(tree, nnx.State):
    tree = nnx.to_pure_dict(tree)
  else:
    tree = jax.tree.map(
        lambda v: _variable_value(v) if isinstance(v, nnx.Variable) else v,
        tree,
        is_leaf=lambda v: isinstance(v, nnx.Variable),
    )
  flat, _ = jax.tree_util.tree_flatten_with_path(tree)
  return {tuple(key_part(k) for k in path): v for path, v in flat}


def _variable_value(v: nnx.Variable) -> Any:
  # flax >= 0.12 deprecates `.value` in favour of `get_value()`.
  return v.get_value() if hasattr(v, "get_value") else v.value


def check_row_ids(row_ids: Any) -> np.ndarray:
  """Row identities (B, 2) as uint32, or ValueError saying what is wrong."""
  ids = np.asarray(row_ids)
  if ids.ndim != 2 or ids.shape[1] != 2:
    raise ValueError(f"row ids must have shape (B, 2); got {ids.shape}.")
  if not np.issubdtype(ids.dtype, np.integer):
    raise ValueError(f"row ids must be integers; got dtype {ids.dtype}.")
  if ids.size and (ids.min() < 0 or ids.max() >= 2**32):
    raise ValueError(
        "row ids must lie in [0, 2**32) to be folded into a PRNG key; got"
        f" range [{ids.min()}, {ids.max()}]."
    )
  return ids.astype(np.uint32)


def host_rows(x: Any, name: str) -> np.ndarray:
  """This host's (B, T) rows as numpy; refuses global arrays."""
  if isinstance(x, jax.Array) and not x.is_fully_addressable:
    raise ValueError(
        f"{name} is a global array not fully addressable by this process;"
        " pass this host's rows (numpy or a host-local array)."
    )
  x = np.asarray(x)
  if x.ndim != 2:
    raise ValueError(f"{name} must have shape (B, T); got {x.shape}.")
  return x
