# Copyright 2026 The tunix_mcjax Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""Multi-controller (one process per host) JAX RL backend for Tunix.

Submodules are imported explicitly (e.g. `from tunix_mcjax import runtime`)
so that importing the package stays cheap and never initializes JAX.
"""

from typing import Any

__all__ = ["create_rl_cluster", "backend_names"]


def create_rl_cluster(backend: str, **kwargs: Any) -> Any:
  """Creates an RL cluster of the named backend ("tunix" or "mcjax").

  Takes the keyword arguments of Tunix's `RLCluster` (actor, reference,
  tokenizer, cluster_config, ...); the result drives Tunix's stock learners.

  Args:
    backend: a registered backend name, see `backend_names()`.
    **kwargs: forwarded to the backend.
  """
  from tunix_mcjax import backends  # pylint: disable=g-import-not-at-top,unused-import
  from tunix_mcjax.registry import BACKENDS  # pylint: disable=g-import-not-at-top

  return BACKENDS.get(backend)(**kwargs)


def backend_names() -> list[str]:
  from tunix_mcjax import backends  # pylint: disable=g-import-not-at-top,unused-import
  from tunix_mcjax.registry import BACKENDS  # pylint: disable=g-import-not-at-top

  return BACKENDS.names()
