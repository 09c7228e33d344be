# Copyright 2026 The tunix_mcjax Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""The engine-vs-trainer log-prob probe of the multi-host engine tests.

A host program (tests/support/vllm_publication_host.py,
vllm_lora_host.py, maxtext_vllm_host.py) asks its cluster for the log-probs
of fixed tokens twice: from this host's engine, and from the trainer's
global (FSDP) model over every host's rows. Equal values show the engine
holds the published weights.

Host programs live next to this module and are run by path, so Python puts
tests/support/ first on their sys.path: they `import engine_probe` as the
tests import every helper here. It imports JAX: import it after
`runtime.initialize()`.
"""

from collections.abc import Callable
import contextlib
from typing import Any

from flax import nnx
import jax
from jax.experimental import multihost_utils
import numpy as np
from tunix.rl import common


def fixed_tokens(host: int) -> tuple[np.ndarray, np.ndarray]:
  """(prompt, completion): 2 rows each, different on each host, no pad (0)
  or eos (2) inside."""
  prompt = np.array([[1, 5 + host, 6, 7], [1, 9, 8 + host, 7]], np.int32)
  completion = np.array(
      [[5, 6, 7, 8, 9, 10], [11, 12, 13 + host, 14, 15, 4]], np.int32)
  return prompt, completion


class LogpsProbe:
  """Per-token log-probs of this host's tokens, by engine and by trainer.

  Attributes:
    prompt, completion: This host's fixed tokens (`fixed_tokens`).
  """

  def __init__(
      self,
      cluster: Any,
      mesh: jax.sharding.Mesh,
      *,
      pad_id: int = 0,
      eos_id: int = 2,
      scope: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
  ):
    """Probes `cluster` (its `rollout` engine and `actor_trainer.model`).

    Args:
      cluster: The mcjax cluster.
      mesh: The trainer's global mesh.
      pad_id, eos_id: The tokenizer's.
      scope: A new context to run the trainer model in (e.g. a mesh and
        logical axis rules); None: `with mesh:`.
    """
    self._cluster = cluster
    self._mesh = mesh
    self._pad_id, self._eos_id = pad_id, eos_id
    self._scope = scope or (lambda: mesh)
    self.prompt, self.completion = fixed_tokens(jax.process_index())

  def engine(self) -> np.ndarray:
    """This host's engine's log-probs of the fixed tokens."""
    return np.asarray(
        self._cluster.rollout.get_per_token_logps(self.prompt,
                                                  self.completion))

  def trainer(
      self,
      prompt: np.ndarray | None = None,
      completion: np.ndarray | None = None,
  ) -> np.ndarray:
    """The trainer model's log-probs of this host's rows (default: the fixed
    tokens). Every host's rows go through the global model together, so
    every host must call this at the same point."""
    if prompt is None:
      prompt, completion = self.prompt, self.completion
    b, p = prompt.shape
    host = jax.process_index()
    rows = multihost_utils.process_allgather(
        np.concatenate([prompt, completion], axis=1), tiled=False)
    rows = np.asarray(rows).reshape(-1, rows.shape[-1])
    rep = jax.sharding.NamedSharding(self._mesh, jax.sharding.PartitionSpec())
    g, s = nnx.split(self._cluster.actor_trainer.model)
    with self._scope():
      logps = common.compute_per_token_logps(
          g, s,
          jax.make_array_from_process_local_data(rep, rows[:, :p]),
          jax.make_array_from_process_local_data(rep, rows[:, p:]),
          self._pad_id, self._eos_id)
    logps = np.asarray(multihost_utils.process_allgather(logps, tiled=True))
    return logps.reshape(rows.shape[0], -1)[b * host:b * (host + 1)]
