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

"""A rollout host of the disaggregated mode: one process, its local engine.

`RolloutHost` is a plain class; the launcher runs it as a Ray actor (one
process per rollout host, with its own fake CPU or real accelerator devices)
that belongs to no JAX world with the trainers. Ray runs an actor's calls one
at a time, so new weights are installed between generations, never during
one. Sampling keys come from the rows' identities (global prompt index,
sample index) sent with every request: a row's completion does not depend on
which rollout host, trainer host or batch split produced it.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

import numpy as np


class _GivenRowIds:
  """The row identities of the current request (an engine `RowIdSource`)."""

  def __init__(self):
    self._ids: np.ndarray | None = None

  def set(self, ids: np.ndarray) -> None:
    self._ids = np.asarray(ids, np.int64)

  def take(self, num_rows: int) -> np.ndarray:
    ids, self._ids = self._ids, None
    if ids is None or ids.shape[0] != num_rows:
      raise RuntimeError(
          f"The engine asked for {num_rows} row ids; the request carried"
          f" {None if ids is None else ids.shape[0]}."
      )
    return ids


class RolloutHost:
  """Builds the job's model on this process's devices and serves requests.

  Args:
    source: where the model, engine, seed and sampling settings come from
      (a `model_source.ModelSource` of the entry point).
    index: this rollout host's index (for messages and metrics).
  """

  def __init__(self, source: Any, index: int):
    # pylint: disable=g-import-not-at-top
    import jax

    from tunix_mcjax import engines  # Registers the built-in engines.
    from tunix_mcjax import runtime
    from tunix_mcjax.engines import base as engine_base
    from tunix_mcjax.registry import ENGINES
    # pylint: enable=g-import-not-at-top

    del engines
    self.index = index
    self._version = -1
    self._row_ids = _GivenRowIds()
    self._idle_since: float | None = None
    # Data parallelism over the host's devices, engine tensor parallelism
    # over groups of source.engine_tp of them (as a colocated host's engine).
    self._mesh = runtime.local_mesh(tp=source.engine_tp)
    # The job's own model code (with its LoRA adapters, if any): the trainers'
    # first publication then replaces its weights. Built over the host's
    # devices as one data axis (a loader may shard a dimension tp does not
    # divide); the engine lays it out on its own mesh.
    actor, self._tokenizer = source.build(runtime.local_mesh())
    engine_name = source.engine
    self._engine = ENGINES.get(engine_name)(
        tokenizer=self._tokenizer,
        context=engine_base.EngineContext(
            engine_mesh=self._mesh, row_ids=self._row_ids, seed=source.seed,
            initial_model=actor,
        ),
        **_engine_kwargs(engine_name, source),
    )
    self._shardings = _install_layout(self._engine, actor)
    del actor
    self._jax = jax

  def info(self) -> dict[str, Any]:
    return {"index": self.index, "pid": os.getpid(),
            "devices": self._jax.local_device_count(),
            "engine_mesh": {str(k): int(v)
                            for k, v in self._mesh.shape.items()},
            "version": self._version}

  def close(self) -> None:
    """Frees an engine that holds resources outside JAX (vLLM: its process
    state, shared memory and temporary directory); the launcher calls it
    when the job ends (`close_all`), before it ends the actor."""
    from tunix_mcjax.engines import base as engine_base  # pylint: disable=g-import-not-at-top

    engine_base.close(self._engine)

  def set_weights(self, version: int, flat: Any) -> dict[str, float]:
    """Installs published weights (all, or a LoRA actor's adapters).

    Args:
      version: the policy version they are.
      flat: {parameter path: array}, or [a Ray object reference to it], got
        here from Ray's object store.

    Returns:
      {"get_s": seconds of that get (0 when given the arrays), "install_s":
      seconds of host -> devices and the engine update}.
    """
    t0 = time.perf_counter()
    if isinstance(flat, list):
      import ray  # pylint: disable=g-import-not-at-top

      (flat,) = ray.get(flat)
    got = time.perf_counter()
    tree: dict[Any, Any] = {}
    for path, value in flat.items():
      if path not in self._shardings:
        raise ValueError(
            f"Rollout host {self.index}: published parameter"
            f" {'.'.join(map(str, path))} is not in this engine's model."
        )
      sharding, dtype = self._shardings[path]
      node = tree
      for key in path[:-1]:
        node = node.setdefault(key, {})
      node[path[-1]] = self._jax.device_put(
          np.asarray(value).astype(dtype), sharding)
    partial = len(flat) < len(self._shardings)
    self._engine.update_params(tree, filter_types=() if partial else None)
    self._version = int(version)
    return {"get_s": got - t0, "install_s": time.perf_counter() - got}

  def generate(self, prompts: list[str], row_ids: np.ndarray,
               rollout_config: Any, version: int) -> dict[str, Any]:
    """Completions of `prompts` with weights `version`, and that version.

    A host that does not hold `version` (e.g. restarted by Ray after a crash,
    without weights) generates nothing and answers {"holds": its version}:
    the trainer host installs the weights and asks again.
    """
    if self._version != version:
      return {"holds": self._version}
    t0 = time.perf_counter()
    idle = 0.0 if self._idle_since is None else t0 - self._idle_since
    self._row_ids.set(row_ids)
    out = self._engine.generate(
        prompts, dataclasses.replace(rollout_config, return_logprobs=True))
    self._idle_since = time.perf_counter()
    return {
        "idle_s": idle,
        "text": list(out.text),
        "tokens": [np.asarray(t) for t in out.tokens],
        "left_padded_prompt_tokens": np.asarray(
            out.left_padded_prompt_tokens),
        "logprobs": [np.asarray(p, np.float32) for p in out.logprobs],
        "version": self._version,
        "generate_s": self._idle_since - t0,
        "host": self.index,
    }


def _engine_kwargs(engine_name: str, source: Any) -> dict[str, Any]:
  """What the engine is built with besides tokenizer and context."""
  if engine_name == "native":
    return {"rollout_config": None, "cache_size": source.cache_size}
  # As the colocated cluster builds it: Tunix's TRAIN rollout config (lengths,
  # vLLM's LoRA rank and alpha for merging adapters).
  return {"rollout_config": source.rollout_config()}


def _install_layout(engine: Any, actor: Any
                    ) -> dict[tuple[Any, ...], tuple[Any, Any]]:
  """(sharding, dtype) of every parameter a publication may carry."""
  from flax import nnx  # pylint: disable=g-import-not-at-top

  model = engine.model()
  if model is not None:
    # A JAX engine (native): its own model's arrays.
    return {path: (x.sharding, x.dtype)
            for path, x in _flat(nnx.state(model, nnx.Param)).items()}
  # Weights outside JAX (vLLM): staged in the engine's layout, replicated on
  # its mesh. A LoRA engine's target lists the adapters only; its base
  # arrives once (the first publication), staged alike.
  target = _flat(engine.publication_target())
  staged = next(iter(target.values()))
  layout = {path: (staged.sharding, staged.dtype)
            for path in _flat(nnx.state(actor, nnx.Param))}
  layout.update({path: (x.sharding, x.dtype) for path, x in target.items()})
  return layout


def _flat(tree: Any) -> dict[tuple[Any, ...], Any]:
  from tunix_mcjax import tree_paths  # pylint: disable=g-import-not-at-top

  return tree_paths.flat_params(tree)


def close_all(rollouts: list[Any], *, timeout_s: float) -> int:
  """Asks the rollout host actors to close their engines, waiting up to
  `timeout_s`; how many did (a dead or busy one is killed without)."""
  import ray  # pylint: disable=g-import-not-at-top

  refs = [r.close.remote() for r in rollouts]
  if not refs:
    return 0
  ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
  closed = 0
  for ref in ready:
    try:
      ray.get(ref)
      closed += 1
    except Exception:  # pylint: disable=broad-exception-caught
      pass  # A dead host has nothing to free.
  return closed
