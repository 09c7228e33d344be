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

"""`--backend=mcjax_da` for Tunix's GRPO command line: hosts from meshes.

Tunix's disaggregated recipes give the actor and the rollout their own meshes
(`actor_model_config.mesh`, `rollout_model_config.mesh`; the reference
`same_mesh_as: actor`), which Tunix places on disjoint device slices. Under
mcjax_da the same config maps onto hosts of `devices_per_host` devices:

* trainer hosts T = size of the actor mesh / devices per host: one
  multi-controller JAX program over them, the actor mesh over all their
  devices, the reference with the actor;
* rollout hosts R = size of the rollout mesh / devices per host: each runs
  its own engine on its own devices (R local engines, not one engine over
  the rollout mesh); R must be a multiple of T.

`plan` checks all of it in the parent process, before Ray or any host
starts, and lists every problem with its fix. `CliTask` is what a trainer
host runs (the same pipeline as a host of `--backend=mcjax`), and
`CliSource` what a rollout host builds from (the protocols of
`da.model_source`).
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
import functools
import math
import time
from typing import Any

from tunix_mcjax import compat
from tunix_mcjax.cli.options import CliOptions
from tunix_mcjax.cli.options import ConfigError

# Keys of a `*_model_config` section that decide which model is built (the
# parameters' structure). A rollout section that differs from the actor's in
# one of them names a model the rollout hosts cannot build: they build the
# actor's, whose weights the trainers publish.
MODEL_KEYS = ("model_name", "model_id", "model_source", "model_path")
_PROBLEM_BULLET = "\n  - "


@dataclasses.dataclass(frozen=True, kw_only=True)
class HostCounts:
  """The hosts a config maps onto (`map_hosts`); None where unresolved."""

  trainer_hosts: int | None
  rollout_hosts: int | None
  devices_per_host: int | None
  problems: tuple[str, ...] = ()


def _shape(shape: tuple[int, ...] | None) -> str:
  return "(" + ",".join(map(str, shape or ())) + ")"


def map_hosts(
    *,
    actor_shape: tuple[int, ...],
    rollout_shape: tuple[int, ...] | None,
    devices_per_host: int | None = None,
    trainer_hosts: int | None = None,
    rollout_hosts: int | None = None,
) -> HostCounts:
  """Trainer and rollout hosts of an actor and a rollout mesh.

  T = size(actor_shape) / devices_per_host, R = size(rollout_shape) /
  devices_per_host. `rollout_shape` None: the config has no rollout mesh of
  its own, and `rollout_hosts` must be given. Explicit counts must agree
  with the meshes; `devices_per_host` None is derived from an explicit
  count.

  Args:
    actor_shape: `actor_model_config.mesh.shape`.
    rollout_shape: `rollout_model_config.mesh.shape`, or None.
    devices_per_host: devices of one host (--devices_per_host), or None.
    trainer_hosts: --trainer_hosts, or None.
    rollout_hosts: --rollout_hosts, or None.

  Returns:
    The counts, and every problem with its fix (no exception).
  """
  actor = math.prod(actor_shape)
  rollout = None if rollout_shape is None else math.prod(rollout_shape)
  problems = []
  dph = devices_per_host
  if dph is None:
    if trainer_hosts is not None and actor % trainer_hosts == 0:
      dph = actor // trainer_hosts
    elif (rollout is not None and rollout_hosts is not None
          and rollout % rollout_hosts == 0):
      dph = rollout // rollout_hosts
    elif trainer_hosts is not None:
      problems.append(
          f"actor_model_config.mesh.shape={_shape(actor_shape)} has {actor}"
          f" devices, which do not divide over --trainer_hosts="
          f"{trainer_hosts}; change the mesh or --trainer_hosts.")
    else:
      problems.append(
          "pass --devices_per_host (the devices of one host): trainer hosts"
          " = size of actor_model_config.mesh / devices per host, rollout"
          " hosts = size of rollout_model_config.mesh / devices per host.")
  t = r = None
  if dph is not None:
    t = _hosts_of_mesh("actor", "trainer", actor_shape, dph, trainer_hosts,
                       problems)
    if rollout is None:
      if rollout_hosts is None:
        problems.append(
            "this config has no rollout mesh of its own"
            " (rollout_model_config.mesh): give it one (its size / devices"
            " per host = rollout hosts), or pass --trainer_hosts and"
            " --rollout_hosts, or run it colocated with --backend=mcjax.")
      else:
        r = rollout_hosts
    else:
      r = _hosts_of_mesh("rollout", "rollout", rollout_shape, dph,
                         rollout_hosts, problems)
  if t is not None and r is not None and r % t:
    problems.append(
        f"{r} rollout hosts do not divide over {t} trainer hosts (each"
        " trainer host owns R / T rollout hosts); change"
        " rollout_model_config.mesh or actor_model_config.mesh.")
    r = None
  return HostCounts(trainer_hosts=t, rollout_hosts=r, devices_per_host=dph,
                    problems=tuple(problems))


def _hosts_of_mesh(role: str, kind: str, shape: tuple[int, ...], dph: int,
                   given: int | None, problems: list[str]) -> int | None:
  """Hosts = size of `role`'s mesh / devices per host, checked against the
  --`kind`_hosts flag (`given`); None (and a problem) where it fails."""
  size = math.prod(shape)
  each = ", one local engine each" if kind == "rollout" else ""
  if size % dph:
    problems.append(
        f"{role}_model_config.mesh.shape={_shape(shape)} has {size} devices,"
        f" not a multiple of --devices_per_host={dph} ({kind} hosts ="
        f" {role} mesh size / devices per host{each}); change the mesh shape"
        " or --devices_per_host.")
    return None
  hosts = size // dph
  if given is not None and given != hosts:
    problems.append(
        f"--{kind}_hosts={given} disagrees with"
        f" {role}_model_config.mesh.shape={_shape(shape)} over {dph} devices"
        f" per host ({hosts} {kind} hosts); drop --{kind}_hosts or change the"
        " mesh.")
    return None
  return hosts


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plan:
  """A config mapped onto hosts: what the parent process starts.

  Attributes:
    options: the command line's options with the host counts resolved.
    devices_per_host: devices of every trainer and rollout host.
    actor_shape: the actor (trainer) mesh's shape.
    rollout_shape: the rollout mesh's shape, or None (explicit hosts).
  """

  options: CliOptions
  devices_per_host: int
  actor_shape: tuple[int, ...]
  rollout_shape: tuple[int, ...] | None

  def describe(self) -> str:
    o = self.options
    rollout = ("--rollout_hosts" if self.rollout_shape is None else
               f"rollout mesh {_shape(self.rollout_shape)}")
    return (f"actor mesh {_shape(self.actor_shape)} -> {o.trainer_hosts}"
            f" trainer host(s); {rollout} -> {o.rollout_hosts} rollout"
            f" host(s), one engine each (engine tp {o.tp()});"
            f" {self.devices_per_host} devices per"
            f" host; reference with the actor; max_staleness"
            f" {o.max_staleness}")

  def rollout_source(self, argv: list[str]) -> CliSource:
    """What each rollout host builds its model and engine from."""
    return CliSource(argv=tuple(argv), options=self.options)


def _mesh_tp(shape: Sequence[int] | None, axes: Sequence[str]) -> int:
  """The size of a mesh's "tp" axis; 1 without one."""
  if shape is None or "tp" not in tuple(axes):
    return 1
  return int(shape[tuple(axes).index("tp")])


