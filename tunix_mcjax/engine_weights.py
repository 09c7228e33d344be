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

"""The cluster's side of publication: what reaches this host's engine.

The engine's first model is the whole actor, through the same all-gather
that publishes every later update (`initial_model`). After that only what
trains is published (`EngineWeights`): every parameter, or a LoRA actor's
adapters (as stock Tunix's sync_weights filters by nnx.LoRAParam), in one
engine update call (O4) or one per parameter. The gather itself is
`publication.Publisher`'s. A one-call publication into an engine that
installs the arrays as they are (`Engine.retiring_params`: the native
engine) writes the new weights into the buffers of the ones they replace,
so a host never holds two copies of its engine's weights.
"""

from __future__ import annotations

from typing import Any

from flax import nnx
import jax
from jax.sharding import Mesh

from tunix_mcjax import publication
from tunix_mcjax import tree_paths
from tunix_mcjax.engines import base as engine_base


def initial_model(actor: nnx.Module,
                  spec: engine_base.EngineModelSpec | None,
                  local_mesh: Mesh, dtype: Any) -> nnx.Module:
  """The engine's first model on this host, gathered from the actor.

  Args:
    actor: the trainer's actor (global arrays).
    spec: the engine's own architecture and the mapping into it
      (`McJaxOptions.engine_model`); None: a copy of the actor.
    local_mesh: this host's engine mesh.
    dtype: the rollout config's `data_type` (None: the actor's).
  """
  if spec is not None:
    return publication.build_engine_model(
        spec, nnx.state(actor, nnx.Param), local_mesh, dtype)
  graphdef, full_state = nnx.split(actor)
  publisher = publication.Publisher(
      dst=publication.engine_layout_like(full_state, local_mesh, dtype),
      local_mesh=local_mesh,
  )
  return nnx.merge(graphdef, publisher(full_state))


class TrainedState:
  """`nnx.state(model, filter)` each step, without walking the graph.

  Flax's graph walk costs ~0.1 ms per parameter (35 ms a step for
  Qwen3-0.6B's 310, on the host, in every step's publication). The model's
  structure does not change between steps, only its arrays: the first call
  walks the graph once and records which of the model's pytree leaves are
  the state's; later calls flatten the model as a pytree and pick those
  leaves. Any change of the model's pytree structure falls back to the walk
  (and re-records); so does a model whose leaves are not distinct arrays
  (shared references), where positions would be ambiguous.
  """

  def __init__(self, param_filter: Any):
    self._filter = param_filter
    self._model_def: Any = None
    self._state_def: Any = None
    self._picks: list[int] | None = None

  def __call__(self, model: nnx.Module) -> nnx.State:
    if self._picks is not None:
      leaves, model_def = jax.tree.flatten(model)
      if model_def == self._model_def:
        return jax.tree.unflatten(self._state_def,
                                  [leaves[i] for i in self._picks])
    return self._record(model)

  def _record(self, model: nnx.Module) -> nnx.State:
    state = nnx.state(model, self._filter)
    self._picks = None
    try:
      leaves, self._model_def = jax.tree.flatten(model)
    except Exception:  # pylint: disable=broad-exception-caught
      return state  # Not a pytree here: always walk the graph.
    where = {id(x): i for i, x in enumerate(leaves)}
    state_leaves, self._state_def = jax.tree.flatten(state)
    picks = [where.get(id(x)) for x in state_leaves]
    if len(where) == len(leaves) and None not in picks:
      self._picks = picks
    return state


class EngineWeights:
  """Publishes what trains of the trainer's model into this host's engine."""

  def __init__(self, rollout: Any, *, local_mesh: Mesh,
               spec: engine_base.EngineModelSpec | None, lora_enabled: bool):
    """Builds the publisher onto the engine's publication target.

    Args:
      rollout: this host's engine (Tunix's rollout of the cluster).
      local_mesh: this host's engine mesh.
      spec: as in `initial_model`; its mapping renames the trainer's
        parameters into the engine's.
      lora_enabled: the actor is a LoRA model: only its adapters train.

    Raises:
      ValueError: the publication target does not flatten to one path per
        parameter.
    """
    self._rollout = rollout
    # The initial model carried the whole actor; from here on only what
    # trains changes: the adapters of a LoRA actor.
    self.param_filter = nnx.LoRAParam if lora_enabled else nnx.Param
    self._trained = TrainedState(self.param_filter)
    self.update_filter = (nnx.LoRAParam,) if lora_enabled else None
    target = rollout.publication_target()
    self.publisher = publication.Publisher(
        dst=target,
        local_mesh=local_mesh,
        mapping=None if spec is None else spec.mapping,
    )
    # Nested-dict paths of the engine parameters in publication order, for
    # the per-parameter (O4 baseline) engine update calls.
    self._param_paths = tree_paths.param_paths(target)
    if len(self._param_paths) != len(self.publisher.names):
      raise ValueError(
          "The engine's publication target does not flatten to one path per"
          " parameter."
      )

  def publish(self, model: nnx.Module, *, one_call: bool = True) -> int:
    """Publishes `model`'s trained parameters; returns the engine calls.

    Args:
      model: the trainer's model.
      one_call: O4: one all-gather program and one engine update for all
        weights; False: one of each per parameter.
    """
    src = self._trained(model)
    if one_call:
      self._rollout.update_params(
          self.publisher(src, wait=False, reuse=self._retiring()),
          filter_types=self.update_filter)
      return 1
    return self.publisher.publish_each(src, self._update_one_param)

  def _retiring(self) -> list[jax.Array] | None:
    """The engine's arrays this publication replaces, in publication order,
    when the engine lets the gather write into them (`retiring_params`)."""
    retiring = getattr(self._rollout, "retiring_params", None)
    flat = None if retiring is None else retiring()
    if flat is None:
      return None
    return [flat[path] for path in self._param_paths]

  def _update_one_param(self, index: int, value: jax.Array) -> None:
    """One engine update call carrying one parameter (O4 baseline)."""
    self._rollout.update_params(
        tree_paths.nest(self._param_paths[index], value),
        filter_types=(self.param_filter,),
    )
