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

"""Tunix's `rollout_vllm_*` keys under mcjax's PyTorch vLLM engine ('vllm').

Each key is honoured (mapped onto the engine's own setting), refused with
the reason when its value would change the numbers (another log-prob mode,
stop strings), or, a setting of Tunix's own vLLM rollout that recipes set
whatever the engine (MaxText's train_rl sets most of them), named in one
line when the engine starts: nothing is ignored without a word. Reads a rollout config as a mapping or an
object (Tunix's `RolloutConfig`), imports no JAX, Tunix or vLLM: the CLI
checks the keys before any host starts, the engine again when it starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tunix_mcjax.rules.problem import Problem

# Tunix's default of rollout_vllm_hbm_utilization: vLLM's share of a GPU.
DEFAULT_HBM_UTILIZATION = 0.2

# Honoured: key -> the vLLM setting it becomes.
HONOURED = {
    "rollout_vllm_hbm_utilization": "gpu_memory_utilization (the GPU's share"
    " for vLLM; JAX gets the rest, `device_memory`)",
    "rollout_vllm_max_num_seqs": "max_num_seqs",
    "rollout_vllm_max_num_batched_tokens": "max_num_batched_tokens",
    "rollout_vllm_lora_config": "rank and alpha of the merged LoRA adapters",
}

# Refused, since honouring or dropping them would change the numbers:
# key -> (the values that change nothing, why).
REFUSED = {
    "rollout_vllm_logprobs_mode": (
        ("processed_logprobs", None), "log-probs are those of the"
        " temperature-scaled distribution, as Tunix's sampler and trainer"
        " define them"),
    # Entry by entry: refused unless each changes nothing here
    # (_NEUTRAL_SAMPLING: no stop strings, the engine returns token ids).
    "rollout_vllm_sampling_kwargs": (
        (None, {}), "rows are sampled with temperature, top_p and top_k and"
        " a per-row seed, as the native engine samples them; other sampling"
        " settings would change the rollouts"),
}
_NEUTRAL_SAMPLING = {
    "stop": (None, [], ()),
    "detokenize": (False,),
    "include_stop_str_in_output": (False,),
}

# Not used by this engine (settings of Tunix's own vLLM rollout, which
# recipes such as MaxText's train_rl set whatever the engine): said in one
# line when the engine starts, never an error. key -> (unset values, why).
UNUSED = {
    "rollout_vllm_server_mode": (
        (False, None), "the engine runs in each host's process"),
    "rollout_vllm_model_version": (
        ("", None), "the model comes from the policy's config and the"
        " trainer's weights"),
    "rollout_vllm_init_with_random_weights": (
        (True, None), "it always starts from placeholder weights"),
    "rollout_vllm_tpu_backend_type": ((None, ""), "a tpu-inference setting"),
    "rollout_vllm_async_scheduling": (
        (False, None), "rows are generated in one synchronous call"),
    "rollout_vllm_hf_config_path": (
        (None, ""), "the Hugging Face config is written from the policy's"),
    "rollout_vllm_additional_config": ((None, {}), "a tpu-inference setting"),
    "rollout_vllm_enable_dp_attention": (
        (False, None), "a tpu-inference setting"),
    "rollout_vllm_delete_dst_buffers": (
        (True, None), "a tpu-inference weight-sync setting"),
    "rollout_vllm_reshard_chunk_size": (
        (None,), "a tpu-inference weight-sync setting"),
    "rollout_vllm_kwargs": (
        (None, {}), "keyword arguments of Tunix's vLLM rollout (recipes put"
        " model overrides for tpu-inference there); pass the engine's own"
        " with VllmEngineOptions.engine_kwargs"),
}


def _get(config: Any, key: str) -> Any:
  if isinstance(config, Mapping):
    return config.get(key)
  return getattr(config, key, None)


def _unused(value: Any, unused: tuple[Any, ...]) -> bool:
  # `in` would take 0 for False and 1 for True.
  return any(value is u or (type(value) is type(u) and value == u)
             for u in unused)


def vllm_keys(rollout: Any, *,
              prefix: str = "rollout_config.") -> Problem | None:
  """Every refused `rollout_vllm_*` value that is set, each with why, or
  None.

  Args:
    rollout: the TRAIN rollout config (a mapping or Tunix's RolloutConfig);
      None: nothing to check.
    prefix: how the message names the keys' place.
  """
  if rollout is None:
    return None
  found = []
  for key, (neutral, why) in REFUSED.items():
    if key == "rollout_vllm_sampling_kwargs":
      continue  # Below, entry by entry.
    value = _get(rollout, key)
    if not _unused(value, neutral):
      found.append(f"{prefix}{key}={value!r}: {why}")
  sampling = _get(rollout, "rollout_vllm_sampling_kwargs") or {}
  changing = {k: v for k, v in dict(sampling).items()
              if not _unused(v, _NEUTRAL_SAMPLING.get(k, ()))}
  if changing:
    why = REFUSED["rollout_vllm_sampling_kwargs"][1]
    found.append(f"{prefix}rollout_vllm_sampling_kwargs={changing!r}: {why}")
  hbm = _get(rollout, "rollout_vllm_hbm_utilization")
  if hbm is not None and not (isinstance(hbm, (int, float))
                              and 0.0 < hbm < 1.0):
    found.append(f"{prefix}rollout_vllm_hbm_utilization={hbm!r} must be a"
                 " fraction of the GPU in (0, 1)")
  if not found:
    return None
  return Problem(
      message="mcjax's 'vllm' engine (PyTorch vLLM) cannot honour: "
      + "; ".join(found) + ".")


def unused_keys(rollout: Any, *, prefix: str = "RolloutConfig.") -> str | None:
  """The one line an engine start says about set keys it does not use, or
  None."""
  if rollout is None:
    return None
  found = [f"{prefix}{key}={_get(rollout, key)!r} ({why})"
           for key, (unset, why) in UNUSED.items()
           if not _unused(_get(rollout, key), unset)]
  if not found:
    return None
  return ("mcjax's 'vllm' engine (PyTorch vLLM) does not use: "
          + "; ".join(found) + ".")


def engine_settings(rollout: Any) -> dict[str, Any]:
  """The honoured keys that are set, as the engine's own settings:
  gpu_memory_utilization, max_num_seqs, max_num_batched_tokens."""
  if rollout is None:
    return {}
  out: dict[str, Any] = {}
  for key, name in (
      ("rollout_vllm_hbm_utilization", "gpu_memory_utilization"),
      ("rollout_vllm_max_num_seqs", "max_num_seqs"),
      ("rollout_vllm_max_num_batched_tokens", "max_num_batched_tokens")):
    value = _get(rollout, key)
    if value is not None:
      out[name] = value
  return out


def vllm_engine(rollout: Any, *, prefix: str = "rollout_config."
                ) -> Problem | None:
  """The 'vllm' engine's rollout config: the keys it refuses (`vllm_keys`)
  and vLLM's share of the GPU beside JAX's (`device_memory.split`)."""
  from tunix_mcjax import device_memory  # pylint: disable=g-import-not-at-top

  problems = [p.message for p in (vllm_keys(rollout, prefix=prefix),) if p]
  hbm = _get(rollout, "rollout_vllm_hbm_utilization") if rollout else None
  if isinstance(hbm, (int, float)) and 0.0 < hbm < 1.0:
    try:
      device_memory.split(
          float(hbm), flag=f"{prefix}rollout_vllm_hbm_utilization")
    except ValueError as e:
      problems.append(str(e))
  return Problem(message=" ".join(problems)) if problems else None
