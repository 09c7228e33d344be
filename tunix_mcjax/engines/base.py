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
from collections.abc import Callable, Iterator
import contextlib
import dataclasses
from typing import Any, ClassVar, Protocol, runtime_checkable
import warnings

from absl import logging
from flax import nnx
from flax.nnx import spmd as nnx_spmd
import jax
import jaxtyping
import numpy as np
from tunix.rl.rollout import base_rollout

Mesh = jax.sharding.Mesh
NamedSharding = jax.sharding.NamedSharding
PartitionSpec = jax.sharding.PartitionSpec


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

  Engines take Tunix's rollout arguments (`rollout_actor`, `tokenizer`,
  `mesh`, `rollout_config`) plus one `EngineContext` (`context=`), which a
  `functools.partial` of the class supplies.

  Attributes:
    experimental: the engine has never run on the hardware it targets.
  """

  experimental: ClassVar[bool] = False

  @property
  @abc.abstractmethod
  def engine_mesh(self) -> jax.sharding.Mesh:
    """The mesh the engine's model and all its computations live on."""

  def param_shardings(self) -> Any:
    """Returns the layout the engine wants published parameters in.

    Returns:
      A tree with the structure of `nnx.state(model, nnx.Param)` whose leaves
      are `jax.sharding.NamedSharding`s on `engine_mesh`; usable directly as
      `out_shardings` of a jitted publication step. By default, the
      shardings of `publication_target()`.
    """
    return jax.tree.map(lambda s: s.sharding, self.publication_target())

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

  def retiring_params(self) -> dict[Any, jax.Array] | None:
    """The arrays the next `update_params` replaces, free to be overwritten.

    A publication may write the new parameters into these buffers (it
    donates them: `publication.Publisher`'s `reuse`), so that the engine's
    old weights and the new ones are never alive together. Only for an
    engine that installs published arrays as they are and holds them
    nowhere else; after the publication they are deleted, until
    `update_params` installs the new ones in their place.

    Returns:
      The current arrays of `publication_target()`'s parameters, by
      `tree_paths.ParamPath`; or None (the default): the engine keeps its
      arrays (e.g. it converts published weights into storage of its own).
    """
    return None

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


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class EngineContext:
  """What an engine gets beyond Tunix's rollout arguments.

  The multi-controller cluster builds one per host; recipes running the
  stock cluster with our engines build one too.

  Attributes:
    engine_mesh: the host-local mesh (Auto axis types) the engine runs on.
      None: Tunix's ROLLOUT `mesh`.
    row_ids: identities of the rows to generate; without them sampling is
      not placement-invariant (the engine counts rows and logs a warning).
    seed: base seed of the per-row sampling seeds. None: the rollout
      config's `seed` if it is an int, else 0.
    initial_model: a model already local to this process that the engine
      takes its first weights from (or takes over) instead of copying
      `rollout_actor`; global (multi-host) arrays cannot be copied onto one
      host's devices.
    reshard_on_update: let `update_params` lay out process-local parameters
      itself, as Tunix's stock `sync_weights` expects of a single-controller
      engine (the 'tunix' backend). Off under mcjax, where publication
      delivers the layout and a reshard would hide a mistake.
    source_mapping: with `reshard_on_update`, maps the trainer's flat
      parameters onto the engine's (an `EngineModelSpec.mapping`, e.g. a
      MaxText actor's). Only the native engine supports it.
  """

  engine_mesh: Mesh | None = None
  row_ids: RowIdSource | None = None
  seed: int | None = None
  # Not in repr: a whole model would flood logs.
  initial_model: Any = dataclasses.field(default=None, repr=False)
  reshard_on_update: bool = False
  source_mapping: Callable[[dict[str, Any]], dict[str, Any]] | None = None

  def __post_init__(self):
    if self.engine_mesh is not None and not isinstance(self.engine_mesh, Mesh):
      raise TypeError(
          f"engine_mesh must be a jax.sharding.Mesh; got {self.engine_mesh!r}."
      )
    if self.row_ids is not None and not isinstance(self.row_ids, RowIdSource):
      raise TypeError(
          f"row_ids must have a take(num_rows) method; got {self.row_ids!r}."
      )
    if self.seed is not None and (
        isinstance(self.seed, bool)
        or not isinstance(self.seed, (int, np.integer))
    ):
      raise TypeError(f"seed must be an int or None; got {self.seed!r}.")
    if not isinstance(self.reshard_on_update, bool):
      raise TypeError("reshard_on_update must be a bool; got"
                      f" {self.reshard_on_update!r}.")
    if self.source_mapping is not None:
      if not callable(self.source_mapping):
        raise TypeError("source_mapping must be callable.")
      if not self.reshard_on_update:
        raise ValueError(
            "source_mapping applies to parameters update_params lays out"
            " itself; it needs reshard_on_update=True (under mcjax the"
            " publisher maps)."
        )


