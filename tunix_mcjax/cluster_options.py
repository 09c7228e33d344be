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

"""The mcjax backend's options, and what they decide with Tunix's config.

`McJaxOptions` are the backend's settings beyond Tunix's `ClusterConfig`,
checked when made. With the cluster's config they pick the rollout engine
(`engine_name`) and how this host admits its share of each training batch
(`admission_config`, which refuses O3's length balancing where it would
change the update).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import dataclasses
from typing import Any

from absl import logging

from tunix_mcjax import admission as admission_lib
from tunix_mcjax import host_optimizations
from tunix_mcjax import packing
from tunix_mcjax import rules
from tunix_mcjax import step_watchdog
from tunix_mcjax import transfers
from tunix_mcjax.engines import base as engine_base


@dataclasses.dataclass(frozen=True, kw_only=True)
class McJaxOptions:
  """Options of the mcjax backend beyond Tunix's ClusterConfig.

  Attributes:
    engine: registered engine name for the host-local rollout (e.g. "native").
      None picks it from `ClusterConfig.rollout_engine` ("vanilla" means the
      native engine).
    sampling_seed: base seed of per-row sampling keys; None uses the rollout
      config's seed (or 0).
    metrics_out: JSONL file that host 0 appends one object per step to.
    log_progress: print a progress line per step on host 0.
    optimizations: the host-side optimizations O1-O4 (see
      `host_optimizations.PROFILES` for "base" and "optimized").
    trace_steps: steps (1-based) to record a JAX profiler trace of, into
      `trace_dir`/host<i> on every host.
    trace_dir: where traces go; required with `trace_steps`.
    engine_model: the engine's own architecture and the mapping into it,
      when the actor cannot sample itself (e.g. a MaxText actor; see
      `maxtext.models.engine_model_spec`; the backend factory fills it in
      for MaxText actors). None: engines run a copy of the actor.
    checkpoint_fingerprint: the job's configuration values a resume must
      not change (e.g. learner, batch size), saved with every checkpoint
      beside the cluster's own (parameter shapes, batch knobs) and checked
      before a checkpoint is restored (`checkpointing`).
    resume_step: resume from the checkpoint of this step rather than the
      latest (--resume_step; the launching process has set the later steps
      aside: `checkpointing.set_aside_later`); None: the latest.
    packing_timeout_s: with sequence packing, how long a host waits for the
      others' packed-row counts (K) before it stops with an error.
    transfer_guard: JAX's transfer guard over the backend's calls of every
      step after the first ("allow", "log", "disallow"; `transfers`).
    step_timeout_s: the most the time between two step ends may be on a
      host once its first step has ended (`step_watchdog`); then the host
      stops, naming the step and phase. None: no watchdog.
    engine_tp: devices per engine replica on each host (tensor
      parallelism): the host's devices form a (per_host // engine_tp,
      engine_tp) engine mesh, data-parallel over its first axis
      (`runtime.local_mesh(tp=...)`); must divide the devices per host.
  """

  engine: str | None = None
  sampling_seed: int | None = None
  metrics_out: str | None = None
  log_progress: bool = True
  optimizations: host_optimizations.HostOptimizations = dataclasses.field(
      default_factory=host_optimizations.HostOptimizations
  )
  trace_steps: tuple[int, ...] = ()
  trace_dir: str | None = None
  engine_model: engine_base.EngineModelSpec | None = None
  checkpoint_fingerprint: Mapping[str, Any] | None = None
  resume_step: int | None = None
  packing_timeout_s: float = packing.DEFAULT_AGREEMENT_TIMEOUT_S
  transfer_guard: str = "allow"
  step_timeout_s: float | None = step_watchdog.DEFAULT_STEP_TIMEOUT_S
  engine_tp: int = 1

  def __post_init__(self):
    if (not isinstance(self.engine_tp, int) or isinstance(self.engine_tp, bool)
        or self.engine_tp < 1):
      raise ValueError(
          f"engine_tp must be an integer >= 1 (devices per engine replica),"
          f" got {self.engine_tp!r}.")
    transfers.check_level(self.transfer_guard)
    step_watchdog.check_timeout(self.step_timeout_s)
    if not self.packing_timeout_s > 0:
      raise ValueError(
          f"packing_timeout_s must be > 0 seconds, got"
          f" {self.packing_timeout_s}."
      )
    if self.engine is not None and not isinstance(self.engine, str):
      raise TypeError(f"engine must be a registered name, got {self.engine!r}")
    if not isinstance(
        self.optimizations, host_optimizations.HostOptimizations
    ):
      raise TypeError(
          "optimizations must be a HostOptimizations, got"
          f" {self.optimizations!r}."
      )
    if any(
        not isinstance(k, int) or isinstance(k, bool) or k < 1
        for k in self.trace_steps
    ):
      raise ValueError(
          f"trace_steps must be step numbers >= 1, got {self.trace_steps}."
      )
    if self.trace_steps and not self.trace_dir:
      raise ValueError("trace_steps needs trace_dir.")
    if self.engine_model is not None and not isinstance(
        self.engine_model, engine_base.EngineModelSpec
    ):
      raise TypeError(
          f"engine_model must be an EngineModelSpec, got {self.engine_model!r}."
      )


def engine_name(options: McJaxOptions, rollout_engine: Any,
                registered: Sequence[str]) -> str:
  """The registered engine the cluster runs.

  `options.engine`, else the one `ClusterConfig.rollout_engine` names: a
  Tunix name means what it means in Tunix, or is refused.
  """
  if options.engine is not None:
    return options.engine
  if not isinstance(rollout_engine, str):
    raise ValueError(
        "Under mcjax the rollout engine is chosen by name (one of"
        f" {registered}), got {rollout_engine!r}."
    )
  rules.raise_first(rules.rollout_engine(rollout_engine, registered))
  import jax  # pylint: disable=g-import-not-at-top

  # Tunix's 'vllm' is the host-local vLLM of the platform this host runs on.
  return rules.mcjax_engine_name(rollout_engine,
                                 platform=jax.default_backend())


def admission_config(
    options: McJaxOptions,
    training_config: Any,
    *,
    num_hosts: int,
    host_index: int,
    num_generations: int,
    loss_agg_mode: str | None,
) -> admission_lib.AdmissionConfig:
  """How this host admits training batches (`McJaxRLCluster.shard_dataset`).

  Prompts are dealt in chunks of the per-host training micro-batch, so
  global micro-batch k is the single controller's micro-batch k.

  Args:
    options: the backend's options (O3: `balance_admission`).
    training_config: this host's share of the training config.
    num_hosts: the number of hosts.
    host_index: this host's index.
    num_generations: samples per prompt (G).
    loss_agg_mode: the learner's `loss_agg_mode`; with O3 and several
      micro-batches per update, a mode whose update O3 would change is
      refused (`rules.balanced_micro_batches`). None: not checked, and a
      warning is logged in that setting.
  """
  tc = training_config
  chunk = tc.train_micro_batch_size or tc.mini_batch_size
  balance = options.optimizations.balance_admission
  if balance and chunk is not None and tc.mini_batch_size is not None and (
      chunk < tc.mini_batch_size):
    if loss_agg_mode is None:
      logging.warning(
          "balance_admission (O3) with several micro-batches per update:"
          " the update equals the single controller's only for the"
          " row-normalised loss_agg_modes %s; pass loss_agg_mode to"
          " shard_dataset to have it checked.",
          list(rules.ROW_NORMALISED_LOSS_MODES),
      )
    else:
      rules.raise_first(rules.balanced_micro_batches(
          balance_by_length=True, loss_agg_mode=loss_agg_mode,
          micro_batch_size=chunk, mini_batch_size=tc.mini_batch_size,
      ))
  return admission_lib.AdmissionConfig(
      num_hosts=num_hosts,
      host_index=host_index,
      num_generations=num_generations,
      chunk_size=chunk,
      balance_by_length=balance,
      update_size=tc.mini_batch_size,
  )
