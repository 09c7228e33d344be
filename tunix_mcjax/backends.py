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
- "mcjax_da": `da.cluster.McJaxDaRLCluster`, the trainer hosts of the
  disaggregated mode (rollout hosts apart, on Ray).

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
  """`McJaxRLCluster(**kwargs)`, with a MaxText actor's engine model."""
  from tunix_mcjax import cluster  # pylint: disable=g-import-not-at-top

  return cluster.McJaxRLCluster(**_with_maxtext_engine(kwargs))


@BACKENDS.register("mcjax_da")
def create_mcjax_da_cluster(**kwargs: Any) -> Any:
  """`McJaxDaRLCluster(**kwargs)`: the trainer hosts of the disaggregated
  mode (`tunix_mcjax.da`); takes `da` and `num_generations` besides the
  mcjax backend's arguments, and runs inside a job of `da.launcher`."""
  from tunix_mcjax.da import cluster as da_cluster  # pylint: disable=g-import-not-at-top

  return da_cluster.McJaxDaRLCluster(**_with_maxtext_engine(kwargs))


def _with_maxtext_engine(kwargs: dict[str, Any]) -> dict[str, Any]:
  """Fills in the engine model of a MaxText actor.

  A MaxText Transformer (behind MaxText's `TunixMaxTextAdapter`) cannot
  sample: unless `options.engine_model` says otherwise, engines then run
  Tunix's Qwen3 and publication maps the MaxText parameters into it. The
  detection lives here so that the clusters never import MaxText code.
  """
  import dataclasses  # pylint: disable=g-import-not-at-top

  from tunix_mcjax import cluster  # pylint: disable=g-import-not-at-top

  options = kwargs.get("options") or cluster.McJaxOptions()
  if options.engine_model is None and _is_maxtext_actor(kwargs.get("actor")):
    from tunix_mcjax.maxtext import models as maxtext_models  # pylint: disable=g-import-not-at-top

    kwargs = dict(kwargs, options=dataclasses.replace(
        options, engine_model=maxtext_models.weight_dtype_engine_spec(
            kwargs["actor"].base.config)))
  return kwargs


def _is_maxtext_actor(actor: Any) -> bool:
  return type(actor).__name__ == "TunixMaxTextAdapter" and hasattr(
      actor, "base"
  )


def _initialize_mcjax_runtime() -> None:
  from tunix_mcjax import runtime  # pylint: disable=g-import-not-at-top

  runtime.initialize()


# Hook for trainers that start JAX themselves (MaxText's train_rl with
# maxtext_patches/0003-multi-controller-startup.patch): one
# process per host, jax.distributed started the way tunix_mcjax.runtime
# detects (local launcher, cluster, single host).
create_mcjax_cluster.initialize_runtime = _initialize_mcjax_runtime
create_mcjax_da_cluster.initialize_runtime = _initialize_mcjax_runtime
