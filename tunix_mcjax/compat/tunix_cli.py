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

"""The private names of Tunix's GRPO CLI (`tunix.cli.grpo_main`) we use.

`tunix_mcjax.cli` runs Tunix's own `GrpoPipeline` and `main`, and swaps the
cluster backend in by rebinding module names that `GrpoPipeline` looks up at
call time (`model_lib.create_model`, `rl_cluster_lib.RLCluster`,
`data_lib.post_init_dataset`) and the `GrpoPipeline` name `main` calls. This
module is the only place that reaches into `tunix.cli.grpo_main`; each name
is a row of `touch_points.TOUCH_POINTS`, and `check_tunix_seams` verifies
those rows against the installed Tunix at start-up, so a Tunix upgrade that
moves a call site fails loudly instead of silently running the stock cluster
in several processes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
import contextlib
import inspect
from typing import Any

from tunix.cli import grpo_main as _tunix_grpo_main

from tunix_mcjax.compat import touch_points

MODULE = "tunix.cli.grpo_main"

# Tunix's pipeline class, captured at import: `run_main` rebinds the module
# name to a subclass while Tunix's `main` runs.
GrpoPipeline = _tunix_grpo_main.GrpoPipeline

# The touch points of Tunix's CLI: what `check_tunix_seams` verifies.
TUNIX_SEAMS: tuple[touch_points.TouchPoint, ...] = tuple(
    row for row in touch_points.TOUCH_POINTS if row.module == MODULE
)
# Module names GrpoPipeline looks up at call time, which `replaced_calls`
# may rebind.
REBINDABLE_MODULES = ("model_lib", "rl_cluster_lib", "data_lib")


# The module's names as Tunix defines them: the seams are checked while
# `run_main` or `replaced_calls` has some of them rebound.
_ORIGINAL_NAMES = dict(vars(_tunix_grpo_main))


def _resolve(dotted: str) -> Any:
  first, *rest = dotted.split(".")
  if first not in _ORIGINAL_NAMES:
    raise AttributeError(first)
  obj = _ORIGINAL_NAMES[first]
  for part in rest:
    obj = getattr(obj, part)
  return obj


def check_tunix_seams() -> None:
  """Raises if Tunix's CLI no longer has or calls what tunix_mcjax uses."""
  problems = []
  for row in TUNIX_SEAMS:
    try:
      obj = _resolve(row.attr)
    except AttributeError:
      problems.append(f"{MODULE}.{row.attr} is gone")
      continue
    if row.kind != "source":
      continue
    try:
      source = inspect.getsource(obj)
    except (OSError, TypeError):
      problems.append(f"{MODULE}.{row.attr} cannot be read")
      continue
    if row.needle not in source:
      problems.append(f"{row.attr} no longer calls {row.needle.rstrip('(')}")
  if problems:
    raise RuntimeError(
        "The installed Tunix CLI does not match what tunix_mcjax.cli expects"
        f" ({'; '.join(problems)}); update tunix_mcjax/compat/tunix_cli.py"
        " (and its rows in compat/touch_points.py) for this Tunix version."
    )


class Overlay:
  """A module with some attributes replaced; every other name delegates."""

  def __init__(self, module: Any, **replacements: Any):
    self._module = module
    self.__dict__.update(replacements)

  def __getattr__(self, name: str) -> Any:
    return getattr(self._module, name)


@contextlib.contextmanager
def _rebound(namespace: Any, bindings: Mapping[str, Any]) -> Iterator[None]:
  """Temporarily rebinds names in `namespace` (a module)."""
  saved = {name: getattr(namespace, name) for name in bindings}
  for name, value in bindings.items():
    setattr(namespace, name, value)
  try:
    yield
  finally:
    for name, value in saved.items():
      setattr(namespace, name, value)


def pipeline_module(name: str) -> Any:
  """The module GrpoPipeline calls as `name`, one of REBINDABLE_MODULES."""
  if name not in REBINDABLE_MODULES:
    raise ValueError(f"{name!r} is not one of {REBINDABLE_MODULES}.")
  return _ORIGINAL_NAMES[name]


