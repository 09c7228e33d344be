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

"""Tunix's `GrpoPipeline` with mcjax's cluster, meshes and dataset dealing.

`GrpoCliPipeline` is the pipeline every backend of `cli.grpo_main` runs;
`run_pipeline` runs it through Tunix's own `main`. The entry point
(`cli.grpo_main`) only dispatches; the disaggregated mode's trainer hosts
(`cli.disaggregated`) run this module's pipeline too.

How the swap works: `GrpoPipeline` looks three names up in its module at call
time (`model_lib.create_model`, `rl_cluster_lib.RLCluster` in
`create_rl_cluster`, `data_lib.post_init_dataset` in `_run`). The subclass
below replaces those calls for the duration of its own call of that method
only (`compat.tunix_cli.replaced_calls`), and overrides the public
`create_role_to_mesh` and `create_cluster_config`. `check_tunix_seams()`
verifies the call sites at start-up, so a Tunix upgrade that moves them
fails loudly instead of silently running the stock cluster in several
processes.

`--placement_invariant_sampling` (default off; tunix backend only) makes the
stock cluster sample with the mcjax engine the config selects (native or
vLLM) and per-row keys, as
`grpo_job.py` does, so that the two backends can be compared number for number
(tests/cli/test_grpo_main.py). It also drops a final partial batch, as mcjax
does; with training_mode=agentic_grpo each agent turn takes the identity the
mcjax cluster gives it (`agent_turns`; tests/cli/test_cli_agentic.py). It is
a test and comparison mode, not part of the stock behaviour.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
import contextlib
import copy
import dataclasses
import functools
import json
import math
import os
from typing import Any

from absl import logging

from tunix_mcjax import compat
from tunix_mcjax import rules
from tunix_mcjax import telemetry
from tunix_mcjax.cli import checkpoints
from tunix_mcjax.cli import config_checks
from tunix_mcjax.cli import data
from tunix_mcjax.cli import maxtext_actor
from tunix_mcjax.cli.options import CliOptions
from tunix_mcjax.cli.options import ConfigError
from tunix_mcjax.compat import tunix_cli
from tunix_mcjax.telemetry import stock as telemetry_stock

check_tunix_seams = tunix_cli.check_tunix_seams
check_mcjax_config = config_checks.check_mcjax_config


# --- per-step records for the stock cluster -----------------------------------


class StockStepRecorder(telemetry_stock.StockClusterRecorder):
  """Appends one step record (the mcjax schema, with phases) per step of the
  stock cluster to `path`; see `telemetry.stock.StockClusterRecorder`."""

  def __init__(self, cluster: Any, path: str, admission: Any = None):
    super().__init__(
        cluster,
        ledger=admission.ledger if admission is not None else None,
        metrics_out=path,
    )


# --- the pipeline -------------------------------------------------------------


class GrpoCliPipeline(tunix_cli.GrpoPipeline):
  """Tunix's `GrpoPipeline` with the cluster backend chosen by `options`."""

  def __init__(self, argv: list[str], *, options: CliOptions, **kwargs: Any):
    check_tunix_seams()
    self.options = options
    self.rl_cluster: Any = None
    # The comparison mode's single-host admission (stock_engine).
    self._stock: Any = None
    # --run_eval: the test split (dealt like the training batches where
    # those are).
    self._eval_ds: Any = None
    self._mesh_choice: Any = None  # mcjax: set by create_role_to_mesh.
    self._mt_config: Any = None  # A MaxText actor's config (maxtext_actor).
    super().__init__(argv, **kwargs)
    # Taken from the config as parsed: Tunix later fills in values derived
    # from the run's length (the schedule's decay and warmup steps), which
    # a resume may change.
    self._fingerprint = self._parsed_fingerprint()

  @property
  def agentic(self) -> bool:
    """Whether the config runs Tunix's agentic GRPO learner."""
    return self.config.get("training_mode", "grpo") == rules.AGENTIC_MODE

  @property
  def off_policy_steps(self) -> int | None:
    """Agentic mode: Tunix's agentic_grpo_config.off_policy_steps (its
    staleness bound, mcjax_da's max_staleness); else None."""
    if not self.agentic:
      return None
    return int(self._learner_config().get("off_policy_steps", 0))

  @property
  def maxtext(self) -> bool:
    """Whether mcjax builds the actor as a MaxText model (maxtext_actor)."""
    return (self.options.multi_controller and maxtext_actor.is_maxtext(
        self._config_mapping("actor_model_config")))

  def maxtext_config(self) -> Any:
    if self._mt_config is None:
      self._mt_config = maxtext_actor.config(
          self._config_mapping("actor_model_config"))
    return self._mt_config

  def _learner_config(self) -> Any:
    """The learner's section: agentic_grpo_config or grpo_config."""
    return self._config_mapping(rules.learner_section(self.config))

  @property
  def _num_generations(self) -> int:
    # Tunix's agentic GRPOConfig defaults to 2 samples per prompt.
    return int(self._learner_config().get(
        "num_generations", 2 if self.agentic else 1))

  # --- meshes and cluster config (public GrpoPipeline methods) ---------------

  def create_role_to_mesh(self):
    if not self.options.multi_controller:
      try:
        return super().create_role_to_mesh()
      except ValueError:
        fallback = self._coordless_role_to_mesh()
        if fallback is None:
          raise
        return fallback
    import jax  # pylint: disable=g-import-not-at-top
    from tunix_mcjax import runtime  # pylint: disable=g-import-not-at-top

    shape, _ = self.parse_mesh_config("actor_model_config")
    choice = self.mesh_choice(num_hosts=jax.process_count(),
                              devices_per_host=jax.local_device_count())
    if choice.reason and jax.process_index() == 0:
      print(f"[grpo_main] mesh: {choice.describe()} ({choice.reason})",
            flush=True)
    if self.maxtext:
      mesh = maxtext_actor.mesh(self.maxtext_config())
      if jax.process_index() == 0:
        print(f"[grpo_main] {maxtext_actor.describe(self.maxtext_config())}",
              flush=True)
    else:
      mesh = runtime.global_mesh(
          tp=choice.shape[-1], axis_names=choice.axis_names, kind=choice.kind)
    if mesh.devices.size != math.prod(shape):
      raise ConfigError(
          f"actor_model_config.mesh.shape={shape} but this job has"
          f" {mesh.devices.size} devices; make the mesh size equal the"
          " number of devices."
      )
    self._mesh_choice = choice
    # check_mcjax_config has ensured every role is owned by the actor.
    return {role: mesh for role in tunix_cli.resolve_mesh_owners(self)}

  def mesh_choice(self, *, num_hosts: int, devices_per_host: int) -> Any:
    """The mcjax trainer mesh (`rules.MeshChoice`) of this config and
    --mesh; no devices used. Raises ConfigError for a mesh that cannot work.

    The model's widths come from a local checkpoint's config.json; for a
    hub model they are unknown and --mesh=auto keeps the config's kind.
    """
    shape, names = self.parse_mesh_config("actor_model_config")
    dims = {}
    for key in ("actor_model_config", "model_config"):
      path = checkpoints.local_checkpoint_dir(self._config_mapping(key))
      if path is not None:
        with open(os.path.join(path, "config.json")) as f:
          dims = rules.hf_model_dims(json.load(f))
        break
    choice, problem = rules.config_mesh(
        shape, names, mesh=self.options.mesh or "auto", num_hosts=num_hosts,
        devices_per_host=devices_per_host, dims=dims)
    if problem is not None:
      raise ConfigError(problem.message)
    return choice

  def _coordless_role_to_mesh(self):
    """The colocated mesh on devices without physical coordinates, or None.

    Tunix 0.1.7's mesh allocator only places meshes on devices that report
    physical coordinates (TPUs) and fails on CPU and GPU devices, even when
    every role shares one mesh and there is nothing to allocate. Only then
    (no coordinates, a single mesh owner) does this build the actor's mesh
    over the first devices in order, as Tunix 0.1.6 did; every other failure
    of the stock allocator is re-raised unchanged.

    Returns:
      The role-to-mesh mapping, or None where the stock error stands.
    """
    # pylint: disable=g-import-not-at-top
    import jax
    from tunix.utils import mesh as mesh_lib
    # pylint: enable=g-import-not-at-top

    devices = list(jax.devices())
    if mesh_lib.get_coord_topology(devices) is not None:
      return None
    try:
      owners = tunix_cli.resolve_mesh_owners(self)
      shape, names = self.parse_mesh_config("actor_model_config")
    except ValueError:
      return None  # A config error: the stock one is re-raised.
    if set(owners.values()) != {compat.Role.ACTOR}:
      return None
    if math.prod(shape) > len(devices):
      return None
    logging.warning(
        "Devices expose no physical coordinates; placing the shared actor"
        " mesh %s on the first %d of %d devices in order.",
        shape,
        math.prod(shape),
        len(devices),
    )
    mesh = mesh_lib.create_mesh(
        shape, names, devices=devices[: math.prod(shape)]
    )
    return {role: mesh for role in owners}

  def create_rollout_config(self, role_to_mesh=None):
    if (role_to_mesh is None
        and self._config_string("rollout_engine", "vanilla") == "vllm"):
      # A rollout host's config under mcjax_da (no global mesh there) or the
      # launching process's: Tunix needs the rollout mesh only for its shape.
      owner = tunix_cli.resolve_mesh_owners(self)[compat.Role.ROLLOUT]
      shape, _ = self.parse_mesh_config(
          tunix_cli.role_model_key(self, owner))
      role_to_mesh = {compat.Role.ROLLOUT: tunix_cli.MeshShape(shape)}
    return super().create_rollout_config(role_to_mesh=role_to_mesh)

  def create_cluster_config(self, *, role_to_mesh, rollout_config=None):
    cluster_config = super().create_cluster_config(
        role_to_mesh=role_to_mesh, rollout_config=rollout_config
    )
    if self.maxtext:
      cluster_config = dataclasses.replace(
          cluster_config, role_to_logical_axis_rule=maxtext_actor.axis_rules(
              self.maxtext_config()))
    choice = self._mesh_choice
    tc = cluster_config.training_config
    if choice is not None and choice.kind == "hsdp" and not set(
        choice.batch_axes) <= set(rules.batch_axes(tc.data_sharding_axis)):
      # hsdp splits the batch over hosts (data) and a host's devices (fsdp);
      # Tunix's default ("fsdp",) would ask every host for every row.
      logging.info("hsdp mesh: data_sharding_axis %s -> %s",
                   tc.data_sharding_axis, choice.batch_axes)
      # gradient_accumulation_steps: derived again from the micro-batch
      # (Tunix's __post_init__ refuses a set one).
      cluster_config = dataclasses.replace(
          cluster_config, training_config=dataclasses.replace(
              tc, data_sharding_axis=choice.batch_axes,
              gradient_accumulation_steps=None))
    if not self.options.placement_invariant_sampling:
      return cluster_config
    # Comparison mode: the stock cluster with the mcjax engine the config
    # selects (native or vLLM), keyed by the row ids that single-host
    # admission records (as grpo_job.py).
    from tunix_mcjax import stock_engine  # pylint: disable=g-import-not-at-top

    self._stock = stock_engine.StockAdmission(
        num_generations=self._num_generations)
    return dataclasses.replace(
        cluster_config, rollout_engine=self._stock.rollout_engine(
            rules.selected_engine(self.options.engine, self.config)))

  # --- the three replaced call sites ------------------------------------------

  def create_rl_cluster(self, tokenizer):
    model_lib = tunix_cli.pipeline_module("model_lib")
    replacements = {
        "model_lib": {
            "create_model": functools.partial(self._create_model, model_lib)
        }
    }
    if self.options.multi_controller:
      replacements["rl_cluster_lib"] = {"RLCluster": self._create_mcjax_cluster}
    with tunix_cli.replaced_calls(**replacements):
      cluster = super().create_rl_cluster(tokenizer)
    if self.options.multi_controller:
      from tunix_mcjax import cluster as cluster_lib  # pylint: disable=g-import-not-at-top

      if not isinstance(cluster, cluster_lib.McJaxRLCluster):
        raise RuntimeError(
            "Tunix's GrpoPipeline built a stock RLCluster instead of the mcjax"
            " one; this Tunix version is not supported by tunix_mcjax.cli."
        )
    elif self.options.metrics_out:
      StockStepRecorder(cluster, self.options.metrics_out,
                        None if self._stock is None else self._stock.train)
    if self._stock is not None:
      self._stock.route_eval(cluster)
      if self.agentic:
        # Each agent turn keyed as the mcjax cluster keys it (AgentTurns).
        # pylint: disable=g-import-not-at-top
        from tunix_mcjax import admission
        from tunix_mcjax import agent_turns
        # pylint: enable=g-import-not-at-top

        admission.route_agent_turns(cluster, agent_turns.AgentTurns(
            self._stock.train.ledger, self._stock.row_ids,
            first_step=cluster.global_steps))
    self.rl_cluster = cluster
    return cluster

  def obtain_reward_fn(self):
    # Tunix asks for the reward functions after the cluster exists: time them
    # into the step's `reward` phase (values, names and signatures unchanged).
    fns = super().obtain_reward_fn()
    import jax  # pylint: disable=g-import-not-at-top
    from tunix_mcjax import rewards_pool  # pylint: disable=g-import-not-at-top

    # Every call has --reward_timeout_s: in this host's pool (started once;
    # its workers exit with the process), or on a watchdog thread.
    host = rewards_pool.host_label(jax.process_index())
    timeout_s = self.options.reward_timeout_s
    if self.options.reward_workers:
      self._reward_pool = rewards_pool.RewardPool(
          fns, num_workers=self.options.reward_workers, timeout_s=timeout_s,
          host=host)
      fns = self._reward_pool.fns
    else:
      fns = rewards_pool.with_timeouts(fns, timeout_s=timeout_s, host=host)
    # A reward function that raises, returns NaN or the wrong number of
    # values is an error naming it (Tunix would nansum NaN into 0).
    from tunix_mcjax.recipes import validation  # pylint: disable=g-import-not-at-top

    fns = validation.checked_reward_fns(fns)
    clock = getattr(self.rl_cluster, "step_clock", None)
    return fns if clock is None else telemetry.timed_reward_fns(fns, clock)

  def run_grpo_trainer(self):
    result = self._train()
    if self.options.params_out:
      self._write_params(self.options.params_out)
    from tunix_mcjax.engines import base as engine_base  # pylint: disable=g-import-not-at-top

    engine_base.close(getattr(self.rl_cluster, "rollout", None))
    return result

  def _write_params(self, path: str) -> None:
    """The actor's final parameters, gathered (a collective on every host);
    host 0 writes them as .npz, by parameter path."""
    # pylint: disable=g-import-not-at-top
    import jax
    import numpy as np
    from tunix_mcjax import publication
    # pylint: enable=g-import-not-at-top

    params = publication.gathered_params(self.rl_cluster.actor_trainer.model)
    if jax.process_index() == 0:
      np.savez(path, **params)

  def _train(self):
    if not (self.options.deals_prompts or self.options.run_eval):
      return super().run_grpo_trainer()
    mode = self.config.get("training_mode", "grpo")
    # Tunix's _run builds either learner after the same dataset call.
    if mode not in rules.TRAINING_MODES:
      raise ConfigError(
          f"training_mode={mode!r} cannot deal prompts over hosts or run"
          " --run_eval; use training_mode=grpo.")
    real = tunix_cli.pipeline_module("data_lib")
    with tunix_cli.replaced_calls(
        data_lib={
            "post_init_dataset": functools.partial(
                self._post_init_dataset, real.post_init_dataset
            )
        }
    ), (
        tunix_cli.learner_with_eval(_LazyIterable(lambda: self._eval_ds))
        if self.options.run_eval and not self.agentic
        else contextlib.nullcontext()
    ), (
        # Reports groups and evaluation passes (agent_turns); evaluates on
        # the test split with --run_eval.
        tunix_cli.agentic_learner(
            _LazyIterable(lambda: self._eval_ds) if self.options.run_eval
            else None) if self.agentic else contextlib.nullcontext()
    ):
      return super().run_grpo_trainer()

  def create_actor_model(self, mesh) -> Any:
    """The actor's model on `mesh`, as Tunix's `create_rl_cluster` builds it
    (the reference section's model without LoRA, then the actor's LoRA).

    For mcjax_da's rollout hosts (`cli.disaggregated.CliSource`): the trainers'
    publications then replace its weights.
    """
    if self.maxtext:
      # The engines' Qwen3, not the MaxText actor: the trainers map their
      # parameters into its layout before publishing.
      return maxtext_actor.engine_model_on(self.maxtext_config(), mesh)
    model_lib = tunix_cli.pipeline_module("model_lib")
    reference = dict(self._config_mapping("reference_model_config"))
    reference.pop("lora_config", None)
    model, _ = self._create_model(
        model_lib, reference, self._config_mapping("tokenizer_config"), mesh)
    lora = self._config_mapping("actor_model_config").get("lora_config")
    if lora:
      model = model_lib.apply_lora_to_model(model, mesh, lora)
    return model

  def create_tokenizer(self) -> Any:
    """The tokenizer Tunix's pipeline builds from `tokenizer_config`."""
    model_lib = tunix_cli.pipeline_module("model_lib")
    config = self._config_mapping("tokenizer_config")
    return model_lib.create_tokenizer(config, config["tokenizer_path"])

  def _create_model(self, real_model_lib, model_config, tokenizer_config, mesh):
    if self.maxtext:
      model = maxtext_actor.create(
          self.maxtext_config(), mesh,
          pad_id=self.create_tokenizer().pad_id(),
          rng_seed=model_config.get("rng_seed", 0))
      return model, tokenizer_config["tokenizer_path"]
    path = checkpoints.local_checkpoint_dir(model_config)
    if path is None:
      return real_model_lib.create_model(model_config, tokenizer_config, mesh)
    model = checkpoints.load_local_checkpoint(path, model_config, mesh)
    # The rest of Tunix's create_model, unchanged.
    if model_config.get("lora_config"):
      model = real_model_lib.apply_lora_to_model(
          model, mesh, model_config["lora_config"]
      )
    if model_config.get("model_display"):
      from flax import nnx  # pylint: disable=g-import-not-at-top

      nnx.display(model)
    return model, tokenizer_config["tokenizer_path"]

  def _create_mcjax_cluster(self, **kwargs: Any):
    import tunix_mcjax  # pylint: disable=g-import-not-at-top

    if self.options.backend == "mcjax_da":
      # The trainer hosts' cluster; its engine is this host's rollout hosts.
      kwargs.update(da=self.options.da_options(),
                    num_generations=self._num_generations)
    return tunix_mcjax.create_rl_cluster(
        self.options.backend, options=self.mcjax_options(), **kwargs
    )

  def mcjax_options(self) -> Any:
    """The mcjax cluster's `McJaxOptions` from this command line."""
    from tunix_mcjax import cluster as cluster_lib  # pylint: disable=g-import-not-at-top

    return cluster_lib.McJaxOptions(
        metrics_out=self.options.metrics_out,
        engine=self.options.engine,
        optimizations=self.options.optimizations(),
        transfer_guard=self.options.transfer_guard,
        step_timeout_s=self.options.step_timeout_s,
        engine_tp=self.options.tp(),
        checkpoint_fingerprint=self.checkpoint_fingerprint(),
        resume_step=self.options.resume_step,
    )

  def checkpoint_root(self) -> str | None:
    """`rl_training_config.checkpoint_root_directory`, or None."""
    return self._config_mapping("rl_training_config").get(
        "checkpoint_root_directory") or None

  def checkpoint_fingerprint(self) -> dict[str, Any]:
    """The config values a resume must not change (the cluster adds the
    model's shapes and the batch split). Hosts, steps, logging and the
    checkpoint options may change."""
    return copy.deepcopy(self._fingerprint)

  def _parsed_fingerprint(self) -> dict[str, Any]:
    def section(key: str, *names: str) -> dict[str, Any]:
      values = dict(self.config) if not key else self._config_mapping(key)
      picked = {n: values.get(n) for n in names} if names else dict(values)
      # As the checkpoint's JSON reads back (OmegaConf containers, tuples).
      return json.loads(json.dumps(picked, sort_keys=True, default=str))

    top = section("", "data_source", "dataset_name", "data_directory",
                  "train_fraction", "batch_size", "reward_functions",
                  "apply_chat_template_to_dataset", "rollout_engine")
    da = {}
    if self.options.backend == "mcjax_da":
      # The off-policy correction's settings, as the example's fingerprint
      # (absent from a colocated run's checkpoint, which a K = 0 run may
      # resume: the same numbers).
      da = {"max_staleness": self.options.staleness(
                off_policy_steps=self.off_policy_steps),
            "is_cap": self.options.is_cap}
    return {
        **da,
        **{f"config.{k}": v for k, v in top.items()},
        "model_config": section("model_config", "model_name", "model_id",
                                "lora_config"),
        "actor_optimizer_config": section("rl_training_config").get(
            "actor_optimizer_config"),
        "grpo_config": section("grpo_config"),
        "rollout_config": section(
            "rollout_config", "temperature", "top_p", "top_k", "seed",
            "max_prompt_length", "total_generation_steps"),
        "engine": self.options.engine,
    }

  def _post_init_dataset(self, real_post_init, dataset, tokenizer, **kwargs):
    train, rest = real_post_init(dataset, tokenizer, **kwargs)
    if self.options.run_eval:
      if rest is None:
        raise ConfigError(
            "--run_eval needs a test split: set train_fraction below 1 (the"
            " batches after it are the test split)."
        )
      self._eval_ds = rest
      if self.options.deals_prompts:
        self._eval_ds = data.DealtDataset(
            rest, batch_size=kwargs["batch_size"], deal=self._deal_eval
        )
    if not self.options.deals_prompts:
      return train, rest
    return (
        data.DealtDataset(
            train, batch_size=kwargs["batch_size"], deal=self._deal
        ),
        rest,
    )

  def _deal_eval(self, global_batches):
    """This host's share of each global test batch, with eval row ids."""
    if self.rl_cluster is None:
      raise RuntimeError("The dataset was iterated before the cluster exists.")
    if self.options.multi_controller:
      return self.rl_cluster.shard_eval_dataset(
          global_batches, num_generations=self._num_generations
      )
    return self._stock.eval.shard_eval(global_batches)

  def _deal(self, global_batches):
    """This host's share of each global batch, with row ids recorded."""
    if self.rl_cluster is None:
      raise RuntimeError("The dataset was iterated before the cluster exists.")
    if self.options.multi_controller:
      return self.rl_cluster.shard_dataset(
          global_batches, num_generations=self._num_generations,
          loss_agg_mode=self._learner_config().get(
              "loss_agg_mode", "sequence-mean-token-mean"),
      )
    return self._stock.train.shard(global_batches)


class _LazyIterable:
  """Iterates what `get()` returns at iteration time (the test split exists
  only once Tunix's `_run` has built its datasets)."""

  def __init__(self, get: Callable[[], Iterable[Any]]):
    self._get = get

  def __iter__(self) -> Iterator[Any]:
    return iter(self._get())


def run_pipeline(argv: list[str], options: CliOptions) -> None:
  """Tunix's own `main` with our pipeline class in place of GrpoPipeline."""
  tunix_cli.run_main(
      argv, functools.partial(GrpoCliPipeline, options=options)
  )
