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

"""Checkpoint and exact resume of an mcjax run (see docs/checkpointing.md).

Saving is Tunix's own: the actor trainer's Orbax `CheckpointManager` writes
`<root>/actor/<step>` (trainable parameters, full or LoRA, and the optimizer
state) collectively from every host, into a temporary directory that Orbax
renames when the checkpoint is complete, so a checkpoint is either complete
or invisible. `<step>` counts optimizer updates, as Tunix does.

This module adds what Tunix does not save or check, carried in the
checkpoint's custom metadata under `MCJAX_KEY`:

- the data position: global prompts of the stream already trained on, which
  is also the sampling-key position (row ids are global prompt indices, see
  `admission`); both are host-count independent, so a run checkpointed with
  H hosts resumes with any other host count;
- the fingerprint: configuration values a resume must not change (parameter
  shapes, i.e. model shape and LoRA rank; global batch knobs; the job's
  learner settings). A resume with another fingerprint is refused before
  anything is restored, naming each value that differs.

No JAX at import (JAX, Flax and Tunix are imported where a cluster uses
them, in `ClusterCheckpoints`): the example checks a directory before any
host starts.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from collections.abc import Callable, Mapping
from typing import Any

from tunix_mcjax import admission

# Tunix's RLCluster saves the actor trainer under <root>/actor.
ACTOR_SUBDIR = "actor"
# The key of mcjax's entry in a checkpoint's custom metadata.
MCJAX_KEY = "mcjax"
# Tunix's key: global steps completed when the checkpoint was written.
GLOBAL_STEP_KEY = "global_step"
# Orbax's per-step metadata file (its custom metadata is read from here so
# that reading needs neither JAX nor a checkpoint manager).
_STEP_METADATA_FILE = "_CHECKPOINT_METADATA"


class CheckpointError(ValueError):
  """A checkpoint directory or checkpoint that cannot be used; the message
  says what to change."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointConfig:
  """Where and how often a job checkpoints.

  Attributes:
    directory: root directory; the actor's checkpoints go to
      `<directory>/actor`. A directory holding a checkpoint resumes from its
      latest complete one.
    every: save every this many global steps (one global batch each).
    max_to_keep: keep this many most recent checkpoints (None: all).
  """

  directory: str
  every: int = 1
  max_to_keep: int | None = 3

  def __post_init__(self):
    if not self.directory:
      raise ValueError("checkpoint directory must be a non-empty path.")
    if self.every < 1:
      raise ValueError(f"checkpoint_every must be >= 1, got {self.every}.")
    if self.max_to_keep is not None and self.max_to_keep < 1:
      raise ValueError(
          f"max_to_keep must be >= 1 (or unset: keep all), got"
          f" {self.max_to_keep}."
      )

  def training_config_fields(self, *, updates_per_step: int) -> dict[str, Any]:
    """Fields of Tunix's RLTrainingConfig that make its trainer save.

    Args:
      updates_per_step: optimizer updates per global step (mini-batches x
        num_iterations); Tunix counts checkpoint steps in updates, and a
        checkpoint inside a global step could not be resumed exactly.
    """
    import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top

    return dict(
        checkpoint_root_directory=self.directory,
        checkpointing_options=ocp.CheckpointManagerOptions(
            # Exactly every N global steps: no initial or time-based save.
            save_decision_policy=(
                ocp.checkpoint_managers.FixedIntervalPolicy(
                    self.every * updates_per_step)
            ),
            max_to_keep=self.max_to_keep,
        ),
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class SavedCheckpoint:
  """A complete checkpoint found in a root directory.

  Attributes:
    path: the step's directory.
    step: Orbax step (optimizer updates).
    global_step: global steps completed (None if Tunix wrote none).
    data_position: global prompts trained on (None: not written by mcjax).
    fingerprint: the configuration values saved with it ({} if none).
    num_hosts: the host count that wrote it (informational).
  """

  path: str
  step: int
  global_step: int | None
  data_position: int | None
  fingerprint: Mapping[str, Any]
  num_hosts: int | None

  def describe(self) -> str:
    return (
        f"{self.path} (global step {self.global_step}, data position"
        f" {self.data_position}, written by {self.num_hosts} host(s))"
    )


def actor_directory(root: str) -> pathlib.Path:
  return pathlib.Path(root) / ACTOR_SUBDIR


def complete_steps(root: str) -> list[int]:
  """Steps of the complete checkpoints under `root`, ascending.

  Orbax only renames a step's temporary directory into place once every host
  has written it; a save interrupted by a kill leaves a
  `<step>.orbax-checkpoint-tmp-*` directory, which is not a checkpoint.
  """
  from orbax.checkpoint import path as ocp_path  # pylint: disable=g-import-not-at-top

  actor = actor_directory(root)
  if not actor.is_dir():
    return []
  return sorted(ocp_path.step.checkpoint_steps(actor))


def latest(root: str) -> SavedCheckpoint | None:
  """The latest complete checkpoint under `root`, or None."""
  steps = complete_steps(root)
  if not steps:
    return None
  step_dir = actor_directory(root) / str(steps[-1])
  meta_file = step_dir / _STEP_METADATA_FILE
  custom: Mapping[str, Any] = {}
  if meta_file.is_file():
    custom = json.loads(meta_file.read_text()).get("custom_metadata") or {}
  ours = custom.get(MCJAX_KEY) or {}
  return SavedCheckpoint(
      path=str(step_dir),
      step=steps[-1],
      global_step=custom.get(GLOBAL_STEP_KEY),
      data_position=ours.get("data_position"),
      fingerprint=ours.get("fingerprint") or {},
      num_hosts=ours.get("num_hosts"),
  )


def check_writable(root: str, *, probe_name: str | None = None) -> None:
  """Raises CheckpointError unless `root` can be created and written.

  Checked before training starts, so an unwritable directory is reported
  before hours of training rather than at the first save.
  """
  try:
    actor = actor_directory(root)
    actor.mkdir(parents=True, exist_ok=True)
    # Per process: hosts sharing the directory probe at the same time.
    probe = actor / (probe_name or f".mcjax_write_probe_{os.getpid()}")
    probe.write_bytes(b"ok")
    probe.unlink()
  except OSError as e:
    raise CheckpointError(
        f"Checkpoint directory {root!r} is not writable ({e.strerror or e});"
        " pass a --checkpoint_dir (checkpoint_root_directory) that this job"
        " can create and write on every host."
    ) from e


def _short(value: Any, limit: int = 120) -> str:
  text = json.dumps(value, sort_keys=True)
  return text if len(text) <= limit else text[:limit] + "..."


def mismatches(saved: Mapping[str, Any], current: Mapping[str, Any]
               ) -> list[str]:
  """One line per configuration value that differs (keys in both)."""
  out = []
  for key in sorted(set(saved) & set(current)):
    a, b = _normalise(saved[key]), _normalise(current[key])
    if a == b:
      continue
    if isinstance(a, dict) and isinstance(b, dict):
      # Parameter shapes: name the first parameters that differ.
      diff = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
      detail = "; ".join(
          f"{k}: checkpoint {a.get(k, 'absent')}, now {b.get(k, 'absent')}"
          for k in diff[:3]
      )
      more = f" (and {len(diff) - 3} more)" if len(diff) > 3 else ""
      out.append(f"{key}: {detail}{more}")
    else:
      out.append(f"{key}: checkpoint {_short(a)}, now {_short(b)}")
  return out


def _normalise(value: Any) -> Any:
  # What the value reads back as from the checkpoint's JSON.
  return json.loads(json.dumps(value, sort_keys=True))


def check_resume(root: str, fingerprint: Mapping[str, Any]
                 ) -> SavedCheckpoint | None:
  """The checkpoint a run would resume from, checked against `fingerprint`.

  Raises:
    CheckpointError: the latest checkpoint was not written by mcjax, or was
      written with other configuration values (each is named).
  """
  saved = latest(root)
  if saved is None:
    return None
  if saved.data_position is None or saved.global_step is None:
    raise CheckpointError(
        f"Checkpoint {saved.path} has no mcjax resume state (data position,"
        " global step): it was not written by an mcjax run, whose resume"
        " would be exact; pass an empty --checkpoint_dir"
        " (checkpoint_root_directory) to start a new run."
    )
  diff = mismatches(saved.fingerprint, fingerprint)
  if diff:
    raise CheckpointError(
        f"Checkpoint {saved.path} was written with another configuration;"
        " resume with the same settings, or pass another --checkpoint_dir"
        " (checkpoint_root_directory). Differences: " + " | ".join(diff)
    )
  return saved


def metadata(*, global_step: int, data_position: int, num_hosts: int,
             fingerprint: Mapping[str, Any], role: str = "actor"
             ) -> dict[str, Any]:
  """A checkpoint's custom metadata: Tunix's keys plus mcjax's entry."""
  return {
      GLOBAL_STEP_KEY: int(global_step),
      "role": role,
      MCJAX_KEY: {
          "data_position": int(data_position),
          # Row ids are global prompt indices: the sampling-key position is
          # the data position (kept separately should they ever differ).
          "sampling_position": int(data_position),
          "num_hosts": int(num_hosts),
          "fingerprint": _normalise(dict(fingerprint)),
      },
  }


def param_shapes(state: Any) -> dict[str, list[Any]]:
  """{parameter name: [shape, dtype]} of an nnx state (the model shape; the
  LoRA rank shows in the adapters' shapes)."""
  import jax  # pylint: disable=g-import-not-at-top

  out = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
    if hasattr(leaf, "shape"):
      out[jax.tree_util.keystr(path)] = [list(leaf.shape), str(leaf.dtype)]
  return out


def describe_resume(saved: SavedCheckpoint) -> str:
  return f"[mcjax] resuming from checkpoint {saved.describe()}"



class SaveErrors:
  """Tunix's trainer checkpoint manager, with failed saves reported as a
  `CheckpointError` naming the directory and the intact checkpoint.

  Orbax saves asynchronously: a write error (a full disk, say) surfaces at
  the next save, at a wait or at close; every such call is wrapped. Other
  attributes pass through.
  """

  def __init__(self, manager: Any, root: str):
    self._manager = manager
    self._root = root

  def __getattr__(self, name: str) -> Any:
    return getattr(self._manager, name)

  def _failed(self, what: str, error: Exception) -> CheckpointError:
    steps = complete_steps(self._root)
    intact = (f"the latest complete checkpoint, step {steps[-1]}, is intact"
              if steps else "no complete checkpoint was written before")
    return CheckpointError(
        f"{what} under {str(actor_directory(self._root))!r} failed"
        f" ({type(error).__name__}: {error}); {intact}. Free space (or fix"
        " the permissions) there, or pass another --checkpoint_dir"
        " (checkpoint_root_directory), and rerun to resume."
    )

  def save(self, step: int, *args: Any, **kwargs: Any) -> bool:
    try:
      return self._manager.save(step, *args, **kwargs)
    except Exception as e:  # pylint: disable=broad-except
      # Asynchronous saves report a failure at the next save.
      raise self._failed(
          f"A checkpoint save (reported while saving step {step}; an"
          " asynchronous save's error surfaces at the next save)", e) from e

  def close(self) -> None:
    try:
      self._manager.close()
    except Exception as e:  # pylint: disable=broad-except
      raise self._failed("Finishing the last checkpoint saves", e) from e


class ClusterCheckpoints:
  """An mcjax cluster's checkpoint and resume state, between Tunix and it.

  Tunix's trainer saves and restores the weights; this object adds the
  resume state (data position, fingerprint) and the checks. The cluster
  uses it in this order:

  1. `check(actor, training_config)` before Tunix restores the latest
     checkpoint (inside `RLCluster.__init__`): a checkpoint of another
     configuration is refused before anything is restored.
  2. `attach(trainer, global_steps)` once the trainer exists: its saves
     carry the resume state, and a failed save names the directory.
  3. `resume(trainer, republish)` if Tunix restored a checkpoint: returns
     the global step to continue from; the restored weights reach every
     engine (through `republish`) before the first rollout.
  4. `dataset_resume(trainer, training_config)`: where admission restarts.
  5. `step_closed(batch)` at each step end: the data position advances.
  6. `save_final(trainer, global_step)` at close.

  Every method is a no-op (or None) without a checkpoint root, except
  `step_closed`, which always counts.
  """

  def __init__(self, *, root: str | None, ledger: admission.StepLedger,
               num_hosts: int,
               host_index: int,
               job_fingerprint: Mapping[str, Any] | None = None):
    """Initializes the state.

    Args:
      root: Tunix's `checkpoint_root_directory` (None: no checkpoints).
      ledger: the cluster's training `admission.StepLedger` (a save inside
        a step takes the data position of its oldest open batch).
      num_hosts: this job's host count (saved, informational).
      host_index: this host (host 0 prints the resume line).
      job_fingerprint: the job's values a resume must not change
        (`McJaxOptions.checkpoint_fingerprint`), beside the cluster's own.
    """
    self.root = root
    self._ledger = ledger
    self._num_hosts = num_hosts
    self._host_index = host_index
    self._job_fingerprint = dict(job_fingerprint or {})
    self._fingerprint: dict[str, Any] = {}
    self._resume_from: SavedCheckpoint | None = None
    # Global prompts trained on (checkpoints' data position).
    self.data_position = 0

  def check(self, actor: Any, training_config: Any
            ) -> SavedCheckpoint | None:
    """The checkpoint Tunix will restore, checked; None: a fresh start."""
    if self.root is None:
      self._fingerprint = {}
      return None
    from flax import nnx  # pylint: disable=g-import-not-at-top
    from tunix.sft import utils as sft_utils  # pylint: disable=g-import-not-at-top

    tc = training_config
    lora = sft_utils.is_lora_enabled(actor)
    self._fingerprint = {
        # Model shape; a LoRA actor's adapters carry its rank.
        "trainable_params": param_shapes(
            nnx.state(actor, nnx.LoRAParam if lora else nnx.Param)),
        "lora": lora,
        "mini_batch_size": tc.mini_batch_size,
        "train_micro_batch_size": tc.train_micro_batch_size,
        **self._job_fingerprint,
    }
    check_writable(self.root)
    self._resume_from = check_resume(self.root, self._fingerprint)
    return self._resume_from

  def attach(self, trainer: Any, global_steps: Callable[[], int]) -> None:
    """Makes the trainer's saves carry the resume state.

    Args:
      trainer: Tunix's actor trainer.
      global_steps: the cluster's completed global steps, read at each save.
    """
    if self.root is None:
      return
    # Tunix saves inside update_actor, before sync_weights counts the step.
    trainer.custom_checkpoint_metadata_fn = (
        lambda: self.metadata(global_steps() + 1))
    # A failed save names the directory and the checkpoint left intact.
    trainer.checkpoint_manager = SaveErrors(
        trainer.checkpoint_manager, self.root)

  def metadata(self, global_step: int, data_position: int | None = None
               ) -> dict[str, Any]:
    """A save's custom metadata (`metadata`)."""
    if data_position is None:
      # Saved inside a step: its batch is the oldest open ledger entry.
      entries = self._ledger.entries
      data_position = (
          entries[0].stream_end if entries else self.data_position)
    return metadata(
        global_step=global_step, data_position=data_position,
        num_hosts=self._num_hosts, fingerprint=self._fingerprint,
    )

  def resume(self, trainer: Any, republish: Callable[[], None]) -> int:
    """After Tunix restored the actor: the data position, and the restored
    weights into every engine before the first rollout.

    Args:
      trainer: Tunix's actor trainer, restored.
      republish: publishes the trainer's weights into every engine.

    Returns:
      The global steps completed at the checkpoint.
    """
    saved = self._resume_from
    restored = trainer.train_steps
    if saved is None or saved.step != restored:
      raise RuntimeError(
          f"Tunix restored checkpoint step {restored} but mcjax checked"
          f" {saved and saved.path}: another process wrote to"
          f" {self.root!r} meanwhile; give each run its own"
          " checkpoint directory."
      )
    self.data_position = saved.data_position
    # The engines hold the initial weights (published before Tunix
    # restored); the first resumed rollout must sample the restored policy.
    republish()
    if self._host_index == 0:
      print(describe_resume(saved), flush=True)
    return saved.global_step

  def dataset_resume(self, trainer: Any, training_config: Any
                     ) -> admission.ResumeAt | None:
    """Where admission restarts; None: at the start."""
    if not trainer.train_steps:
      return None
    tc = training_config
    return admission.ResumeAt(
        data_position=self.data_position,
        fast_forward_micro_batches=trainer.iter_steps,
        micro_batch_size=tc.train_micro_batch_size or tc.mini_batch_size,
    )

  def step_closed(self, batch: Any) -> None:
    """Advances the data position past a closed step's batch (if any)."""
    if batch is not None and batch.stream_end >= 0:
      self.data_position = batch.stream_end

  def save_final(self, trainer: Any, global_step: int) -> None:
    """Saves the last step if the interval did not (Tunix's own final save
    carries no resume state)."""
    if self.root is None:
      return
    from tunix.sft import utils as sft_utils  # pylint: disable=g-import-not-at-top

    manager = trainer.checkpoint_manager
    last = manager.latest_step()
    if trainer.train_steps and (last is None or last < trainer.train_steps):
      manager.save(
          trainer.train_steps, trainer.model, trainer.optimizer,
          save_only_lora_params=sft_utils.is_lora_enabled(trainer.model),
          force=True,
          custom_metadata=self.metadata(global_step, self.data_position),
      )
