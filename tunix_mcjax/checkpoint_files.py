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

"""What lies under a checkpoint root, read from disk without JAX.

The steps Orbax sees and which of them are complete checkpoints, the
metadata mcjax saves with each (`SavedCheckpoint`), and the checks a resume
needs before anything is restored: a checkpoint intact as far as can be told
without reading arrays (`verify`: metadata, OCDBT manifests and B-tree nodes,
data file sizes), the advice when it is not, and `--resume_step`'s setting
aside of later steps. `checkpointing` builds the resume on these and
re-exports them.

Roots are local paths or URIs (`gs://bucket/run`): a URI is an
`etils.epath.Path`, as Orbax's own, so a remote root is listed, read,
checked and set aside through the same store Orbax writes it with (gcsfs,
through fsspec, for gs:// where TensorFlow is absent; docs/checkpointing.md).
A local path stays a `pathlib.Path`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tunix_mcjax import ocdbt_index

if TYPE_CHECKING:
  from etils import epath

# Tunix's RLCluster saves the actor trainer under <root>/actor.
ACTOR_SUBDIR = "actor"
# The key of mcjax's entry in a checkpoint's custom metadata.
MCJAX_KEY = "mcjax"
# Tunix's key: global steps completed when the checkpoint was written.
GLOBAL_STEP_KEY = "global_step"
# Orbax's per-step metadata file (its custom metadata is read from here so
# that reading needs neither JAX nor a checkpoint manager).
STEP_METADATA_FILE = "_CHECKPOINT_METADATA"
# Where `set_aside_later` moves the steps after a --resume_step (beside
# <root>/actor, out of Orbax's sight).
SET_ASIDE_SUBDIR = ACTOR_SUBDIR + ".set_aside"
# An Orbax PyTree item's tree metadata, and its sharding file (JSON both).
_TREE_METADATA_FILE = "_METADATA"
_SHARDING_FILE = "_sharding"
# Array kinds of Orbax's tree metadata that are stored in the item's
# tensorstore (zarr arrays in OCDBT).
_STORED_ARRAY_TYPES = ("jax.Array", "np.ndarray")



class CheckpointError(ValueError):
  """A checkpoint directory or checkpoint that cannot be used; the message
  says what to change."""



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


def as_path(location: str | os.PathLike[str]) -> pathlib.Path | epath.Path:
  """`location` as a path: a URI such as `gs://bucket/run` as the
  `etils.epath.Path` Orbax reads it with (pathlib would fold its `//` into
  `gs:/bucket/run`); a local path as a `pathlib.Path`, as always (the same
  methods: `/`, exists, iterdir, glob, read_bytes, rename, ...)."""
  if not is_remote(location):
    return pathlib.Path(location)
  # Imported here: only a remote root needs it (0.2 s).
  from etils import epath  # pylint: disable=g-import-not-at-top,redefined-outer-name

  return epath.Path(location)


def is_remote(location: str | os.PathLike[str]) -> bool:
  """Whether `location` is a URI (`gs://...`), not a local path."""
  return "://" in os.fspath(location)


def actor_directory(root: str) -> pathlib.Path | epath.Path:
  return as_path(root) / ACTOR_SUBDIR


def orbax_steps(root: str) -> list[int]:
  """Every step Orbax sees under `root`, ascending: each numbered directory
  of `<root>/actor`, a checkpoint or not (a save in flight excluded: on
  gs://, where Orbax writes in place, a step without its
  `commit_success.txt`)."""
  from orbax.checkpoint import path as ocp_path  # pylint: disable=g-import-not-at-top

  actor = actor_directory(root)
  if not actor.is_dir():
    return []
  try:
    return sorted(ocp_path.step.checkpoint_steps(actor))
  except FileNotFoundError:
    # On an object store a directory is its objects: the last one deleted
    # between the check above (or a listing cached in this process) and
    # the listing leaves no steps, not an error.
    return []


def complete_steps(root: str) -> list[int]:
  """Steps of the complete checkpoints under `root`, ascending.

  Orbax only renames a step's temporary directory into place once every host
  has written it; a save interrupted by a kill leaves a
  `<step>.orbax-checkpoint-tmp-*` directory, which is not a checkpoint.
  Nor is a numbered directory without Orbax's step metadata (a stray one,
  which Orbax itself would still take for a step: `check_resume` refuses it).
  """
  actor = actor_directory(root)
  return [s for s in orbax_steps(root)
          if (actor / str(s) / STEP_METADATA_FILE).exists()]


def read_json(path: pathlib.Path | epath.Path) -> tuple[Any, str | None]:
  """(`path`'s JSON, None), or (None, what is wrong with it, naming it)."""
  try:
    data = path.read_bytes()
  except FileNotFoundError:
    return None, f"{path} is missing"
  except OSError as e:
    return None, f"{path} cannot be read ({e.strerror or e})"
  except Exception as e:  # pylint: disable=broad-except
    # A remote store's own errors (gcsfs's HttpError is no OSError).
    if not is_remote(path):
      raise
    return None, f"{path} cannot be read ({_error_words(e, remote=True)})"
  try:
    text = data.decode("utf-8")
  except UnicodeDecodeError:
    return None, f"{path} is not UTF-8 text"
  try:
    return json.loads(text), None
  except json.JSONDecodeError as e:
    return None, f"{path} is not valid JSON ({e})"


def saved_checkpoint(root: str, step: int) -> SavedCheckpoint:
  """The checkpoint of `step` under `root`, as its metadata describes it.

  Raises:
    CheckpointError: its metadata file is missing or unreadable.
  """
  step_dir = actor_directory(root) / str(step)
  meta, problem = read_json(step_dir / STEP_METADATA_FILE)
  if problem is None and not isinstance(meta, dict):
    problem = f"{step_dir / STEP_METADATA_FILE} is not a JSON object"
  if problem is not None:
    raise CheckpointError(
        f"Checkpoint {step_dir} is corrupt: {problem}; "
        + fallback_advice(root, step, explicit=False) + ".")
  custom = meta.get("custom_metadata") or {}
  ours = custom.get(MCJAX_KEY) or {}
  return SavedCheckpoint(
      path=str(step_dir),
      step=step,
      global_step=custom.get(GLOBAL_STEP_KEY),
      data_position=ours.get("data_position"),
      fingerprint=ours.get("fingerprint") or {},
      num_hosts=ours.get("num_hosts"),
  )


def latest(root: str) -> SavedCheckpoint | None:
  """The latest complete checkpoint under `root`, or None."""
  steps = complete_steps(root)
  return saved_checkpoint(root, steps[-1]) if steps else None


# --- what a restore would read, checked without reading arrays --------------


def _short_error(error: BaseException, limit: int = 300) -> str:
  text = " ".join(str(error).split())
  return text if len(text) <= limit else text[:limit] + "..."


def _error_words(error: BaseException, *, remote: bool) -> str:
  """An OSError's own words (as always for local paths); a remote store's
  error, whose text may be no more than the request's URL, with its type."""
  if isinstance(error, OSError) and (error.strerror or not remote):
    return str(error.strerror or error)
  return f"{type(error).__name__}: {_short_error(error)}"


def _pytree_problem(item_dir: pathlib.Path | epath.Path,
                    stores: list[ocdbt_index.Store]) -> str | None:
  """An Orbax PyTree item's JSON files; its OCDBT store joins `stores`
  (checked after every item's JSON, `ocdbt_index`)."""
  tree, problem = read_json(item_dir / _TREE_METADATA_FILE)
  if problem is not None:
    return problem
  if not isinstance(tree, dict) or not isinstance(
      tree.get("tree_metadata"), dict):
    return (f"{item_dir / _TREE_METADATA_FILE} is not Orbax tree metadata"
            " (no tree_metadata object)")
  for extra in (item_dir / _SHARDING_FILE,
                *sorted((item_dir / "array_metadatas").glob("*"))):
    if extra.exists():
      _, problem = read_json(extra)
      if problem is not None:
        return problem
  arrays = []
  for entry in tree["tree_metadata"].values():
    value = (entry or {}).get("value_metadata") or {}
    if (value.get("value_type") in _STORED_ARRAY_TYPES
        and not value.get("skip_deserialize")):
      arrays.append(".".join(
          str(k.get("key")) for k in entry.get("key_metadata") or ()))
  if tree.get("use_ocdbt", True):
    stores.append(ocdbt_index.Store(path=str(item_dir), arrays=tuple(arrays),
                                    zarr3=bool(tree.get("use_zarr3"))))
    return None
  for name in arrays:  # One zarr directory per array.
    if not (item_dir / name).is_dir():
      return (f"{item_dir / name} is missing (listed in"
              f" {item_dir / _TREE_METADATA_FILE})")
  return None


def verify(step_dir: str | os.PathLike[str]) -> str | None:
  """What would make restoring the checkpoint in `step_dir` fail, naming
  the file; None: intact as far as can be told without reading arrays.

  Reads what Orbax reads before the arrays: the step's metadata, each
  item's tree metadata and sharding (JSON) and its OCDBT manifest and B-tree
  nodes (`ocdbt_index`, in a child process); every array the tree metadata
  lists must be in the store, and every value the store indexes must lie
  within its data file (found: a truncated or missing array file). The
  array bytes themselves are not read: damage inside a file of the right
  size surfaces at restore (`ClusterCheckpoints.restoring`). A remote
  checkpoint (gs://) is checked the same way, through its store.
  """
  step_dir = as_path(step_dir)
  meta_file = step_dir / STEP_METADATA_FILE
  meta, problem = read_json(meta_file)
  if problem is not None:
    return problem
  if not isinstance(meta, dict):
    return f"{meta_file} is not a JSON object"
  handlers = meta.get("item_handlers")
  if isinstance(handlers, dict):
    items = sorted(handlers.items())
  else:  # Older layouts: every item directory holding tree metadata.
    items = [(p.name, "PyTreeCheckpointHandler")
             for p in sorted(step_dir.iterdir())
             if (p / _TREE_METADATA_FILE).exists()]
  stores = []
  for name, handler in items:
    item_dir = step_dir / name
    if not item_dir.is_dir():
      return f"{item_dir} is missing (listed in {meta_file})"
    if "PyTree" in str(handler) or "Standard" in str(handler):
      problem = _pytree_problem(item_dir, stores)
      if problem is not None:
        return problem
  return ocdbt_index.check_stores(stores)


def _previous_intact(root: str, before: int) -> int | None:
  """The latest complete checkpoint before step `before` that verifies."""
  for step in reversed(complete_steps(root)):
    if step < before and verify(actor_directory(root) / str(step)) is None:
      return step
  return None


def fallback_advice(root: str, step: int, *, explicit: bool) -> str:
  """What to do about the corrupt checkpoint of `step`."""
  step_dir = actor_directory(root) / str(step)
  previous = _previous_intact(root, step)
  if previous is not None:
    return (f"--resume_step {previous} resumes from the previous complete"
            " checkpoint" + ("" if explicit else f", or delete {step_dir}"))
  return ("no earlier checkpoint there is intact: pass another"
          " --checkpoint_dir (checkpoint_root_directory), or delete"
          f" {actor_directory(root)} to start afresh")


def restore_error(path: str, error: BaseException) -> CheckpointError:
  """A failed restore of the checkpoint in `path`, as one line naming the
  file (`verify`'s finding, else the innermost error's own words)."""
  step_dir = as_path(path)
  problem = verify(step_dir)
  if problem is None:
    cause = error
    while cause.__cause__ is not None or cause.__context__ is not None:
      cause = cause.__cause__ or cause.__context__
    problem = f"{type(cause).__name__}: {_short_error(cause)}"
  root = str(step_dir.parent.parent)
  return CheckpointError(
      f"Restoring checkpoint {step_dir} failed: {problem}; "
      + fallback_advice(root, int(step_dir.name), explicit=False) + ".")


def set_aside_later(root: str, step: int
                    ) -> list[pathlib.Path | epath.Path]:
  """Moves every step after `step` (checkpoint or not) out of Orbax's sight,
  into `<root>/actor.set_aside/`; returns where each went.

  For --resume_step: Tunix restores the latest step, and the resumed run
  writes its own later checkpoints. The launching process calls this once
  every check has passed and the directory is locked; nothing is deleted.
  On an object store (gs://) a move copies every object, then deletes the
  originals.

  Raises:
    CheckpointError: a step could not be moved (the message names it).
  """
  actor = actor_directory(root)
  later = [s for s in orbax_steps(root) if s > step]
  aside = as_path(root) / SET_ASIDE_SUBDIR
  moved = []
  for s in later:
    target, n = aside / str(s), 0
    while target.exists():
      n += 1
      target = aside / f"{s}.{n}"
    try:
      if is_remote(root):
        _move_objects(actor / str(s), target)
      else:
        aside.mkdir(exist_ok=True)
        os.rename(actor / str(s), target)
    except Exception as e:  # pylint: disable=broad-except
      # OSError locally; a remote store raises its own errors too.
      if not isinstance(e, OSError) and not is_remote(root):
        raise
      raise CheckpointError(
          f"--resume_step {step}: cannot move {actor / str(s)} aside to"
          f" {target} ({_error_words(e, remote=is_remote(root))}); move it"
          f" out of {actor} yourself and rerun.") from e
    moved.append(target)
  return moved


def _objects(prefix: epath.Path) -> list[epath.Path]:
  """Every object under `prefix` (an object store's "directory")."""
  out = []
  for child in prefix.iterdir():
    out.extend(_objects(child) if child.is_dir() else [child])
  return out


def _move_objects(source: epath.Path, target: epath.Path) -> None:
  """Moves every object under the prefix `source` to `target`: an object
  store has no directory to rename. Each is copied (streamed through this
  process) and its size checked before any original is deleted, so a
  failure leaves every original in place. All through epath, the store
  instance Orbax lists with (another would keep stale listings)."""
  objects = _objects(source)
  for path in objects:
    copy = target / path.relative_to(source)
    path.copy(copy)
    if copy.stat().length != path.stat().length:
      raise OSError(f"{copy} is not a whole copy of {path}")
  for path in objects:
    path.unlink()


def describe_set_aside(step: int,
                       moved: list[pathlib.Path | epath.Path]) -> str:
  """The line the launching process prints after `set_aside_later`."""
  names = ", ".join(p.name for p in moved)
  return (f"[mcjax] --resume_step {step}: set aside the later step(s) {names}"
          f" in {moved[0].parent} (not resumed from; delete them once no"
          " longer needed)")


def check_writable(root: str, *, probe_name: str | None = None) -> None:
  """Raises CheckpointError unless `root` can be created and written.

  Checked before training starts, so an unwritable directory is reported
  before hours of training rather than at the first save. On an object
  store (gs://) nothing is created but the probe object: directories are
  key prefixes there, and the bucket must exist.
  """
  try:
    if not is_remote(root):
      actor_directory(root).mkdir(parents=True, exist_ok=True)
    # Per process: hosts sharing the directory probe at the same time. Not
    # in <root>/actor, which the other hosts list for steps meanwhile: on an
    # object store the probe alone makes that "directory" exist, and its
    # deletion mid-listing made gcsfs raise FileNotFoundError there.
    probe = as_path(root) / (
        probe_name or f".mcjax_write_probe_{os.getpid()}")
    probe.write_bytes(b"ok")
    probe.unlink()
  except Exception as e:  # pylint: disable=broad-except
    # OSError locally; a remote store raises its own errors too.
    if not isinstance(e, OSError) and not is_remote(root):
      raise
    raise CheckpointError(
        f"Checkpoint directory {root!r} is not writable"
        f" ({_error_words(e, remote=is_remote(root))}); pass a"
        " --checkpoint_dir (checkpoint_root_directory) that this job can"
        " create and write on every host."
    ) from e
