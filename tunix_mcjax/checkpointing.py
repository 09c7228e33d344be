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

Before anything is restored, the checkpoint a run would resume from is
checked as far as it can be without reading arrays (`verify`: metadata,
OCDBT manifests and B-tree nodes, data file sizes), and a numbered directory
that is no checkpoint (which Orbax would take for one) is refused; a
restore that fails anyway names the checkpoint and the file
(`ClusterCheckpoints.restoring`). `--resume_step N` resumes from an earlier
complete checkpoint: the launching process sets the later steps aside
(`set_aside_later`) once every check has passed.

A root may be a URI (`gs://bucket/run`): it is read as Orbax reads it,
through `etils.epath` (`checkpoint_files`, docs/checkpointing.md).

No JAX at import (JAX, Flax and Tunix are imported where a cluster uses
them, in `ClusterCheckpoints`): the example checks a directory before any
host starts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from tunix_mcjax import admission
from tunix_mcjax import checkpoint_files
# Re-exported: callers and tests know these as checkpointing's names.
from tunix_mcjax.checkpoint_files import (  # pylint: disable=unused-import
    ACTOR_SUBDIR, GLOBAL_STEP_KEY, MCJAX_KEY, SET_ASIDE_SUBDIR,
    CheckpointError, SavedCheckpoint, actor_directory, as_path,
    check_writable, complete_steps, describe_set_aside, is_remote, latest,
    orbax_steps, restore_error, saved_checkpoint, set_aside_later, verify)


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


def check_resume(root: str, fingerprint: Mapping[str, Any], *,
                 step: int | None = None, sets_aside_later: bool = False
                 ) -> SavedCheckpoint | None:
  """The checkpoint a run would resume from, checked: intact (`verify`),
  written by mcjax, with `fingerprint`.

  Args:
    root: the checkpoint root directory.
    fingerprint: the job's values a resume must not change.
    step: --resume_step: resume from this complete checkpoint, not the
      latest.
    sets_aside_later: the caller (the launching process) sets the steps
      after `step` aside once every check passed (`set_aside_later`);
      False: they must be gone already (a host: Tunix restores the latest).

  Raises:
    CheckpointError: a numbered directory that is no checkpoint; `step` not
      a complete checkpoint; a corrupt checkpoint (the file is named); one
      not written by mcjax, or with other configuration values (each is
      named).
  """
  actor = actor_directory(root)
  seen = orbax_steps(root)
  complete = complete_steps(root)
  if step is not None and step not in complete:
    have = (f"its complete checkpoints are steps"
            f" {', '.join(map(str, complete))}" if complete else
            "it holds none (drop --resume_step to start afresh)")
    raise CheckpointError(
        f"--resume_step {step}: {actor} holds no complete checkpoint of step"
        f" {step}; {have}.")
  target = step if step is not None else (complete[-1] if complete else None)
  for s in seen:
    if s in complete or (step is not None and s > step):
      continue  # A later stray goes aside with the later checkpoints.
    stray = (f"{actor / str(s)} is not a checkpoint (it has no"
             f" {checkpoint_files.STEP_METADATA_FILE}), but Orbax takes"
             f" every numbered directory in {actor} for one")
    if target is not None and s < target:
      raise CheckpointError(
          f"{stray} (and may delete it as an old one); move it out of"
          f" {actor}.")
    resume = (f", or pass --resume_step {target} to resume from the latest"
              f" complete checkpoint (setting {s} aside)"
              if target is not None else "")
    raise CheckpointError(
        f"{stray} and would restore it as the latest; move it out of"
        f" {actor}{resume}.")
  if target is None:
    return None
  later = [s for s in seen if s > target]
  if later and not sets_aside_later:
    raise CheckpointError(
        f"--resume_step {step}: {actor} still holds later steps"
        f" ({', '.join(map(str, later))}), which Tunix would restore instead;"
        " the launching process sets them aside before any host starts; on"
        " a cluster started without it, move them out of"
        f" {actor} first.")
  problem = verify(actor / str(target))
  if problem is not None:
    raise CheckpointError(
        f"Checkpoint {actor / str(target)} is corrupt: {problem}; "
        + checkpoint_files.fallback_advice(
            root, target, explicit=step is not None) + ".")
  saved = saved_checkpoint(root, target)
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


def _raised_in(error: BaseException, function: str) -> bool:
  """Whether `error` passed through a frame of a function named so (Tunix's
  `CheckpointManager.maybe_restore`)."""
  tb = error.__traceback__
  while tb is not None:
    if tb.tb_frame.f_code.co_name == function:
      return True
    tb = tb.tb_next
  return False


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
     checkpoint (inside `RLCluster.__init__`, run within `restoring()`: a
     restore that fails is one `CheckpointError` naming the file): a
     corrupt checkpoint, or one of another configuration, is refused
     before anything is restored.
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
               job_fingerprint: Mapping[str, Any] | None = None,
               resume_step: int | None = None):
    """Initializes the state.

    Args:
      root: Tunix's `checkpoint_root_directory` (None: no checkpoints).
      ledger: the cluster's training `admission.StepLedger` (a save inside
        a step takes the data position of its oldest open batch).
      num_hosts: this job's host count (saved, informational).
      host_index: this host (host 0 prints the resume line).
      job_fingerprint: the job's values a resume must not change
        (`McJaxOptions.checkpoint_fingerprint`), beside the cluster's own.
      resume_step: --resume_step: the checkpoint step the job resumes from
        (the launching process has set later ones aside); None: the latest.
    """
    self.root = root
    self._ledger = ledger
    self._num_hosts = num_hosts
    self._host_index = host_index
    self._job_fingerprint = dict(job_fingerprint or {})
    self._resume_step = resume_step
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
    self._resume_from = check_resume(self.root, self._fingerprint,
                                     step=self._resume_step)
    return self._resume_from

  @contextlib.contextmanager
  def restoring(self) -> Iterator[None]:
    """Around Tunix's restore (`RLCluster.__init__`): a restore of the
    checked checkpoint that fails (damage `verify` cannot see, or the files
    changed since) is one `CheckpointError` naming the checkpoint and file.
    """
    try:
      yield
    except CheckpointError:
      raise
    except Exception as e:  # pylint: disable=broad-except
      if self._resume_from is None or not _raised_in(e, "maybe_restore"):
        raise
      raise restore_error(self._resume_from.path, e) from e

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
