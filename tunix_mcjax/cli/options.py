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

"""What the GRPO command line adds to Tunix's config, and its error type."""

from __future__ import annotations

import dataclasses
from typing import Any

import tunix_mcjax
from tunix_mcjax import host_optimizations
from tunix_mcjax import rewards_pool
from tunix_mcjax import rules
from tunix_mcjax import step_watchdog

# The stock backend, the default; the others as the registry lists them.
DEFAULT_BACKEND = "tunix"
BACKENDS = (
    DEFAULT_BACKEND,
    *(n for n in tunix_mcjax.backend_names() if n != DEFAULT_BACKEND),
)


# The O1-O4 switches, as the example's flags and `HostOptimizations` name them.
MCJAX_SWITCHES = host_optimizations.SWITCHES


class ConfigError(ValueError):
  """A config the chosen backend cannot run; raised before hosts start."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class CliOptions:
  """What this entry point adds to Tunix's GRPO config.

  Attributes:
    backend: a registered backend name (BACKENDS), e.g. "tunix" or "mcjax".
    metrics_out: JSONL file of per-step records, or None.
    placement_invariant_sampling: tunix backend only; see
      `tunix_mcjax.cli.grpo_main`.
    run_eval: pass Tunix's test split (the rest after `train_fraction`) to
      the learner as eval_ds, under either backend (stock `grpo_main`
      discards it); off: stock behaviour.
    engine: mcjax only: the mcjax engine by registered name (e.g. "native",
      "vllm" = PyTorch vLLM, "vllm_tpu"); None takes Tunix's
      `rollout_engine` in Tunix's meaning (`rules.rollout_engine`).
    profile: mcjax only: host-side optimizations profile ("base",
      "optimized"; None: the backend's defaults).
    async_metrics, freeze_gc, balance_admission, publish_in_one_call: mcjax
      only: O1-O4 switches overriding the profile (None: the profile's).
    mesh: mcjax only: the trainer mesh kind, one of `rules.MESH_KINDS`
      ("fsdp", "hsdp", "auto"; None: "auto"); see `rules.config_mesh`.
    reward_workers: either backend: score the reward functions in a per-host
      pool of this many processes (`tunix_mcjax.rewards_pool`); 0:
      in-process (stock).
    reward_timeout_s: either backend: the most one reward call may take
      (`tunix_mcjax.rewards_pool`: a hung pool worker is killed; in-process
      the call runs on a watchdog thread); then the job fails naming the
      function, rows and host.
    trainer_hosts, rollout_hosts: mcjax_da only: trainer and rollout
      processes; None: from the actor and rollout meshes
      (`cli.disaggregated.plan`).
    max_staleness, is_cap: mcjax_da only: `da.options.DaOptions`'s;
      max_staleness None: 1, or in training_mode=agentic_grpo the config's
      agentic_grpo_config.off_policy_steps (`staleness`), resolved by
      `cli.disaggregated.plan`.
    resume_step: mcjax and mcjax_da only: resume from the complete
      checkpoint of this step under `checkpoint_root_directory` instead of
      the latest (`checkpointing.check_resume`); None: the latest.
    params_out: after training, host 0 writes the actor's final parameters
      to this .npz file (any backend; for comparing backends).
    transfer_guard: mcjax and mcjax_da (its trainer hosts) only: JAX's
      transfer guard over the backend's calls after the first step
      (`tunix_mcjax.transfers`).
    step_timeout_s: mcjax and mcjax_da only: the most a host's step after
      its first may take before the host stops (`tunix_mcjax.step_watchdog`).
    heartbeat_timeout_s: mcjax and mcjax_da only: jax.distributed's
      heartbeat limit; None: JAX's default.
    engine_tp: mcjax only: devices of a host per engine replica
      (`McJaxOptions.engine_tp`; `rules.engine_tp`). None: 1, and under
      mcjax_da the size of the rollout mesh's tp axis
      (`cli.disaggregated.plan`).
  """

  backend: str = DEFAULT_BACKEND
  metrics_out: str | None = None
  placement_invariant_sampling: bool = False
  run_eval: bool = False
  engine: str | None = None
  profile: str | None = None
  async_metrics: bool | None = None
  freeze_gc: bool | None = None
  balance_admission: bool | None = None
  publish_in_one_call: bool | None = None
  mesh: str | None = None
  reward_workers: int = 0
  reward_timeout_s: float = rewards_pool.DEFAULT_TIMEOUT_S
  trainer_hosts: int | None = None
  rollout_hosts: int | None = None
  max_staleness: int | None = None
  is_cap: float = 2.0
  resume_step: int | None = None
  params_out: str | None = None
  transfer_guard: str = "allow"
  step_timeout_s: float = step_watchdog.DEFAULT_STEP_TIMEOUT_S
  heartbeat_timeout_s: int | None = None
  engine_tp: int | None = None

  def __post_init__(self):
    from tunix_mcjax import transfers  # pylint: disable=g-import-not-at-top

    try:
      transfers.check_level(self.transfer_guard)
    except ValueError as e:
      raise ConfigError(str(e)) from None
    if self.transfer_guard != "allow" and self.backend not in (
        "mcjax", "mcjax_da"):
      raise ConfigError(
          f"--transfer_guard applies to --backend=mcjax and mcjax_da only,"
          f" not --backend={self.backend}.")
    if self.reward_workers < 0:
      raise ConfigError(
          f"--reward_workers={self.reward_workers} must be >= 0 (0:"
          " in-process).")
    try:
      rewards_pool.check_timeout(self.reward_timeout_s)
      step_watchdog.check_timeout(self.step_timeout_s)
      step_watchdog.check_heartbeat(self.heartbeat_timeout_s, self.backend)
    except ValueError as e:
      raise ConfigError(str(e)) from None
    if (self.step_timeout_s != step_watchdog.DEFAULT_STEP_TIMEOUT_S
        and self.backend not in ("mcjax", "mcjax_da")):
      raise ConfigError(
          f"--step_timeout_s applies to --backend=mcjax and mcjax_da only,"
          f" not --backend={self.backend}.")
    if self.backend not in BACKENDS:
      raise ConfigError(
          f"--backend={self.backend!r} is not one of {list(BACKENDS)}."
      )
    if self.placement_invariant_sampling and self.backend != "tunix":
      raise ConfigError(
          "--placement_invariant_sampling applies to --backend=tunix only;"
          " mcjax always samples placement-invariantly."
      )
    mcjax_only = [
        f"--{name}" for name in ("engine", "profile", "mesh",
                                  *MCJAX_SWITCHES)
        if getattr(self, name) is not None
    ]
    if mcjax_only and not self.multi_controller:
      raise ConfigError(
          f"{', '.join(mcjax_only)} apply to --backend=mcjax (or mcjax_da)"
          " only (the"
          " tunix backend's engine is rollout_engine, its mesh the config's"
          " actor mesh, and it has no O1-O4)."
      )
    # The engine a config names is checked with the config
    # (config_checks); an explicit --engine here.
    problem = rules.engine_tp(self.tp(), backend=self.backend,
                              engine=self.engine or "native")
    if problem is not None:
      raise ConfigError(problem.message)
    if self.mesh is not None and self.mesh not in rules.MESH_KINDS:
      raise ConfigError(
          f"--mesh={self.mesh!r} is not one of {list(rules.MESH_KINDS)}.")
    try:
      self.optimizations()
    except ValueError as e:
      raise ConfigError(f"--profile: {e}") from e
    da_only = [f"--{name}" for name in ("trainer_hosts", "rollout_hosts")
               if getattr(self, name) is not None]
    if da_only and self.backend != "mcjax_da":
      raise ConfigError(
          f"{', '.join(da_only)} apply to --backend=mcjax_da only; the other"
          " backends' hosts come from --num_hosts.")
    if self.resume_step is not None and (
        not self.multi_controller or self.resume_step < 0):
      raise ConfigError(
          f"--resume_step={self.resume_step} applies to --backend=mcjax and"
          " mcjax_da (whose checkpoints mcjax checks), with a step >= 0.")
    if self.backend == "mcjax_da":
      try:
        self.da_options(trainer_hosts=self.trainer_hosts or 1,
                        rollout_hosts=self.rollout_hosts or
                        (self.trainer_hosts or 1),
                        max_staleness=self.staleness(off_policy_steps=None))
      except ValueError as e:
        raise ConfigError(str(e)) from e

  def optimizations(self) -> Any:
    """The mcjax `HostOptimizations` (O1-O4) these options ask for."""
    return host_optimizations.from_profile(
        self.profile,
        **{name: getattr(self, name) for name in MCJAX_SWITCHES},
    )

  @property
  def multi_controller(self) -> bool:
    """Whether the trainers run as one process per host (mcjax, mcjax_da)."""
    return self.backend in ("mcjax", "mcjax_da")

  @property
  def deals_prompts(self) -> bool:
    """Whether batches go through admission (row ids, equal host shares)."""
    return self.multi_controller or self.placement_invariant_sampling

  def tp(self) -> int:
    """--engine_tp, or 1 (mcjax_da's plan resolves it from the rollout
    mesh first)."""
    return 1 if self.engine_tp is None else self.engine_tp

  def staleness(self, *, off_policy_steps: int | None) -> int:
    """--max_staleness, or its default: 1, and in Tunix's agentic mode
    (`off_policy_steps` not None) the config's off_policy_steps, Tunix's
    own bound on agent turns' staleness."""
    if self.max_staleness is not None:
      return self.max_staleness
    return 1 if off_policy_steps is None else off_policy_steps

  def da_options(self, **overrides: Any) -> Any:
    """mcjax_da: the `DaOptions` of these options (host counts and the
    staleness resolved by `cli.disaggregated.plan`, or given in
    `overrides`)."""
    from tunix_mcjax.da import options as da_options  # pylint: disable=g-import-not-at-top

    fields = dict(trainer_hosts=self.trainer_hosts,
                  rollout_hosts=self.rollout_hosts,
                  max_staleness=self.max_staleness, is_cap=self.is_cap)
    fields.update(overrides)
    if None in (fields["trainer_hosts"], fields["rollout_hosts"],
                fields["max_staleness"]):
      raise ConfigError(
          "--backend=mcjax_da: the trainer and rollout host counts or the"
          " staleness are not resolved yet (cli.disaggregated.plan resolves"
          " them).")
    return da_options.DaOptions(**fields)
