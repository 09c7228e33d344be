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

"""How tunix_mcjax names the leaves of parameter trees (one convention).

A parameter of `nnx.state(model, nnx.Param)` (or of a nested dict, or of an
engine state) has three names, all derived here from its JAX tree path:

- its path (`ParamPath`): the tuple of plain keys, without the trailing
  `.value` of an nnx Variable, e.g. `("layers", 0, "attn", "q_proj", "w")`;
  the keys of `nnx.to_pure_dict`. Engines index their parameters by it, and
  `nest` rebuilds a one-parameter tree from it.
- its dotted name: `"layers.0.attn.q_proj.w"`, for messages and for plans
  keyed by name (the tpu-inference writer).
- its keystr: `jax.tree_util.keystr` of the raw tree path, e.g.
  `"['layers'][0]['attn']['q_proj']['w'].value"`: the names publication
  and `EngineModelSpec.mapping` work with.
"""

from __future__ import annotations

from typing import Any

from flax import nnx
import jax

# A parameter's path: plain dict keys, sequence indices and attribute names.
ParamPath = tuple[Any, ...]

# Attribute names under which nnx Variables expose their array to JAX.
_VALUE_ATTRS = ("value", "raw_value")


def key_part(k: Any) -> Any:
  """One JAX path entry (DictKey, SequenceKey, GetAttrKey, ...) as a key."""
  for attr in ("key", "idx", "name"):
    if hasattr(k, attr):
      return getattr(k, attr)
  return str(k)


def param_path(key_path: tuple[Any, ...]) -> ParamPath:
  """A JAX tree path as a `ParamPath` (a Variable's `.value` dropped)."""
  if key_path and isinstance(key_path[-1], jax.tree_util.GetAttrKey) and (
      key_path[-1].name in _VALUE_ATTRS
  ):
    key_path = key_path[:-1]
  return tuple(key_part(k) for k in key_path)


def dotted(path: ParamPath) -> str:
  """'layers.0.attn.q_proj.w': a `ParamPath` as one readable string."""
  return ".".join(str(p) for p in path)


def nest(path: ParamPath, value: Any) -> Any:
  """The nested dict holding `value` at `path` (one-parameter updates)."""
  for key in reversed(path):
    value = {key: value}
  return value


def _is_variable(x: Any) -> bool:
  return isinstance(x, nnx.Variable)


def _variable_value(v: nnx.Variable) -> Any:
  # flax >= 0.12 deprecates `.value` in favour of `get_value()`.
  return v.get_value() if hasattr(v, "get_value") else v.value


def flat_params(tree: Any) -> dict[ParamPath, Any]:
  """The arrays of an nnx.State / nested dict (of Variables) by `ParamPath`.

  In the order of `jax.tree.leaves(tree)`; Variables are unwrapped.
  """
  flat = jax.tree_util.tree_flatten_with_path(tree, is_leaf=_is_variable)[0]
  return {
      param_path(p): _variable_value(v) if _is_variable(v) else v
      for p, v in flat
  }


def param_paths(tree: Any) -> list[ParamPath]:
  """The `ParamPath` of every leaf of `tree`, in leaf order."""
  return [
      param_path(p)
      for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]
  ]


def flat_dotted(tree: Any) -> tuple[dict[str, Any], Any, list[str]]:
  """The leaves of `tree` by dotted name, its treedef and the names in order.

  Raises:
    ValueError: if two leaves get the same name.
  """
  leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
  names = [dotted(param_path(p)) for p, _ in leaves]
  if len(set(names)) != len(names):
    dupes = sorted({n for n in names if names.count(n) > 1})
    raise ValueError(f"Parameter names are not unique: {dupes[:5]}.")
  return {n: x for n, (_, x) in zip(names, leaves)}, treedef, names


def flat_by_keystr(tree: Any) -> dict[str, Any]:
  """The leaves of `tree` by `jax.tree_util.keystr` of their path."""
  leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
  return {jax.tree_util.keystr(path): leaf for path, leaf in leaves}
