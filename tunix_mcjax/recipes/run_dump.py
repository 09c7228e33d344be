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

"""`--dump_dir`: what a run did, written for the tests and for debugging.

Per host `rollouts_host<i>.json` (every scored row: prompts, completions,
summed rewards; `eval_rollouts_host<i>.json` for evaluation rows) and, with
LoRA, `engine_params_host<i>.npz` (what the host's engine holds after the
last publication); on host 0 `learner_metrics.json` (what Tunix's learner
logs), `records.json` (the step records), `params.npz` and
`params_init.npz` (the actor's parameters after and before training).
Kept out of `grpo_job.run`, which only calls these hooks when a dump is asked
for; the run itself is the same either way.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

import numpy as np


class RunDump:
  """Collects a run's rows and metrics, and writes them to `out_dir`."""

  def __init__(self, out_dir: str):
    self.out_dir = out_dir
    self.calls: list[dict[str, Any]] = []
    self.eval_calls: list[dict[str, Any]] = []
    self.learner_log = LearnerMetricsLog()
    # The agentic task's trajectories (`agentic_tasks`), as its
    # environments finish them.
    self.agent_rows: list[dict[str, Any]] = []
    self._init_params: Any = None

  def reward_fns(self, reward_fns: Any) -> list[Any]:
    """`reward_fns`, each wrapped to record the rows it scores."""
    fns = reward_fns if isinstance(reward_fns, list) else [reward_fns]

    def wrap(fn, first):
      @functools.wraps(fn)
      def wrapped(prompts, completions, **kwargs):
        rewards = fn(prompts, completions, **kwargs)
        # Tunix passes the learner's mode to reward functions.
        calls = (self.eval_calls if str(kwargs.get("mode")) == "eval"
                 else self.calls)
        if first:
          calls.append({"prompts": list(prompts),
                        "completions": list(completions),
                        "rewards": [float(r) for r in rewards]})
        else:
          calls[-1]["rewards"] = [
              a + float(b) for a, b in zip(calls[-1]["rewards"], rewards)]
        return rewards
      return wrapped

    return [wrap(f, i == 0) for i, f in enumerate(fns)]

  def before_training(self, cluster: Any) -> None:
    """Keeps the initial parameters (tests check that training moved them)."""
    from tunix_mcjax import publication  # pylint: disable=g-import-not-at-top

    cluster.with_external_metrics_logger(self.learner_log)
    self._init_params = publication.gathered_params(
        cluster.actor_trainer.model)

  def write(self, cluster: Any, records: list[dict[str, Any]], *, host: int,
            engine_params: bool) -> None:
    """Writes this host's files; `engine_params`: also its engine's."""
    from tunix_mcjax import publication  # pylint: disable=g-import-not-at-top

    # Every host joins the gather (a global program).
    params = publication.gathered_params(cluster.actor_trainer.model)
    os.makedirs(self.out_dir, exist_ok=True)
    self._json(f"rollouts_host{host}.json", self.calls)
    if self.agent_rows:
      self._json(f"agent_rows_host{host}.json", sorted(
          self.agent_rows, key=lambda r: (r["prompt_index"], r["pair"])))
    if self.eval_calls:
      self._json(f"eval_rollouts_host{host}.json", self.eval_calls)
    layout = _engine_layout(cluster.rollout)
    if layout is not None:
      self._json(f"engine_layout_host{host}.json", layout)
    if engine_params:
      np.savez(self._path(f"engine_params_host{host}.npz"),
               **_npz_floats(_engine_params(cluster.rollout.model())))
    if host == 0:
      self._json("learner_metrics.json", self.learner_log.entries)
      np.savez(self._path("params.npz"), **_npz_floats(params))
      np.savez(self._path("params_init.npz"),
               **_npz_floats(self._init_params))
      self._json("records.json", records)

  def _path(self, name: str) -> str:
    return os.path.join(self.out_dir, name)

  def _json(self, name: str, value: Any) -> None:
    with open(self._path(name), "w") as f:
      json.dump(value, f)


class LearnerMetricsLog:
  """Tunix's external metrics logger: the values its learner logs.

  One entry per logged buffer: {"mode", "step", "metrics": {name: value}},
  each value `op(values)` as Tunix's `_log_metrics` computes it (numeric
  metrics with an op only).
  """

  def __init__(self):
    self.entries: list[dict[str, Any]] = []

  def __call__(self, buffer: Any) -> None:
    values = {}
    for name, (vals, op) in buffer.metrics.items():
      if op is None:
        continue
      try:
        arr = np.array(vals)
      except Exception:  # pylint: disable=broad-except
        continue
      if arr.dtype.kind in "biuf" and arr.size:
        values[name] = float(op(arr))
    self.entries.append({"mode": str(buffer.mode),
                         "step": int(buffer.global_steps), "metrics": values})


def _engine_params(model) -> dict[str, np.ndarray]:
  """A host-local engine model's parameters as numpy arrays."""
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import publication  # pylint: disable=g-import-not-at-top

  return {
      k: np.asarray(v) for k, v in publication.flat_by_name(
          nnx.state(model, nnx.Param)).items()
  }


def _engine_layout(engine: Any) -> dict[str, Any] | None:
  """This host's engine mesh and parameter specs (tests check engine tp);
  None for an engine without a host-local layout."""
  from tunix_mcjax import tree_paths  # pylint: disable=g-import-not-at-top

  mesh = getattr(engine, "engine_mesh", None)
  shardings = getattr(engine, "param_shardings", None)
  if mesh is None or shardings is None:
    return None
  return {
      "mesh": {str(k): int(v) for k, v in mesh.shape.items()},
      "param_specs": {
          tree_paths.dotted(k): str(getattr(v, "spec", v))
          for k, v in tree_paths.flat_params(shardings()).items()},
  }


def _npz_floats(arrays: dict[str, Any]) -> dict[str, Any]:
  """bfloat16 arrays as float32 (exact) for .npz files, which store
  ml_dtypes' types as opaque bytes."""
  return {k: np.asarray(v, np.float32) if np.asarray(v).dtype.kind == "V"
          else v for k, v in arrays.items()}
