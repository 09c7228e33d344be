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

"""The one table of every name tunix_mcjax uses beyond Tunix's public API.

Each row names an upstream module, the private (or undocumented) name we
reach in it, which `tunix_mcjax.compat` module wraps it, and why. Nothing
outside `tunix_mcjax.compat` touches these names. tests/test_compat.py walks
this table against the installed packages, so a Tunix (or tpu-inference)
upgrade is one table to read and one test to run.

Kinds:
  attr: `module.attr` (a dotted path) must resolve.
  source: the text `needle` must occur in the source of `module.attr` (a
    call site we depend on, e.g. a method that calls a name we rebind).
  literal: the string `needle` must occur in the source of `module` (a
    metric key Tunix writes as a literal).
"""

from __future__ import annotations

import dataclasses

KINDS = ("attr", "source", "literal")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TouchPoint:
  """One upstream name we rely on.

  Attributes:
    module: import path of the upstream module.
    attr: dotted attribute path inside `module` ("" for the module itself).
    kind: one of KINDS.
    needle: the text that must occur, for kinds "source" and "literal".
    wrapper: the `tunix_mcjax.compat` module that wraps this name.
    why: what we use it for, and the public hook that would replace it.
    optional_dependency: a package that may be absent here (e.g.
      "tpu_inference"); the row is then skipped, not failed.
  """

  module: str
  attr: str
  kind: str = "attr"
  needle: str = ""
  wrapper: str
  why: str
  optional_dependency: str | None = None

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
    if self.kind != "attr" and not self.needle:
      raise ValueError(f"kind {self.kind!r} needs a needle ({self.attr}).")


_RL = "tunix.rl.rl_cluster"
_UTILS = "tunix.rl.utils"
_GRPO = "tunix.rl.grpo.grpo_learner"

TOUCH_POINTS: tuple[TouchPoint, ...] = (
    # --- tunix.rl.rl_cluster.RLCluster: the cluster mcjax subclasses -------
    TouchPoint(
        module=_RL, attr="RLCluster._get_mesh_and_logical_axis_rules_cm",
        wrapper="compat (McJaxRLCluster overrides it)",
        why="the mesh a role runs under; mcjax returns the host-local mesh"
        " for ROLLOUT. Upstream: a public, overridable role_context(role).",
    ),
    TouchPoint(
        module=_RL, attr="RLCluster._log_metrics",
        wrapper="compat (McJaxRLCluster overrides it)",
        why="Tunix's per-step metric logging, routed through our exporter.",
    ),
    TouchPoint(
        module=_RL, attr="RLCluster.__init__",
        kind="source", needle="self._rl_metrics_logger",
        wrapper="compat.metrics_logger",
        why="Tunix's metrics logger (TensorBoard etc.), used by host 0 for"
        " the cross-host step records.",
    ),
    TouchPoint(
        module=_RL, attr="RLCluster.__init__",
        kind="source", needle="put_params_on_memory_kind",
        wrapper="compat.key_safe_memory_moves",
        why="Tunix snapshots the policy once in __init__; made key-safe for"
        " the duration of that call.",
    ),
    # --- tunix.rl.utils: module functions replaced while a cluster lives ---
    TouchPoint(
        module=_UTILS, attr="put_params_on_memory_kind",
        wrapper="compat.put_on_memory_kind",
        why="typed PRNG keys spanning processes cannot change memory kind"
        " (jax 0.12); MaxText models carry such keys.",
    ),
    TouchPoint(
        module=_UTILS, attr="is_sharing_weights",
        wrapper="compat.is_sharing_weights",
        why="Tunix 0.1.7 raises for models of different structure (MaxText"
        " actor, Tunix Qwen3 engine).",
    ),
    # --- the trainer's buffered metrics ------------------------------------
    TouchPoint(
        module="tunix.sft.peft_trainer", attr="PeftTrainer",
        kind="source", needle="_buffered_train_metrics",
        wrapper="compat.last_train_metrics",
        why="the losses of the step that just ran (Tunix writes them one"
        " step late).",
    ),
    # --- metric keys Tunix writes as literals -------------------------------
    TouchPoint(
        module=_GRPO, attr="", kind="literal", needle="rewards/score/mean",
        wrapper="compat.metric_keys.REWARD_MEAN",
        why="the learner's mean reward, read into our step records.",
    ),
    TouchPoint(
        module=_GRPO, attr="", kind="literal",
        needle="completions/mean_length",
        wrapper="compat.metric_keys.COMPLETION_LEN_MEAN",
        why="the learner's mean completion length, read into our records.",
    ),
)