def _rollout_model_problems(pipeline: Any) -> list[str]:
  """A rollout section naming another model than the actor's."""
  actor = pipeline.config.get("actor_model_config") or {}
  rollout = pipeline.config.get("rollout_model_config") or {}
  problems = [
      f"rollout_model_config.{k}={rollout.get(k)!r} differs from"
      f" actor_model_config.{k}={actor.get(k)!r}: the rollout hosts build the"
      " actor's model and receive its weights; drop"
      f" rollout_model_config.{k} or set it to the actor's."
      for k in MODEL_KEYS if rollout.get(k) != actor.get(k)
  ]
  lora = rollout.get("lora_config")
  if lora and lora != actor.get("lora_config"):
    problems.append(
        "rollout_model_config.lora_config differs from the actor's: the"
        " rollout hosts run the actor's adapters (the trainers publish"
        " them); drop rollout_model_config.lora_config.")
  return problems


def _disaggregated_rule_problems(pipeline: Any, *, engine: str,
                                 trainer_hosts: int) -> list[str]:
  """What `rules.disaggregated` refuses, read from the Tunix config."""
  from tunix_mcjax.rules import disaggregated  # pylint: disable=g-import-not-at-top

  config = pipeline.config
  training = config.get("rl_training_config") or {}
  grpo = config.get("grpo_config") or {}
  return [p.message for p in disaggregated.disaggregated_job(
      engine=engine,
      batch_size=int(config.get("batch_size") or 1),
      num_iterations=int(grpo.get("num_iterations", 1)),
      max_seq_token_per_tpu=training.get("max_seq_token_per_tpu"),
      trainer_hosts=trainer_hosts,
  )]


