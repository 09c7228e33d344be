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

"""The private JAX names `tunix_mcjax.runtime` reads before start-up.

JAX keeps its cluster auto-detection and its backend state in `jax._src`:
`runtime` asks which cluster `jax.distributed.initialize` would detect (to
refuse a local simulation on a real cluster) and whether a backend has
started (the CPU device count and the distributed service are fixed then).
Each reach is one function here that answers "unknown" (None, or no hint)
when a JAX version has moved the name, and one row of
`touch_points.TOUCH_POINTS`. Upstream: a public detection API in
`jax.distributed` and a public "backend started" query.

Importing this module imports no JAX (runtime's import stays JAX-free).
"""

from __future__ import annotations

from collections.abc import Callable


def cluster_detectors() -> list[tuple[str, Callable[[], bool]]] | None:
  """(name, probe) of each cluster detector JAX would try, in its order.

  JAX's registered `ClusterEnv` subclasses and their `is_env_present`;
  opt-in ones (mpi4py) are left out, since they claim any machine that
  merely has their package. None where this JAX has no such registry
  (detection then says "no cluster").
  """
  try:
    from jax._src import clusters  # pylint: disable=g-import-not-at-top

    types = list(clusters.ClusterEnv._cluster_types)  # pylint: disable=protected-access
  except (ImportError, AttributeError):
    return None
  return [(cls.__name__, cls.is_env_present) for cls in types
          if not getattr(cls, "opt_in_only_method", False)]


def running_in_cloud_tpu_vm() -> bool:
  """Whether JAX believes this machine is a Cloud TPU VM (False if unknown)."""
  try:
    from jax._src import cloud_tpu_init  # pylint: disable=g-import-not-at-top
  except ImportError:
    return False
  return bool(getattr(cloud_tpu_init, "running_in_cloud_tpu_vm", False))


def backends_are_initialized() -> bool | None:
  """Whether this process has started a JAX backend; None if JAX cannot say."""
  try:
    from jax._src import xla_bridge  # pylint: disable=g-import-not-at-top

    return bool(xla_bridge.backends_are_initialized())
  except (ImportError, AttributeError):
    return None
