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

"""Tunix's batched GRPO dataset, dealt to the hosts in full global batches."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from absl import logging


def full_batches(
    batches: Iterable[Mapping[str, Any]], batch_size: int
) -> Iterator[Mapping[str, Any]]:
  """The batches holding exactly `batch_size` prompts, in order.

  Tunix batches without dropping the remainder, so the last batch of the
  stream may be short; a short batch cannot be split evenly over hosts (and
  unequal steps would hang a collective), so it is skipped.

  Args:
    batches: Tunix's batched dataset.
    batch_size: The global batch size.

  Yields:
    The full batches.
  """
  for batch in batches:
    n = len(batch["prompts"])
    if n == batch_size:
      yield batch
    else:
      logging.warning(
          "Dropping a final partial batch of %d prompts (batch_size=%d): every"
          " host must run the same number of equal steps.",
          n,
          batch_size,
      )


class DealtDataset(Iterable[dict[str, Any]]):
  """Tunix's batched dataset, dealt to hosts when the learner iterates it.

  Built where Tunix builds its dataset (before the cluster exists); the
  cluster that deals the prompts is looked up on iteration, which the learner
  does after the cluster is created.
  """

  def __init__(
      self,
      batches: Iterable[Mapping[str, Any]],
      *,
      batch_size: int,
      deal: Callable[[Iterable[Mapping[str, Any]]], Iterable[dict[str, Any]]],
  ):
    self._batches = batches
    self._batch_size = batch_size
    self._deal = deal

  def __iter__(self) -> Iterator[dict[str, Any]]:
    return iter(self._deal(full_batches(self._batches, self._batch_size)))


def _looks_like_path(value: Any) -> bool:
  return isinstance(value, str) and value.startswith(("/", "./", "../", "~"))


def missing_local_inputs(config: Mapping[str, Any]) -> list[str]:
  """Local dataset, model and tokenizer paths in Tunix's GRPO config that do
  not exist.

  Only values that are clearly local paths (absolute, ./, ../, ~) are
  checked: a hub name (a dataset, a Hugging Face `model_id` or tokenizer) is
  Tunix's to resolve; a missing local path would be taken for one and fail
  in every host's loader. Needs no device, so the CLI reports these before
  any host starts.

  Args:
    config: Tunix's parsed GRPO config.

  Returns:
    One message per missing path.
  """
  import os  # pylint: disable=g-import-not-at-top

  checks = []
  source = config.get("data_source")
  if source == "local":
    checks.append(("data_directory", config.get("data_directory"), True))
  elif source == "huggingface" and _looks_like_path(config.get("dataset_name")):
    checks.append(("dataset_name", config.get("dataset_name"), False))
  # Every role inherits model_config's model_id unless it sets its own: name
  # each missing path once, under the first section that holds it.
  seen = set()
  for section in ("model_config", "actor_model_config",
                  "reference_model_config", "rollout_model_config"):
    model = config.get(section) or {}
    model_id = model.get("model_id")
    if (model.get("model_source", "huggingface") == "huggingface"
        and _looks_like_path(model_id) and model_id not in seen):
      seen.add(model_id)
      checks.append((f"{section}.model_id", model_id, False))
  tokenizer_path = (config.get("tokenizer_config") or {}).get("tokenizer_path")
  if _looks_like_path(tokenizer_path):
    checks.append(("tokenizer_config.tokenizer_path", tokenizer_path, False))
  problems = []
  for key, value, required in checks:
    if not value:
      if required:
        problems.append(f"{key} is empty; set it to the local data directory.")
      continue
    if not os.path.exists(os.path.expanduser(value)):
      problems.append(f"{key}={value!r} does not exist; fix the path (nothing"
                      " is downloaded for a local path).")
  return problems
