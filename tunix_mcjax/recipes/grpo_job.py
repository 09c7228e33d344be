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

"""One GRPO job on either backend: the body of examples/grpo_qwen3.py.

Kept in the package (not the example) so that tests and the benchmark run the
exact code a user runs. Everything below is a stock Tunix GRPO recipe; the
only backend-specific lines are `create_rl_cluster(backend, ...)` and the
per-host dataset sharding.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time
from typing import Any

import numpy as np

import tunix_mcjax
from tunix_mcjax.recipes import tasks

# The registered cluster backends; the registry is the one list of them.
BACKENDS = tuple(tunix_mcjax.backend_names())
_DEMO = tasks.DEMO_DEFAULTS
TRAINERS = ("tunix", "maxtext")


@dataclasses.dataclass(frozen=True, kw_only=True)
class GrpoJobConfig:
  """A GRPO job; sizes are global (the whole cluster), as in Tunix recipes."""

  backend: str = "mcjax"
  engine: str = "native"
  # The trainer's model: Tunix's Qwen3, or a MaxText Qwen3 behind MaxText's
  # Tunix adapter (the engine then runs Tunix's Qwen3 layout).
  trainer: str = "tunix"
  # MaxText only: base YAML (None: MaxText's base.yml), `key=value`
  # overrides (None: maxtext_models.TINY_QWEN3_OVERRIDES), a parameter
  # checkpoint (None: random init from `seed`), the scanned layer layout.
  maxtext_config: str | None = None
  maxtext_overrides: tuple[str, ...] | None = None
  load_parameters_path: str | None = None
  scan_layers: bool = True
  # Defaults: the built-in demo (tasks.DEMO_DEFAULTS), which the tiny model
  # measurably learns on CPU.
  steps: int = _DEMO.num_steps
  seed: int = _DEMO.seed
  batch_size: int = _DEMO.batch_size
  num_generations: int = _DEMO.num_generations
  max_new_tokens: int = _DEMO.max_tokens_to_generate
  max_prompt_length: int = _DEMO.max_prompt_length
  temperature: float = _DEMO.temperature
  top_p: float = 1.0
  top_k: int | None = None
  learning_rate: float = _DEMO.learning_rate
  beta: float = _DEMO.beta
  epsilon: float = 0.2
  model: str = "tiny"
  dataset: str = "toy"
  dtype: str = "float32"
  metrics_out: str | None = None
  dump_dir: str | None = None
  # The same `steps` batches are run this many times in a row (the
  # benchmark's two-pass protocol scores the second pass).
  passes: int = 1
  # mcjax host-side optimizations: a profile ("base", "optimized"; None: the
  # backend's defaults) and per-switch overrides (None: the profile's).
  profile: str | None = None
  async_metrics: bool | None = None
  freeze_gc: bool | None = None
  balance_admission: bool | None = None
  publish_in_one_call: bool | None = None
  # JAX profiler traces of these steps (1-based, counted over all passes).
  trace_steps: tuple[int, ...] = ()
  trace_dir: str | None = None

  def __post_init__(self):
    if self.backend not in BACKENDS:
      raise ValueError(
          f"backend must be one of {BACKENDS}, got {self.backend!r}."
      )
    if self.trainer not in TRAINERS:
      raise ValueError(
          f"trainer must be one of {TRAINERS}, got {self.trainer!r}."
      )
    if self.trainer != "maxtext" and (
        self.maxtext_config or self.maxtext_overrides is not None
        or self.load_parameters_path
    ):
      raise ValueError(
          "maxtext_config, maxtext_overrides and load_parameters_path need"
          " trainer='maxtext'."
      )
    if self.trainer == "maxtext" and self.engine != "native":
      raise ValueError(
          "trainer='maxtext' runs with engine='native' here; the vLLM engines"
          " take the same published Tunix-layout tree, but maxtext and vLLM"
          " do not install into one environment on this project's machines,"
          " so that combination is untested and refused."
      )
    for item in self.maxtext_overrides or ():
      if "=" not in item:
        raise ValueError(
            f"maxtext_overrides entries are key=value, got {item!r}."
        )
    if self.passes < 1:
      raise ValueError(f"passes must be >= 1, got {self.passes}.")
    # Validates the profile name and the switches.
    self.optimizations()
    if self.trace_steps and not self.trace_dir:
      raise ValueError("trace_steps needs trace_dir.")
    for name in ("steps", "batch_size", "max_new_tokens", "max_prompt_length"):
      if getattr(self, name) < 1:
        raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
    if self.num_generations < 2:
      raise ValueError(
          f"num_generations must be >= 2 for GRPO, got {self.num_generations}."
      )
    if self.learning_rate <= 0:
      raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}.")
    if self.dtype not in ("float32", "bfloat16"):
      raise ValueError(f"dtype must be float32 or bfloat16, got {self.dtype}.")

  def optimizations(self) -> Any:
    """The mcjax `HostOptimizations` this job asks for."""
    from tunix_mcjax import host_optimizations  # pylint: disable=g-import-not-at-top

    return host_optimizations.from_profile(
        self.profile,
        async_metrics=self.async_metrics,
        freeze_gc=self.freeze_gc,
        balance_admission=self.balance_admission,
        publish_in_one_call=self.publish_in_one_call,
    )


def _tokenizer(cfg: GrpoJobConfig) -> Any:
  from tunix_mcjax.recipes import models  # pylint: disable=g-import-not-at-top

  if cfg.model == "tiny":
    return models.ToyTokenizer()
  # Raises FileNotFoundError, saying what to pass, for a non-directory.
  return models.load_hf_qwen3_tokenizer(cfg.model)


def _build_maxtext(cfg: GrpoJobConfig):
  """MaxText actor, reference (or None), tokenizer, mesh, config."""
  from tunix_mcjax.maxtext import models as maxtext_models  # pylint: disable=g-import-not-at-top

  tokenizer = _tokenizer(cfg)
  overrides = None
  if cfg.maxtext_overrides is not None:
    overrides = dict(
        item.split("=", 1) for item in cfg.maxtext_overrides
    )
  config = maxtext_models.maxtext_config(
      base_config=cfg.maxtext_config,
      overrides=overrides,
      load_parameters_path=cfg.load_parameters_path,
      scan_layers=cfg.scan_layers,
      # The tiny model's vocabulary is the toy tokenizer's.
      vocab_size=tokenizer.vocab_size if cfg.model == "tiny" else None,
  )
  mesh = maxtext_models.maxtext_mesh(config)
  make = lambda: maxtext_models.create_actor(
      config, mesh, pad_id=tokenizer.pad_id(), rng_seed=cfg.seed
  )
  actor = make()
  reference = make() if cfg.beta != 0.0 else None
  return actor, reference, tokenizer, mesh, config


def _build_models(cfg: GrpoJobConfig, mesh):
  """Actor, reference (or None) and tokenizer, sharded on `mesh`."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.recipes import models  # pylint: disable=g-import-not-at-top

  dtype = jnp.dtype(cfg.dtype)
  if cfg.model == "tiny":
    from tunix_mcjax import engines  # pylint: disable=g-import-not-at-top,unused-import
    from tunix_mcjax.registry import ENGINES  # pylint: disable=g-import-not-at-top

    # An engine may need a different tiny shape (vLLM's CPU attention has no
    # head_dim 16 kernel); it says so in `tiny_model_overrides`.
    model_cfg = models.tiny_qwen3_config(
        **getattr(ENGINES.get(cfg.engine), "tiny_model_overrides", {})
    )
    make = lambda: models.create_tiny_model(model_cfg, seed=cfg.seed, mesh=mesh)
    actor, tokenizer = make(), _tokenizer(cfg)
  else:
    make = lambda: models.load_hf_qwen3(cfg.model, mesh=mesh, dtype=dtype)[0]
    actor, tokenizer, _ = models.load_hf_qwen3(
        cfg.model, mesh=mesh, dtype=dtype)
  reference = make() if cfg.beta != 0.0 else None
  return actor, reference, tokenizer


