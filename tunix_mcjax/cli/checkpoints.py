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

"""Local Hugging Face Qwen3 checkpoints as Tunix CLI models.

Tunix's CLI loads a Hugging Face `model_id` from the hub only; these
functions load a `model_id` that names a local checkpoint directory, with
the architecture from its config.json and the checks of
`tunix_mcjax.recipes.models` (missing tensors, mixed dtypes).
"""

from __future__ import annotations

from collections.abc import Mapping
import dataclasses
import json
import os
import pathlib
from typing import Any

from tunix_mcjax.cli.options import ConfigError

# Model-config keys Tunix's AutoModel applies to a model preset (its kwargs
# that are ModelConfig fields), with create_model's defaults.
_MODEL_CONFIG_OVERRIDES = {
    "use_flash_attention": False,
    "flash_attention_block_size": 1024,
    "remat_config": 1,
}


def local_checkpoint_dir(model_config: Mapping[str, Any]) -> str | None:
  """The local checkpoint directory named by `model_id`, or None (a hub id).

  Args:
    model_config: One `*_model_config` section.

  Returns:
    The directory when `model_source` is huggingface and `model_id` is an
    existing local directory; None otherwise (Tunix's own loading applies).

  Raises:
    ConfigError: The directory exists but holds no config.json.
  """
  model_id = model_config.get("model_id")
  if model_config.get("model_source") != "huggingface" or not model_id:
    return None
  path = pathlib.Path(str(model_id)).expanduser()
  if not path.is_dir():
    return None
  if not (path / "config.json").is_file():
    raise ConfigError(
        f"model_id={model_id!r} is a local directory without config.json;"
        " point it at a Hugging Face checkpoint directory (config.json,"
        " *.safetensors, tokenizer files)."
    )
  return str(path)


def load_local_checkpoint(path: str, model_config: Mapping[str, Any], mesh):
  """Tunix's safetensors loading with the architecture from config.json.

  Same steps as Tunix's `AutoModel.from_pretrained` for a Hugging Face model,
  except that the download is skipped, the architecture comes from the
  checkpoint's config.json instead of the preset named by `model_name`, and
  the tensors are checked first (`models.hf_qwen3_loader_mode`). Unlike
  `models.load_hf_qwen3`, the tensors keep their stored dtype (as Tunix's
  CLI loads them), the config's attention and remat settings apply, and the
  tokenizer is left to Tunix's `tokenizer_config`.

  Args:
    path: The checkpoint directory.
    model_config: The `*_model_config` section (model_name, overrides).
    mesh: The mesh to shard the weights on.

  Returns:
    The model.

  Raises:
    ConfigError: `model_name` is not a Qwen3 model.
    ValueError: The checkpoint lacks tensors, or mixes dtypes in a
      multi-process job.
  """
  # pylint: disable=g-import-not-at-top
  from tunix.models import automodel
  from tunix.models import naming
  from tunix_mcjax.recipes import models
  # pylint: enable=g-import-not-at-top

  os.environ["HF_HUB_OFFLINE"] = "1"  # Nothing here may reach a hub.
  model_name = str(model_config.get("model_name", ""))
  family = naming.ModelNaming(model_name=model_name).model_family
  if family != "qwen3":
    raise ConfigError(
        f"model_config.model_name={model_name!r} (family {family!r}): local"
        " checkpoint directories are supported for Qwen3 models only; use a"
        " name such as 'qwen3-1.7b-base'."
    )
  hf = json.loads((pathlib.Path(path) / "config.json").read_text())
  model_params = models.qwen3_config_from_hf(hf)
  model_params = dataclasses.replace(
      model_params,
      **{k: model_config.get(k, d) for k, d in _MODEL_CONFIG_OVERRIDES.items()},
  )
  mode = models.hf_qwen3_loader_mode(path, model_params)
  if mode == "optimized":
    mode = "auto"  # Tunix picks its fast loader where it can (not Pathways).
  with mesh:
    return automodel.create_model_from_safe_tensors(
        model_name, path, model_params, mesh, mode=mode
    )