# --- Helpers shared by engine implementations ---------------------------


@contextlib.contextmanager
def use_mesh(mesh: Mesh) -> Iterator[None]:
  """Makes `mesh` the current mesh for both of JAX's mesh contexts.

  `jax.set_mesh` alone is not enough: Tunix models (e.g. Qwen3's `shard`)
  read the legacy `pxla.thread_resources` mesh that only `with mesh:` sets,
  and `RLCluster` enters its (global) role mesh that way around every rollout
  call. Without overriding both, the model's sharding constraints would name
  the global mesh inside a host-local computation ("incompatible devices").

  Args:
    mesh: the mesh to make current.

  Yields:
    Nothing; the mesh is current inside the `with` block.
  """
  with contextlib.ExitStack() as stack:
    if hasattr(jax, "set_mesh"):
      stack.enter_context(jax.set_mesh(mesh))
    elif hasattr(jax.sharding, "use_mesh"):
      stack.enter_context(jax.sharding.use_mesh(mesh))
    with warnings.catch_warnings():
      # `with mesh:` is deprecated in favour of `jax.set_mesh`, but it is the
      # only way to set the mesh Tunix's models read.
      warnings.simplefilter("ignore", DeprecationWarning)
      try:
        stack.enter_context(mesh)
      except RuntimeError:
        # jax_disallow_mesh_context_manager is set: then nobody else can have
        # entered a legacy mesh context either.
        pass
    yield


class CounterRowIds:
  """Fallback row identities: a running counter (not placement-invariant)."""

  def __init__(self):
    self._next = 0

  def take(self, num_rows: int) -> np.ndarray:
    rows = np.arange(self._next, self._next + num_rows, dtype=np.int64)
    self._next += num_rows
    return np.stack([rows, np.zeros_like(rows)], axis=1)


def default_seed(
    rollout_config: base_rollout.RolloutConfig | None,
    seed: int | None = None,
) -> int:
  """`seed`, else RolloutConfig.seed when it is an int, else 0."""
  if seed is not None:
    return int(seed)
  seed = None if rollout_config is None else rollout_config.seed
  if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
    return int(seed)
  return 0


def engine_mesh_and_source(
    engine: str,
    context: EngineContext,
    *,
    mesh: Mesh | None,
    rollout_actor: Any,
) -> tuple[Mesh, Any]:
  """The checked engine mesh (default: Tunix's ROLLOUT `mesh`) and the model
  to take the first weights from (`initial_model`, else `rollout_actor`)."""
  engine_mesh = mesh if context.engine_mesh is None else context.engine_mesh
  if engine_mesh is None:
    raise ValueError(f"{engine} needs `context.engine_mesh` (or `mesh`).")
  check_engine_mesh(engine_mesh)
  source = (
      rollout_actor if context.initial_model is None
      else context.initial_model
  )
  if source is None:
    raise ValueError(
        f"{engine} needs `rollout_actor` or `context.initial_model`."
    )
  return engine_mesh, source


def row_ids_or_counter(engine: str, row_ids: RowIdSource | None, *,
                       process_count: int | None = None) -> RowIdSource:
  """`row_ids`, or (single process only, with a warning) a counter.

  Args:
    engine: The engine's name, for messages.
    row_ids: The context's row-id source, or None.
    process_count: Processes in the job; None: `jax.process_count()`.

  Raises:
    ValueError: no `row_ids` in a multi-process (mcjax) job, where a
      per-host counter would key the same row differently on every
      placement.
  """
  if row_ids is not None:
    return row_ids
  if process_count is None:
    process_count = jax.process_count()
  if process_count > 1:
    raise ValueError(
        f"{engine} has no row-id source in a {process_count}-process"
        " job: sampling keys would come from a per-host counter, so samples"
        " would depend on how rows are split across hosts. Pass"
        " EngineContext(row_ids=...) (McJaxRLCluster passes its admission"
        " ledger; build the engine through the cluster)."
    )
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


