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

"""The private names of Tunix's vLLM rollout we use (tpu-inference engine).

The experimental tpu-inference engine drives Tunix's `VllmRollout` and
writes published weights straight into tpu-inference's model runner, which
Tunix keeps private: `VllmRollout._sampler` (a `VllmSampler`) and its
`_model_runner`. Upstream: a public weight-installation hook on the rollout.
Needs vLLM (absent in the main environment): nothing is imported here.
"""

from __future__ import annotations

from typing import Any


def vllm_sampler(rollout: Any) -> Any:
  """The `VllmSampler` of a Tunix `VllmRollout`."""
  return rollout._sampler  # pylint: disable=protected-access


def model_runner(rollout: Any) -> Any:
  """tpu-inference's model runner behind a Tunix `VllmRollout`.

  Its `state` (an nnx.State of the engine's parameters) and, where present,
  `state_leaves` (the flattened leaves its jitted model reads) are what a
  weight update replaces.
  """
  return vllm_sampler(rollout)._model_runner  # pylint: disable=protected-access