def run(cfg: GrpoJobConfig) -> dict[str, Any]:
  """Runs the job in this process (one host of it). Returns a summary."""
  from tunix_mcjax import runtime  # pylint: disable=g-import-not-at-top

  info = runtime.initialize()
  import optax  # pylint: disable=g-import-not-at-top
  from tunix.rl.grpo import grpo_learner  # pylint: disable=g-import-not-at-top
  from tunix.rl.rollout import base_rollout  # pylint: disable=g-import-not-at-top

  import tunix_mcjax  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import admission as admission_lib  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import cluster as cluster_lib  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import compat  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import engines  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import telemetry  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.telemetry import stock as telemetry_stock  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.registry import ENGINES  # pylint: disable=g-import-not-at-top

  del engines  # Registers the built-in engines.
  if cfg.backend == "tunix" and info.process_count > 1:
    raise ValueError(
        "The 'tunix' backend is single-controller: run it as one process"
        " (Pathways is not available here); use --backend=mcjax for"
        " one process per host."
    )
  engine_model = None
  axis_rules = None
  if cfg.trainer == "maxtext":
    import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
    from tunix_mcjax.maxtext import models as maxtext_models  # pylint: disable=g-import-not-at-top

    actor, reference, tokenizer, mesh, mt_config = _build_maxtext(cfg)
    engine_model = maxtext_models.engine_model_spec(
        mt_config, dtype=jnp.dtype(cfg.dtype)
    )
    rules = maxtext_models.logical_axis_rules(mt_config)
    axis_rules = {compat.Role.ACTOR: rules, compat.Role.REFERENCE: rules}
  else:
    mesh = runtime.global_mesh()
    actor, reference, tokenizer = _build_models(cfg, mesh)
  batches, reward_fns = tasks.dataset_from_spec(
      cfg.dataset, batch_size=cfg.batch_size, num_batches=cfg.steps,
      seed=cfg.seed,
  )
  batches = list(batches) * cfg.passes
  total_steps = cfg.steps * cfg.passes
  recorder = _Recorder(reward_fns) if cfg.dump_dir else None
  if recorder is not None:
    reward_fns = recorder.reward_fns

  rollout_config = base_rollout.RolloutConfig(
      max_tokens_to_generate=cfg.max_new_tokens,
      max_prompt_length=cfg.max_prompt_length,
      kv_cache_size=cfg.max_prompt_length + cfg.max_new_tokens + 8,
      temperature=cfg.temperature,
      top_p=cfg.top_p,
      top_k=cfg.top_k,
      seed=cfg.seed,
  )
  training_config = compat.RLTrainingConfig(
      actor_optimizer=optax.adam(cfg.learning_rate),
      eval_every_n_steps=10**9,
      max_steps=total_steps,
  )
  roles = {compat.Role.ACTOR: mesh, compat.Role.ROLLOUT: mesh,
           compat.Role.REFERENCE: mesh}
  common = dict(actor=actor, reference=reference, tokenizer=tokenizer)
  if cfg.backend == "mcjax":
    cluster = tunix_mcjax.create_rl_cluster(
        "mcjax",
        cluster_config=compat.ClusterConfig(
            role_to_mesh=roles,
            role_to_logical_axis_rule=axis_rules,
            rollout_engine=cfg.engine,
            training_config=training_config,
            rollout_config=rollout_config,
        ),
        options=cluster_lib.McJaxOptions(
            engine=cfg.engine, sampling_seed=cfg.seed,
            metrics_out=cfg.metrics_out,
            optimizations=cfg.optimizations(),
            trace_steps=tuple(cfg.trace_steps),
            trace_dir=cfg.trace_dir,
            engine_model=engine_model,
        ),
        **common,
    )
    train_ds = cluster.shard_dataset(batches, num_generations=cfg.num_generations)
    stock_recorder = None
    fixes = None
  else:
    # Stock single-controller cluster; only the engine is ours, so that both
    # backends draw the same per-row samples.
    from tunix.generate import tokenizer_adapter  # pylint: disable=g-import-not-at-top

    adapter = tokenizer_adapter.TokenizerAdapter(tokenizer)
    # The single controller admits (and tokenizes) every prompt, as the mcjax
    # hosts do for their shares.
    adm = admission_lib.Admission(
        admission_lib.AdmissionConfig(
            num_hosts=1, host_index=0, num_generations=cfg.num_generations),
        length_fn=lambda ps: [len(adapter.encode(p)) for p in ps],
    )
    from tunix_mcjax.engines import base as engine_base  # pylint: disable=g-import-not-at-top

    engine_context = engine_base.EngineContext(
        row_ids=adm.ledger, seed=cfg.seed, reshard_on_update=True)
    fixes = None
    if engine_model is not None:
      # The learner compares actor and engine models (Tunix fix, undone at
      # the end of the job as the mcjax cluster undoes it at close()).
      fixes = compat.install_fixes()
      from flax import nnx  # pylint: disable=g-import-not-at-top
      from tunix_mcjax import publication  # pylint: disable=g-import-not-at-top

      # The stock cluster hands the engine the actor's (MaxText) parameters
      # at every sync; the engine maps them as mcjax's publisher does.
      local = runtime.local_mesh(axis_names=engine_model.axis_names)
      engine_context = dataclasses.replace(
          engine_context,
          engine_mesh=local,
          initial_model=publication.build_engine_model(
              engine_model, nnx.state(actor, nnx.Param), local),
          source_mapping=engine_model.mapping,
      )
    cluster = tunix_mcjax.create_rl_cluster(
        "tunix",
        cluster_config=compat.ClusterConfig(
            role_to_mesh=roles,
            role_to_logical_axis_rule=axis_rules,
            rollout_engine=functools.partial(
                ENGINES.get(cfg.engine), context=engine_context),
            training_config=training_config,
            rollout_config=rollout_config,
        ),
        **common,
    )
    # Step records with the mcjax schema, measured the same way.
    stock_recorder = telemetry_stock.StockClusterRecorder(
        cluster, ledger=adm.ledger, metrics_out=cfg.metrics_out
    )
    train_ds = adm.shard(batches)
  # Both clusters expose their step clock: reward scoring is its own phase.
  reward_fns = telemetry.timed_reward_fns(reward_fns, cluster.step_clock)

  learner = grpo_learner.GRPOLearner(
      rl_cluster=cluster,
      algo_config=grpo_learner.GRPOConfig(
          num_generations=cfg.num_generations,
          num_iterations=1,
          beta=cfg.beta,
          epsilon=cfg.epsilon,
      ),
      reward_fns=reward_fns,
  )
  if cfg.dump_dir:
    # Lets tests check that training moved the parameters at all.
    init_params = _gathered_params(cluster.actor_trainer.model)
  t0 = time.perf_counter()
  learner.train(train_ds)
  wall = time.perf_counter() - t0
  if stock_recorder is not None:
    stock_recorder.close()
  if fixes is not None:
    fixes.undo()

  # learner.train() closed the cluster, which exported every step.
  records = (
      list(cluster.step_records) if stock_recorder is None
      else [r.as_dict() for r in stock_recorder.records]
  )
  summary = {"backend": cfg.backend, "num_hosts": info.process_count,
             "steps": len(records), "wall_s": wall, "records": records}
  if cfg.dump_dir:
    params = _gathered_params(cluster.actor_trainer.model)
    os.makedirs(cfg.dump_dir, exist_ok=True)
    host = info.process_index
    with open(os.path.join(cfg.dump_dir, f"rollouts_host{host}.json"), "w") as f:
      json.dump(recorder.calls, f)
    if host == 0:
      np.savez(os.path.join(cfg.dump_dir, "params.npz"), **params)
      np.savez(os.path.join(cfg.dump_dir, "params_init.npz"), **init_params)
      with open(os.path.join(cfg.dump_dir, "records.json"), "w") as f:
        json.dump(records, f)
  return summary


def _gathered_params(model) -> dict[str, np.ndarray]:
  """Every parameter as a full numpy array on every host (a collective)."""
  from flax import nnx  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import publication  # pylint: disable=g-import-not-at-top

  return jax.tree.map(
      np.asarray,
      multihost_utils.process_allgather(
          publication.flat_by_name(nnx.state(model, nnx.Param)), tiled=True),
  )


class _Recorder:
  """Wraps reward functions to record every scored row (tests, debugging)."""

  def __init__(self, reward_fns):
    self.calls: list[dict[str, Any]] = []
    fns = reward_fns if isinstance(reward_fns, list) else [reward_fns]

    def wrap(fn, first):
      @functools.wraps(fn)
      def wrapped(prompts, completions, **kwargs):
        rewards = fn(prompts, completions, **kwargs)
        if first:
          self.calls.append({"prompts": list(prompts),
                             "completions": list(completions),
                             "rewards": [float(r) for r in rewards]})
        else:
          self.calls[-1]["rewards"] = [
              a + float(b) for a, b in zip(self.calls[-1]["rewards"], rewards)]
        return rewards
      return wrapped

    self.reward_fns = [wrap(f, i == 0) for i, f in enumerate(fns)]