def plan(pipeline: Any, *, devices_per_host: int | None) -> Plan:
  """Maps `pipeline`'s config (backend mcjax_da) onto trainer and rollout
  hosts; uses no device, so the parent process runs it before anything
  starts.

  Args:
    pipeline: The parsed config (`pipeline.GrpoCliPipeline`).
    devices_per_host: --devices_per_host, or None (derived from
      --trainer_hosts or --rollout_hosts).

  Returns:
    The plan.

  Raises:
    ConfigError: Listing every problem, each with what to change.
  """
  from tunix_mcjax import rules  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.cli import config_checks  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.compat import tunix_cli  # pylint: disable=g-import-not-at-top

  options = pipeline.options
  if options.backend != "mcjax_da":
    raise ConfigError(f"plan() maps --backend=mcjax_da configs, not"
                      f" --backend={options.backend}.")
  problems: list[str] = []
  try:
    owners = tunix_cli.resolve_mesh_owners(pipeline)
  except ValueError as e:
    owners = {}
    problems.append(f"role meshes: {e}")
  try:
    actor_shape, _ = pipeline.parse_mesh_config("actor_model_config")
  except (ValueError, KeyError) as e:
    actor_shape = None
    problems.append(f"actor_model_config.mesh: {e}")
  rollout_owner = owners.get(compat.Role.ROLLOUT)
  rollout_shape, rollout_axes = None, ()
  if rollout_owner == compat.Role.ROLLOUT:
    try:
      rollout_shape, rollout_axes = pipeline.parse_mesh_config(
          "rollout_model_config")
    except (ValueError, KeyError) as e:
      problems.append(f"rollout_model_config.mesh: {e}")
  elif rollout_owner not in (None, compat.Role.ACTOR):
    problems.append(
        f"rollout_model_config.same_mesh_as puts the rollout on the"
        f" {rollout_owner.value}'s mesh; under --backend=mcjax_da the rollout"
        " hosts have their own: give rollout_model_config a mesh (its size /"
        " devices per host = rollout hosts).")
  problems.extend(_rollout_model_problems(pipeline))
  counts = None
  if actor_shape is not None:
    counts = map_hosts(
        actor_shape=actor_shape, rollout_shape=rollout_shape,
        devices_per_host=devices_per_host,
        trainer_hosts=options.trainer_hosts,
        rollout_hosts=options.rollout_hosts)
    problems.extend(counts.problems)
  engine = options.engine or rules.mcjax_engine_name(
      str(pipeline.config.get("rollout_engine") or "vanilla"))
  trainer_hosts = (counts.trainer_hosts if counts is not None else None)
  problems.extend(_disaggregated_rule_problems(
      pipeline, engine=engine, trainer_hosts=trainer_hosts or 1))
  engine_tp = options.engine_tp
  if engine_tp is None:
    # Tunix's rollout mesh: its tp axis is each rollout engine's tensor
    # parallelism (vLLM's tensor_parallel_size); its size / devices per host
    # is the rollout hosts (`map_hosts`).
    engine_tp = _mesh_tp(rollout_shape, rollout_axes)
    tp_problem = None if engine_tp == 1 or counts is None else (
        rules.engine_tp(engine_tp, backend=options.backend, engine=engine,
                        trainer="maxtext" if pipeline.maxtext else "tunix",
                        devices_per_host=counts.devices_per_host,
                        flag="rollout_model_config.mesh's tp axis"))
    if tp_problem is not None:
      problems.append(tp_problem.message[:-1] + " (or pass --engine_tp).")
  resolved = None
  if trainer_hosts is not None and counts.rollout_hosts is not None:
    try:
      resolved = dataclasses.replace(
          options, trainer_hosts=trainer_hosts,
          rollout_hosts=counts.rollout_hosts,
          max_staleness=options.staleness(
              off_policy_steps=pipeline.off_policy_steps),
          engine_tp=engine_tp)
    except ValueError as e:
      problems.append(str(e))
  if resolved is not None:
    # The trainer hosts' own rules: those of --backend=mcjax on T hosts
    # (batch sizes, the trainer mesh, LoRA, engines, inputs).
    try:
      # The driver sets the steps after --resume_step aside (grpo_main).
      config_checks.check_mcjax_config(
          pipeline, num_hosts=trainer_hosts,
          devices_per_host=counts.devices_per_host, sets_aside_later=True)
    except ConfigError as e:
      problems.extend(str(e).split(_PROBLEM_BULLET)[1:] or [str(e)])
  if problems:
    unique = list(dict.fromkeys(problems))
    raise ConfigError(
        "this config cannot run with --backend=mcjax_da:" + _PROBLEM_BULLET
        + _PROBLEM_BULLET.join(unique))
  return Plan(options=resolved, devices_per_host=counts.devices_per_host,
              actor_shape=tuple(actor_shape),
              rollout_shape=(None if rollout_shape is None
                             else tuple(rollout_shape)))


