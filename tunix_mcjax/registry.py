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

"""Name -> factory registries for cluster backends and rollout engines.

Backends and engines are chosen by name (`--backend=mcjax`, `--engine=vllm`),
never by if-chains in callers. Built-in entries register themselves on import;
third parties can add entries through Python entry points (see pyproject.toml,
group `tunix.rl_cluster_backends`), which are loaded lazily on first miss.
"""

from __future__ import annotations

from collections.abc import Callable
import importlib.metadata
from typing import Generic, TypeVar

_F = TypeVar("_F", bound=Callable[..., object])


class Registry(Generic[_F]):
  """A small name -> factory registry with entry-point discovery."""

  def __init__(self, kind: str, entry_point_group: str | None = None):
    self._kind = kind
    self._group = entry_point_group
    self._factories: dict[str, _F] = {}
    self._entry_points_loaded = False

  def register(self, name: str) -> Callable[[_F], _F]:
    """Decorator registering `factory` under `name` (names are unique)."""

    def deco(factory: _F) -> _F:
      if name in self._factories and self._factories[name] is not factory:
        raise ValueError(f"{self._kind} {name!r} is already registered.")
      self._factories[name] = factory
      return factory

    return deco

  def _load_entry_points(self) -> None:
    if self._entry_points_loaded or self._group is None:
      return
    self._entry_points_loaded = True
    for ep in importlib.metadata.entry_points(group=self._group):
      if ep.name not in self._factories:
        self._factories[ep.name] = ep.load()

  def get(self, name: str) -> _F:
    if name not in self._factories:
      self._load_entry_points()
    try:
      return self._factories[name]
    except KeyError:
      raise ValueError(
          f"Unknown {self._kind} {name!r}; choose one of {self.names()}."
      ) from None

  def names(self) -> list[str]:
    self._load_entry_points()
    return sorted(self._factories)


BACKENDS: Registry[Callable[..., object]] = Registry(
    "cluster backend", "tunix.rl_cluster_backends"
)
ENGINES: Registry[Callable[..., object]] = Registry(
    "rollout engine", "tunix_mcjax.rollout_engines"
)
