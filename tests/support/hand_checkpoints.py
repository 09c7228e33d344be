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

"""Small real checkpoints for the checkpoint checks, and ways to damage them.

`write` saves a tiny model and its Adam state at a few steps with Tunix's
own `CheckpointManager` (Orbax, OCDBT, as an mcjax job saves) and mcjax's
resume state (`checkpointing.metadata`), in one process. The damage helpers
cut, garble or remove the files a restore reads.
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence

import numpy as np

from tunix_mcjax import checkpointing

# Global prompts per step of the checkpoints `write` saves.
BATCH = 6


def model(value: float = 1.0):
  """A tiny nnx model (random weights: OCDBT compresses, so a constant
  would leave no array file worth cutting) and its Adam optimizer."""
  # pylint: disable=g-import-not-at-top
  from flax import nnx
  import jax.numpy as jnp
  import optax
  # pylint: enable=g-import-not-at-top

  class Tiny(nnx.Module):

    def __init__(self):
      rng = np.random.default_rng(0)
      self.w = nnx.Param(value + jnp.asarray(rng.random((64, 64)),
                                             jnp.float32))
      self.b = nnx.Param(value + jnp.zeros((8,), jnp.float32))

  tiny = Tiny()
  return tiny, nnx.Optimizer(tiny, optax.adam(1e-3), wrt=nnx.Param)


def manager(root: str):
  """Tunix's checkpoint manager on `<root>/actor`, saving synchronously."""
  # pylint: disable=g-import-not-at-top
  import orbax.checkpoint as ocp
  from tunix.sft import checkpoint_manager
  # pylint: enable=g-import-not-at-top

  return checkpoint_manager.CheckpointManager(
      str(checkpointing.actor_directory(root)),
      ocp.CheckpointManagerOptions(enable_async_checkpointing=False))


def write(root: str, steps: Sequence[int] = (2, 4)) -> None:
  """Saves a checkpoint at each of `steps` under `root`, as an mcjax job
  of one host and `BATCH` prompts per step would."""
  tiny, optimizer = model()
  saver = manager(root)
  for step in steps:
    saver.save(step, tiny, optimizer, force=True,
               custom_metadata=checkpointing.metadata(
                   global_step=step, data_position=BATCH * step,
                   num_hosts=1, fingerprint={}))
  saver.close()


def step_dir(root: str, step: int) -> pathlib.Path:
  return checkpointing.actor_directory(root) / str(step)


def largest_array_file(step_path: pathlib.Path,
                       item: str = "model_params") -> pathlib.Path:
  """The largest data file of an item's per-process OCDBT stores: the one
  holding the biggest array's bytes."""
  files = [p for p in step_path.glob(f"{item}/ocdbt.process_*/d/*")
           if p.is_file()]
  assert files, f"no OCDBT data files under {step_path / item}"
  return max(files, key=lambda p: p.stat().st_size)


def truncate(path: pathlib.Path) -> int:
  """Cuts `path` to half its size (a write cut short); returns the size."""
  size = path.stat().st_size // 2
  with open(path, "r+b") as f:
    f.truncate(size)
  return size