@dataclasses.dataclass(frozen=True, kw_only=True)
class CliTask:
  """What a trainer host runs: the CLI pipeline, as a host of mcjax does,
  with the cluster `McJaxDaRLCluster` (backend "mcjax_da")."""

  argv: tuple[str, ...]
  options: CliOptions

  def da_options(self) -> Any:
    return self.options.da_options()

  def run(self) -> dict[str, Any]:
    """Runs this trainer host (the launcher's environment names it)."""
    from absl import flags  # pylint: disable=g-import-not-at-top

    # pylint: disable=g-import-not-at-top
    from tunix_mcjax import runtime
    from tunix_mcjax.cli import pipeline
    # pylint: enable=g-import-not-at-top

    if not flags.FLAGS.is_parsed():
      # A Ray worker parses no command line; Tunix's main reads its
      # --pathways_bns (unset here: the options carry ours).
      flags.FLAGS.mark_as_parsed()
    info = runtime.initialize(runtime.RuntimeConfig.from_env(  # Before JAX.
        heartbeat_timeout_s=self.options.heartbeat_timeout_s))
    argv = list(self.argv)
    pipeline.check_mcjax_config(
        pipeline.GrpoCliPipeline(argv, options=self.options),
        num_hosts=info.process_count,
        devices_per_host=info.local_device_count)
    t0 = time.perf_counter()
    pipeline.run_pipeline(argv, self.options)
    return {"backend": self.options.backend, "num_hosts": info.process_count,
            "wall_s": time.perf_counter() - t0}


@dataclasses.dataclass(frozen=True, kw_only=True)
class CliSource:
  """Where the CLI's rollout hosts get their model
  (`da.model_source.ModelSource`): the command line's arguments (base config
  resolved) and `CliOptions`, parsed again in the rollout process.

  The model is the actor's as Tunix's `create_rl_cluster` builds it (the
  reference section's model without LoRA, then the actor's LoRA), so that
  the trainers' publications fit it; `cli.disaggregated.plan` has refused a
  rollout section whose model differs.
  """

  argv: tuple[str, ...]
  options: Any

  @functools.cached_property
  def _settings(self) -> dict[str, Any]:
    # pylint: disable=g-import-not-at-top
    from tunix_mcjax import rules
    from tunix_mcjax.engines import base as engine_base
    # pylint: enable=g-import-not-at-top

    pipeline = self._pipeline()
    rollout_config = pipeline.create_rollout_config()
    engine = self.options.engine or rules.mcjax_engine_name(
        pipeline.config.get("rollout_engine") or "vanilla")
    return {
        "engine": engine,
        "rollout_config": rollout_config,
        # As the colocated engine resolves them (no explicit seed or size).
        "seed": engine_base.default_seed(rollout_config),
        "cache_size": engine_base.default_cache_size(rollout_config),
    }

  def _pipeline(self) -> Any:
    from tunix_mcjax.cli import pipeline  # pylint: disable=g-import-not-at-top

    return pipeline.GrpoCliPipeline(list(self.argv), options=self.options)

  @property
  def engine(self) -> str:
    return self._settings["engine"]

  @property
  def seed(self) -> int:
    return self._settings["seed"]

  @property
  def engine_tp(self) -> int:
    return self.options.tp()

  @property
  def cache_size(self) -> int:
    return self._settings["cache_size"]

  def rollout_config(self) -> Any:
    return self._settings["rollout_config"]

  def build(self, mesh: Any) -> tuple[Any, Any]:
    pipeline = self._pipeline()
    return pipeline.create_actor_model(mesh), pipeline.create_tokenizer()

  def __getstate__(self) -> dict[str, Any]:
    # Only the arguments travel; the settings are derived where used.
    return {"argv": self.argv, "options": self.options}

  def __setstate__(self, state: dict[str, Any]) -> None:
    self.__dict__.update(state)
