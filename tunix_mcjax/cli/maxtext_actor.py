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

"""A MaxText actor through Tunix's CLI (`model_config.model_source: maxtext`).

Tunix 0.1.7's `create_model` names MaxText's model after the last part of
`model_id` and drops `model_config.kwargs`. Under the mcjax backends the
actor is built as later Tunix releases build it: MaxText's model
`model_config.model_name`, `model_config.kwargs` as MaxText settings,
`model_config.model_path` as its parameter checkpoint. It trains on
MaxText's own mesh (FSDP over the trainer hosts' devices) with MaxText's
logical axis rules, and the engines run Tunix's Qwen3 of its widths, into
which publication maps its parameters (`maxtext.models`), as
`examples/grpo_qwen3.py --trainer=maxtext` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAXTEXT_SOURCE = "maxtext"


def is_maxtext(model_config: Mapping[str, Any]) -> bool:
  """Whether a (resolved) model section asks for a MaxText model."""
  return model_config.get("model_source") == MAXTEXT_SOURCE


def config(model_config: Mapping[str, Any]) -> Any:
  """MaxText's config of the actor a model section describes."""
  from tunix_mcjax.maxtext import models  # pylint: disable=g-import-not-at-top

  overrides = {"model_name": model_config["model_name"],
               **dict(model_config.get("kwargs") or {})}
  return models.maxtext_config(
      overrides=overrides,
      load_parameters_path=model_config.get("model_path") or None)


def describe(mt_config: Any) -> str:
  """One line on the actor mcjax builds."""
  return (f"model_source=maxtext: MaxText's {mt_config.model_name}"
          f" ({mt_config.base_num_decoder_layers} layers, width"
          f" {mt_config.base_emb_dim}, vocabulary {mt_config.vocab_size}),"
          " FSDP on MaxText's mesh; engines run Tunix's Qwen3 of its widths")


def mesh(mt_config: Any) -> Any:
  """MaxText's mesh over this job's (trainer hosts') devices."""
  from tunix_mcjax.maxtext import models  # pylint: disable=g-import-not-at-top

  return models.maxtext_mesh(mt_config)


def create(mt_config: Any, on_mesh: Any, *, pad_id: int | None,
           rng_seed: int) -> Any:
  """The MaxText model (in Tunix's adapter), sharded on `on_mesh`."""
  from tunix_mcjax.maxtext import models  # pylint: disable=g-import-not-at-top

  return models.create_actor(mt_config, on_mesh, pad_id=pad_id,
                             rng_seed=rng_seed)


def axis_rules(mt_config: Any) -> dict[Any, Any]:
  """Tunix's `role_to_logical_axis_rule` for the trainer's roles."""
  from tunix_mcjax import compat  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.maxtext import models  # pylint: disable=g-import-not-at-top

  rules = models.logical_axis_rules(mt_config)
  return {compat.Role.ACTOR: rules, compat.Role.REFERENCE: rules}


def engine_spec(mt_config: Any) -> Any:
  """The engines' model in the actor's weight dtype (the trainers' is
  filled in by the backend factory: `backends._with_maxtext_engine`)."""
  from tunix_mcjax.maxtext import models  # pylint: disable=g-import-not-at-top

  return models.weight_dtype_engine_spec(mt_config)


def engine_model_on(mt_config: Any, on_mesh: Any) -> Any:
  """A disaggregated rollout host's engine model: `engine_spec`'s Qwen3,
  replicated on `on_mesh`, zero until the trainers' first publication."""
  from tunix_mcjax.maxtext import models  # pylint: disable=g-import-not-at-top

  return models.zero_engine_model(engine_spec(mt_config), on_mesh)
