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

"""A process holding a vLLM engine at engine tp 2 (tests/engines/test_vllm.py
SIGKILLs it): starts the engine on 2 CPU devices, prints `READY <engine
dir>`, then waits to be killed."""

import sys
import time

import jax
import numpy as np

from tunix_mcjax.engines import base
from tunix_mcjax.engines import vllm as vllm_engine
from tunix_mcjax.recipes import models
from tunix.rl.rollout import base_rollout


def main() -> None:
  jax.config.update("jax_num_cpu_devices", 2)
  tokenizer = models.ToyTokenizer(models.PRINTABLE_ALPHABET)
  config = models.tiny_qwen3_config(head_dim=32,
                                    vocab_size=tokenizer.vocab_size)
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]).reshape(1, 2),
                           ("fsdp", "tp"))
  engine = vllm_engine.VllmEngine(
      tokenizer=tokenizer,
      rollout_config=base_rollout.RolloutConfig(
          max_tokens_to_generate=4, max_prompt_length=8, kv_cache_size=16),
      context=base.EngineContext(
          engine_mesh=mesh,
          initial_model=models.create_tiny_model(config, seed=0)))
  print("READY", engine._tmpdir.name, flush=True)  # pylint: disable=protected-access
  time.sleep(600)
  sys.exit(1)


if __name__ == "__main__":
  main()
