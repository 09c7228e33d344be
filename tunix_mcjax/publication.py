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

"""Publication: the trainer's FSDP state into every host's local engine.

One cached, jitted identity (with an optional dtype cast) whose outputs live
on a (host, *local axes) view of the global devices and are replicated over
"host": XLA lowers it to one all-gather over the interconnect. Each host then
re-wraps its own output shards as arrays on its local engine mesh with
`jax.make_array_from_single_device_arrays` (no copy), and hands the whole tree
to the engine in one call.

`jax.device_put` cannot do this: it cannot move a global array onto a mesh of
one host's devices in a multi-controller program.

`Publisher.publish_each` is the per-parameter baseline of optimization O4:
one cached jitted gather and one delivery (engine update call) per
parameter, in a fixed order on every host.

Memory: on CPU the all-gather moves narrow floats as raw bits
(`gather_bits`): XLA:CPU runs a bfloat16 all-gather in float32, which made
a Qwen3-0.6B publication hold 2.04 GiB of float32 temporaries beside its
1.11 GiB of output (0.70 GiB as bits). And a publication can write into the
buffers of the engine's previous weights (`reuse`, donated), so that the
old and the new copy are never alive together.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import time
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec
import numpy as np

from tunix_mcjax import runtime
from tunix_mcjax import tree_paths

PyTree = Any


@dataclasses.dataclass(frozen=True, kw_only=True)
class PublicationStats:
  """What one publication moved and how long it took on this host."""

  num_params: int
  bytes: int  # Size of one full copy of the published parameters.
  seconds: float


# `tree`'s leaves by keystr: the names publication and mappings use.
flat_by_name = tree_paths.flat_by_keystr


def gather_bits(x: jax.Array, sharding: NamedSharding) -> jax.Array:
  """`x` resharded to `sharding` (inside jit), as raw bits where that helps.

  XLA:CPU has no collectives on floats narrower than 32 bits: it converts
  the shards up to float32, gathers those and converts back. On CPU such an
  `x` therefore crosses the reshard as the unsigned integer of its width
  (bitcast, never converted): no value is touched and no float32 copy is
  made. Accelerators gather narrow floats natively; there `x` is resharded
  as it is. The optimization barrier keeps the partitioner from moving the
  collective before the first bitcast (onto `x` itself).
  """
  platform = next(iter(sharding.device_set)).platform
  if (platform != "cpu" or not jnp.issubdtype(x.dtype, jnp.floating)
      or x.dtype.itemsize >= 4):
    return jax.lax.with_sharding_constraint(x, sharding)
  bits = jnp.dtype(f"uint{8 * x.dtype.itemsize}")
  moved = jax.lax.with_sharding_constraint(
      jax.lax.optimization_barrier(jax.lax.bitcast_convert_type(x, bits)),
      sharding)
  return jax.lax.bitcast_convert_type(moved, x.dtype)


def host_view_mesh(local_mesh: Mesh) -> Mesh:
  """All devices as (host, *local_mesh.shape), hosts in process order.

  Every host's block is laid out exactly like its own `local_mesh`, so an
  output sharded over the local axes lands on each host in the engine's
  layout.
  """
  devices = runtime.host_contiguous_devices()
  hosts = sorted({d.process_index for d in devices})
  local_shape = local_mesh.devices.shape
  view = np.array(devices, dtype=object).reshape(len(hosts), *local_shape)
  mine = view[hosts.index(jax.process_index())]
  if [d.id for d in mine.flat] != [d.id for d in local_mesh.devices.flat]:
    raise ValueError(
        "The engine mesh must list this host's devices in"
        " runtime.local_mesh()'s order (physical order within the host,"
        f" ids {[d.id for d in mine.flat]}); got"
        f" {[d.id for d in local_mesh.devices.flat]}. Build it with"
        " runtime.local_mesh()."
    )
  return Mesh(view, (runtime.HOST_AXIS, *local_mesh.axis_names))


class Publisher:
  """Publishes a trainer state into an engine's per-host layout.

  Attributes:
    last_stats: stats of the latest call, or None before the first.
  """

  def __init__(
      self,
      *,
      dst: PyTree,
      local_mesh: Mesh,
      mapping: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
  ):
    """Prepares the cached all-gather.

    Args:
      dst: the engine's parameter tree (arrays or jax.ShapeDtypeStruct with a
        NamedSharding on `local_mesh`); defines names, shapes, dtypes and the
        layout to publish into.
      local_mesh: this host's engine mesh.
      mapping: optional renaming/restacking of the flat trainer state (keys
        from jax.tree_util.keystr) into the engine's flat names, applied to
        abstract values as well, e.g. MaxText's scanned layers.
    """
    self._dst_names = list(flat_by_name(dst))
    # Only what each leaf looks like: holding the engine's arrays would keep
    # its first copy alive after publications replace it.
    dst = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(
            x.shape, x.dtype, sharding=getattr(x, "sharding", None)), dst)
    self._dst_leaves, self._dst_treedef = jax.tree_util.tree_flatten(dst)
    self._mapping = mapping
    self._local_mesh = local_mesh
    view = host_view_mesh(local_mesh)
    self._dst_shardings = []
    self._gather_shardings = []
    for name, leaf in zip(self._dst_names, self._dst_leaves):
      sharding = getattr(leaf, "sharding", None)
      if not isinstance(sharding, NamedSharding) or (
          sharding.mesh.devices.tolist() != local_mesh.devices.tolist()
      ):
        raise ValueError(
            f"Engine parameter {name} must have a NamedSharding on the"
            f" engine's local mesh; got {sharding}."
        )
      self._dst_shardings.append(sharding)
      self._gather_shardings.append(NamedSharding(view, sharding.spec))
    dtypes = [leaf.dtype for leaf in self._dst_leaves]
    names = list(self._dst_names)
    gather_shardings = list(self._gather_shardings)

    def program(flat: dict[str, jax.Array]) -> list[jax.Array]:
      # The mapping (renames, unstacking a scanned layer axis) traces into
      # this one program, so it costs no extra dispatches. The cast to the
      # engine's dtype happens on the shard, before the gather.
      if mapping is not None:
        flat = mapping(flat)
      return [gather_bits(flat[n].astype(dt), gs)
              for n, dt, gs in zip(names, dtypes, gather_shardings)]

    self._gather = jax.jit(program, out_shardings=self._gather_shardings)
    # The same gather, writing into the buffers of the engine's previous
    # parameters (`__call__`'s `reuse`), which it is given (donated): the
    # new copy takes their place instead of arriving beside them. Unused
    # but kept, so that XLA aliases each output to its donated input.
    self._gather_into = jax.jit(
        lambda flat, old: program(flat),
        out_shardings=self._gather_shardings, donate_argnums=1,
        keep_unused=True)
    # Names of the latest source structure's leaves (`_flat`).
    self._src_treedef: Any = None
    self._src_names: list[str] = []
    # Source signatures already checked against the engine's parameters.
    self._checked: set[tuple[Any, ...]] = set()
    # Per-parameter gathers (the O4 baseline), built on first use.
    self._gather_each: list[Callable[[jax.Array], jax.Array]] | None = None
    self._bytes = int(
        sum(np.prod(l.shape) * np.dtype(l.dtype).itemsize
            for l in self._dst_leaves)
    )
    self.last_stats: PublicationStats | None = None

  def _check_sources(self, flat: dict[str, Any]) -> None:
    """Raises unless `flat` maps onto exactly the engine's parameters."""
    signature = tuple((k, v.shape, v.dtype) for k, v in flat.items())
    if signature in self._checked:
      return
    mapped = flat
    if self._mapping is not None:
      mapped = jax.eval_shape(self._mapping, flat)
    missing = [n for n in self._dst_names if n not in mapped]
    if missing:
      raise KeyError(
          f"Trainer state lacks engine parameter {missing[0]}"
          f" ({len(missing)} missing in all)."
      )
    extra = sorted(set(mapped) - set(self._dst_names))
    if extra:
      raise KeyError(
          f"Trainer parameter {extra[0]} has no place in the engine"
          f" ({len(extra)} unmatched in all); nothing is dropped silently."
      )
    for name, leaf in zip(self._dst_names, self._dst_leaves):
      if tuple(mapped[name].shape) != tuple(leaf.shape):
        raise ValueError(
            f"Parameter {name}: trainer shape {tuple(mapped[name].shape)} !="
            f" engine shape {tuple(leaf.shape)}."
        )
    self._checked.add(signature)

  def _ordered_sources(self, src: PyTree) -> list[jax.Array]:
    """The engine's parameters in `names` order (mapping applied eagerly)."""
    flat = flat_by_name(src)
    self._check_sources(flat)
    if self._mapping is not None:
      flat = self._mapping(flat)
    return [flat[name] for name in self._dst_names]

  @property
  def names(self) -> list[str]:
    """Engine parameter names (jax.tree_util.keystr), in publication order."""
    return list(self._dst_names)

  def _to_local(self, x: jax.Array, sharding: NamedSharding) -> jax.Array:
    # This host's shards of the gathered array are exactly the engine's
    # layout on its local mesh: re-wrap them, no copy.
    return jax.make_array_from_single_device_arrays(
        x.shape, sharding, [s.data for s in x.addressable_shards]
    )

  def _flat(self, src: PyTree) -> dict[str, Any]:
    """`src`'s leaves by name; the names are computed once per tree
    structure (a step publishes the same structure every time)."""
    leaves, treedef = jax.tree_util.tree_flatten(src)
    if self._src_treedef is None or treedef != self._src_treedef:
      self._src_names = list(flat_by_name(src))
      self._src_treedef = treedef
    return dict(zip(self._src_names, leaves))

  def _reusable(self, reuse: PyTree) -> list[jax.Array]:
    """`reuse`'s arrays as global arrays in the gather's layout (no copy).

    Each host's buffers of a parameter in the engine's layout are its shards
    of the gather's output, so they can be handed to the gather as the
    buffers to write into.
    """
    leaves = jax.tree.leaves(reuse)
    if len(leaves) != len(self._dst_names):
      raise ValueError(
          f"reuse has {len(leaves)} arrays; the engine has"
          f" {len(self._dst_names)} parameters.")
    out = []
    for name, x, leaf, local, gather in zip(
        self._dst_names, leaves, self._dst_leaves, self._dst_shardings,
        self._gather_shardings):
      if (not isinstance(x, jax.Array) or x.shape != leaf.shape
          or x.dtype != leaf.dtype
          or not x.sharding.is_equivalent_to(local, x.ndim)):
        raise ValueError(
            f"reuse's {name} is not an array in the engine's layout"
            f" ({leaf.shape}, {leaf.dtype}, {local}).")
      out.append(jax.make_array_from_single_device_arrays(
          x.shape, gather, [s.data for s in x.addressable_shards]))
    return out

  def memory_analysis(self, src: PyTree, *, reuse: bool = True) -> Any:
    """XLA's memory plan of one publication of `src` (compiled, not run).

    Args:
      src: the trainer state, as for `__call__` (arrays or
        `jax.ShapeDtypeStruct`s with their shardings).
      reuse: the plan of a publication given the engine's previous
        parameters to write into (`__call__`'s `reuse`); False: of one that
        allocates the new ones beside them.

    Returns:
      The compiled program's `memory_analysis()`, per device:
      `temp_size_in_bytes` (what the gather holds besides its inputs and
      outputs), `output_size_in_bytes`, `alias_size_in_bytes` (output bytes
      written into donated buffers).
    """
    flat = self._flat(src)
    if not reuse:
      return self._gather.lower(flat).compile().memory_analysis()
    old = [jax.ShapeDtypeStruct(l.shape, l.dtype, sharding=g)
           for l, g in zip(self._dst_leaves, self._gather_shardings)]
    return self._gather_into.lower(flat, old).compile().memory_analysis()

  def __call__(self, src: PyTree, *, wait: bool = True,
               reuse: PyTree | None = None) -> PyTree:
    """Returns `src` gathered into the engine's layout on this host.

    Args:
      src: the trainer state (global arrays).
      wait: wait for the gather to finish (then `last_stats.seconds` is the
        publication's time). A training step does not: the engine's next
        program waits on its inputs anyway, and the host goes on meanwhile
        (then `seconds` is the dispatch time; except in a multi-process
        job on CPU, `runtime.order_collectives`).
      reuse: the engine's current parameters (this host's arrays in the
        engine's layout: a tree like `dst`, or its leaves in `names`
        order), which the new ones replace: their buffers are
        donated to the gather, which writes the new parameters into them,
        so no second copy of the engine's weights is ever alive. They are
        deleted: the caller installs the returned tree in their place
        before anything reads the engine's weights again.
    """
    t0 = time.perf_counter()
    flat = self._flat(src)
    self._check_sources(flat)
    if reuse is None:
      gathered = self._gather(flat)
    else:
      gathered = self._gather_into(flat, self._reusable(reuse))
    local = [
        self._to_local(x, sharding)
        for x, sharding in zip(gathered, self._dst_shardings)
    ]
    if wait:
      jax.block_until_ready(local)
    else:
      runtime.order_collectives(local)
    self.last_stats = PublicationStats(
        num_params=len(local),
        bytes=self._bytes,
        seconds=time.perf_counter() - t0,
    )
    return jax.tree_util.tree_unflatten(self._dst_treedef, local)

  def publish_each(
      self, src: PyTree, deliver: Callable[[int, jax.Array], None]
  ) -> int:
    """Publishes parameter by parameter (the O4 baseline).

    For each engine parameter in `names` order: one jitted all-gather of that
    parameter, then `deliver(index, local_array)` (e.g. one engine update
    call), before the next parameter is gathered. Every host must call this
    at the same point (each gather is a cross-host collective).

    Args:
      src: the trainer state, as for `__call__`.
      deliver: called once per parameter with its index in `names` and the
        parameter in the engine's layout on this host.

    Returns:
      The number of `deliver` calls.
    """
    t0 = time.perf_counter()
    sources = self._ordered_sources(src)
    if self._gather_each is None:
      self._gather_each = [
          jax.jit(
              lambda x, dt=leaf.dtype, s=sharding: gather_bits(
                  x.astype(dt), s),
              out_shardings=sharding,
          )
          for leaf, sharding in zip(self._dst_leaves, self._gather_shardings)
      ]
    for i, (x, gather, sharding) in enumerate(
        zip(sources, self._gather_each, self._dst_shardings)
    ):
      local = self._to_local(gather(x), sharding)
      jax.block_until_ready(local)
      deliver(i, local)
    self.last_stats = PublicationStats(
        num_params=len(sources),
        bytes=self._bytes,
        seconds=time.perf_counter() - t0,
    )
    return len(sources)