def close(engine: Any) -> None:
  """Frees what `engine` holds outside JAX, where it has a `close` (vLLM:
  its worker processes, their shared memory, its temp dir). Tunix's
  clusters never close their rollout, so the job that made one calls this
  when it ends."""
  getattr(engine, "close", lambda: None)()


def engine_tp(mesh: Mesh) -> int:
  """The engine's tensor-parallel degree: the size of the mesh's last axis.

  `runtime.local_mesh(tp=N)` puts tp on the last axis and the host's data
  parallelism on the others; a one-axis mesh is purely data-parallel.
  """
  return int(mesh.devices.shape[-1]) if mesh.devices.ndim >= 2 else 1


def row_axes(mesh: Mesh) -> tuple[str, ...]:
  """The mesh axes an engine shards its rows over (data parallelism).

  Every axis with engine tp 1 (the same layout as the data axes alone, and
  the one every engine used before engine tp); else all but the tp axis.
  """
  names = tuple(mesh.axis_names)
  return names if engine_tp(mesh) == 1 else names[:-1]


def tp_spec(spec: PartitionSpec, shape: tuple[int, ...], mesh: Mesh
            ) -> PartitionSpec:
  """`spec` (a model's annotation) kept on the engine's tp axis only.

  An engine holds one replica of its parameters per tp group: dimensions
  the model shards over its data axes (e.g. "fsdp") are replicated, those
  on the tp axis stay split. A dimension tp does not divide is replicated
  (e.g. an odd vocabulary), which changes the layout, not the values.
  With engine tp 1 the result is fully replicated.
  """
  tp = engine_tp(mesh)
  if tp == 1:
    return PartitionSpec()
  axis = mesh.axis_names[-1]
  entries = []
  for i, entry in enumerate(tuple(spec)[:len(shape)]):
    names = entry if isinstance(entry, tuple) else (entry,)
    keep = axis in names and shape[i] % tp == 0
    entries.append(axis if keep else None)
  while entries and entries[-1] is None:
    entries.pop()
  return PartitionSpec(*entries)


def param_shardings(tree: Any, mesh: Mesh) -> Any:
  """The engine layout of a model state on `mesh`, from its annotations.

  Args:
    tree: an `nnx.State` (or nested dict) of `nnx.Variable`s or arrays;
      Variables carry the model's sharding annotations (Tunix's Qwen3:
      ("fsdp", "tp") names), plain arrays have none.
    mesh: the engine mesh (`runtime.local_mesh(tp=N)`).

  Returns:
    `tree` with a NamedSharding on `mesh` in place of every array (`tp_spec`
    of its annotation); other leaves as they are.
  """
  def one(x: Any) -> Any:
    if isinstance(x, nnx.Variable):
      value = x.get_value()
      spec = nnx_spmd.get_var_pspec(x) or PartitionSpec()
    else:
      value, spec = x, PartitionSpec()
    shape = getattr(value, "shape", None)
    if shape is None:
      return x
    sharding = NamedSharding(mesh, tp_spec(spec, tuple(shape), mesh))
    return x.replace(sharding) if isinstance(x, nnx.Variable) else sharding

  return jax.tree.map(one, tree,
                      is_leaf=lambda x: isinstance(x, nnx.Variable))


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


def local_rows_2d(x: Any, name: str) -> np.ndarray | jax.Array:
  """This host's (B, T) rows: a host-local jax.Array as it is, else numpy;
  refuses global arrays."""
  if isinstance(x, jax.Array) and x.is_fully_addressable:
    if x.ndim != 2:
      raise ValueError(f"{name} must have shape (B, T); got {x.shape}.")
    return x
  return host_rows(x, name)


def pad_rows(x: np.ndarray | jax.Array, num_pad: int) -> Any:
  """`x` with its last row repeated `num_pad` times, where `x` lives."""
  if isinstance(x, jax.Array):
    last = jax.lax.slice_in_dim(x, x.shape[0] - 1, x.shape[0], axis=0)
    return jax.numpy.concatenate(
        [x, jax.numpy.broadcast_to(last, (num_pad, *x.shape[1:]))], axis=0)
  return np.concatenate([x, np.repeat(x[-1:], num_pad, 0)])


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
