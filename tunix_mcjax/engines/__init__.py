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


"""Rollout engines, registered by name in `tunix_mcjax.registry.ENGINES`.

The registered factories are `BaseRollout` subclasses, because Tunix's
`ClusterConfig.rollout_engine` accepts only a subclass or a
`functools.partial` of one. Importing this package imports JAX and Tunix's
sampler but initializes no JAX backend. The "vllm" and "vllm_tpu" engines
import vLLM (and PyTorch / tpu-inference) only when constructed, so they are
registered even in environments without vLLM. Engines that have never run
on the hardware they target say so (`Engine.experimental`, listed by
`experimental_engines()`) and log a warning when constructed.
"""

from tunix_mcjax.engines.base import Engine
from tunix_mcjax.engines.base import EngineContext
from tunix_mcjax.engines.base import RowIdSource
from tunix_mcjax.engines.native import NativeEngine
from tunix_mcjax.engines.experimental.tpu_inference import TpuInferenceEngine
from tunix_mcjax.engines.vllm import VllmEngine
from tunix_mcjax.registry import ENGINES

ENGINES.register("native")(NativeEngine)
ENGINES.register("vllm")(VllmEngine)
ENGINES.register("vllm_tpu")(TpuInferenceEngine)


def experimental_engines() -> list[str]:
  """Registered engine names that have never run on their target hardware."""
  return [
      name for name in ENGINES.names()
      if getattr(ENGINES.get(name), "experimental", False)
  ]


__all__ = [
    "Engine",
    "EngineContext",
    "NativeEngine",
    "RowIdSource",
    "TpuInferenceEngine",
    "VllmEngine",
    "experimental_engines",
]