def gathered_params(model: Any) -> dict[str, np.ndarray]:
  """Every parameter of `model` as a full numpy array on every host, by
  name (a collective: every host calls it). For dumps, not publication."""
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top

  return jax.tree.map(
      np.asarray,
      multihost_utils.process_allgather(
          flat_by_name(nnx.state(model, nnx.Param)), tiled=True),
  )


def replicated_like(tree: PyTree, mesh: Mesh, dtype: Any = None) -> PyTree:
  """Abstract copy of `tree`, replicated on `mesh` (the native engine's
  layout with engine tp 1; `engine_layout_like` for any tp)."""
  sharding = NamedSharding(mesh, PartitionSpec())
  return jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(
          x.shape, dtype or x.dtype, sharding=sharding
      ),
      tree,
  )


def engine_layout_like(tree: PyTree, mesh: Mesh, dtype: Any = None) -> PyTree:
  """Abstract copy of a model state in the native engine's layout on `mesh`.

  Split over the engine's tp axis as the state's annotations say, replicated
  over its data axes (`engines.base.param_shardings`); with engine tp 1 the
  same as `replicated_like`.
  """
  from tunix_mcjax.engines import base as engine_base  # pylint: disable=g-import-not-at-top

  return jax.tree.map(
      lambda x, sharding: jax.ShapeDtypeStruct(
          x.shape, dtype or x.dtype, sharding=sharding
      ),
      tree,
      engine_base.param_shardings(tree, mesh),
  )


def build_engine_model(
    spec: Any, actor_params: PyTree, local_mesh: Mesh, dtype: Any = None
) -> Any:
  """The engine's model of `spec`, holding the actor's parameters.

  The parameters arrive through a `Publisher` (the same program as every
  later publication), in the engine layout on `local_mesh`
  (`engine_layout_like`); call on every host.

  Args:
    spec: an `engines.base.EngineModelSpec`.
    actor_params: `nnx.state(actor, nnx.Param)` (global arrays).
    local_mesh: this host's engine mesh.
    dtype: the engine's parameter dtype; None keeps the model's.

  Returns:
    The engine model (an `nnx.Module`) on `local_mesh`.
  """
  from flax import nnx  # pylint: disable=g-import-not-at-top

  abstract = nnx.eval_shape(spec.create)
  graphdef, state = nnx.split(abstract)
  publisher = Publisher(
      dst=engine_layout_like(state, local_mesh, dtype),
      local_mesh=local_mesh,
      mapping=spec.mapping,
  )
  return nnx.merge(graphdef, publisher(actor_params))
