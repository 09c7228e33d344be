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

"""Built-in cluster backends, registered by name.

- "tunix": Tunix's stock, single-controller `RLCluster` (Pathways or one
  process), exactly as constructed by a stock recipe.
- "mcjax": `McJaxRLCluster`, one process per host.

Both take `RLCluster`'s keyword arguments; "mcjax" also takes `options`.
"""

from __future__ import annotations

from typing import Any

from tunix_mcjax.registry import BACKENDS


@BACKENDS.register("tunix")
def create_tunix_cluster(**kwargs: Any) -> Any:
  if "options" in kwargs:
    raise TypeError(
        "`options` configures the mcjax backend; the stock 'tunix' backend"
        " takes RLCluster's arguments only."
    )
  from tunix_mcjax import compat  # pylint: disable=g-import-not-at-top

  return compat.RLCluster(**kwargs)


@BACKENDS.register("mcjax")
def create_mcjax_cluster(**kwargs: Any) -> Any:
  from tunix_mcjax import cluster  # pylint: disable=g-import-not-at-top

  return cluster.McJaxRLCluster(**kwargs)


def _initialize_mcjax_runtime() -> None:
  from tunix_mcjax import runtime  # pylint: disable=g-import-not-at-top

  runtime.initialize()


# Hook for trainers that start JAX themselves (MaxText's train_rl with
# maxtext_patches/0003): one process per host, jax.distributed started the
# way tunix_mcjax.runtime detects (local launcher, cluster, single host).
create_mcjax_cluster.initialize_runtime = _initialize_mcjax_runtime