@contextlib.contextmanager
def replaced_calls(
    **replacements: Mapping[str, Callable[..., Any]],
) -> Iterator[None]:
  """Replaces functions GrpoPipeline calls through its module names.

  E.g. `replaced_calls(model_lib={"create_model": f})` makes
  `GrpoPipeline.create_rl_cluster`'s `model_lib.create_model(...)` call `f`
  until the block ends; every other name of `model_lib` is the real one.

  Args:
    **replacements: module name (one of REBINDABLE_MODULES) -> {attribute:
      replacement}.

  Yields:
    Nothing; the names are restored on exit.
  """
  bindings = {
      name: Overlay(pipeline_module(name), **attrs)
      for name, attrs in replacements.items()
  }
  with _rebound(_tunix_grpo_main, bindings):
    yield


@contextlib.contextmanager
def learner_with_eval(eval_ds: Any) -> Iterator[None]:
  """GrpoPipeline's GRPO learner trains with `eval_ds` inside the block.

  Tunix's `_run` builds `grpo_learner.GrpoLearner(...)` and calls
  `.train(dataset)`, discarding the test split; inside this block that name
  is a subclass whose `train` passes `eval_ds` (when the caller gave none).
  """
  from tunix.rl.grpo import grpo_learner  # pylint: disable=g-import-not-at-top

  with _rebound(grpo_learner, {"GrpoLearner": _training_with(
      grpo_learner.GrpoLearner, eval_ds)}):
    yield


@contextlib.contextmanager
def agentic_learner(eval_ds: Any = None) -> Iterator[None]:
  """Inside the block, the agentic learner `_run` builds
  (`agentic_grpo_learner.GRPOLearner`, imported at call time) is
  `compat.agentic_learner.learner_class()`; with `eval_ds`, one whose
  `train` evaluates on it (`_run` trains without its test split)."""
  from tunix.rl.agentic import agentic_grpo_learner  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.compat import agentic_learner as agentic  # pylint: disable=g-import-not-at-top

  cls = agentic.learner_class()
  with _rebound(agentic_grpo_learner, {"GRPOLearner": cls if eval_ds is None
                                       else _training_with(cls, eval_ds)}):
    yield


def _training_with(cls: type[Any], eval_ds: Any) -> type[Any]:
  """A subclass of learner `cls` whose `train` passes `eval_ds` when the
  caller gives none."""

  class LearnerWithEval(cls):

    def train(self, train_ds, eval_ds_=None, skip_jit=False):
      return super().train(
          train_ds, eval_ds if eval_ds_ is None else eval_ds_, skip_jit)

  return LearnerWithEval


def run_main(argv: Sequence[str], pipeline_cls: Callable[..., Any]) -> None:
  """Tunix's own `main(argv)` with `pipeline_cls` in place of GrpoPipeline."""
  with _rebound(_tunix_grpo_main, {"GrpoPipeline": pipeline_cls}):
    _tunix_grpo_main.main(list(argv))


def resolve_mesh_owners(pipeline: Any) -> dict[Any, Any]:
  """Role -> the role whose mesh it runs on, as Tunix's placement decides.

  Args:
    pipeline: A GrpoPipeline (parsed config).

  Raises:
    ValueError: Tunix finds the `same_mesh_as` settings inconsistent.
  """
  return pipeline._resolve_mesh_owners()  # pylint: disable=protected-access


def role_model_key(pipeline: Any, role: Any) -> str:
  """The config section of `role`, e.g. "reference_model_config"."""
  return pipeline._ROLE_TO_MODEL_KEY[role]  # pylint: disable=protected-access


def pathways_bns() -> str | None:
  """The value of Tunix's `--pathways_bns` flag (parsed by absl)."""
  return _tunix_grpo_main._PATHWAYS_BNS.value  # pylint: disable=protected-access


class MeshShape:
  """Where Tunix's `GrpoPipeline.create_rollout_config` wants a rollout mesh
  for rollout_engine='vllm' but no devices may be taken (the launching
  process of an mcjax_da job, before hosts start): Tunix 0.1.7 reads only
  `.devices.shape` of it (its vLLM's data and tensor parallel sizes; mcjax's
  engines size themselves from their host's own mesh)."""

  def __init__(self, shape: Sequence[int]):
    import numpy as np  # pylint: disable=g-import-not-at-top

    self.devices = np.empty(tuple(shape), dtype=object)
