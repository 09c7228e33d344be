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
import time
from typing import Any

from tunix_mcjax.recipes import validation

# Re-exported: the job's configuration lives in job_config.
# pylint: disable=unused-import
from tunix_mcjax.recipes.job_checks import TINY_DIMS
from tunix_mcjax.recipes.job_checks import check_job
from tunix_mcjax.recipes.job_checks import choose_mesh
from tunix_mcjax.recipes.job_checks import model_dims
from tunix_mcjax.recipes.job_config import BACKENDS
from tunix_mcjax.recipes.job_config import GrpoJobConfig
from tunix_mcjax.recipes.job_config import TRAINERS
# pylint: enable=unused-import


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
  config = _maxtext_config(cfg, tokenizer)
  mesh = maxtext_models.maxtext_mesh(config)
  make = lambda: maxtext_models.create_actor(
      config, mesh, pad_id=tokenizer.pad_id(), rng_seed=cfg.seed
  )
  actor = make()
  reference = make() if _needs_reference(cfg) else None
  return actor, reference, tokenizer, mesh, config


def _maxtext_config(cfg: GrpoJobConfig, tokenizer: Any) -> Any:
  """The MaxText config of the job's actor."""
  from tunix_mcjax.maxtext import models as maxtext_models  # pylint: disable=g-import-not-at-top

  overrides = None
  if cfg.maxtext_overrides is not None:
    overrides = dict(
        item.split("=", 1) for item in cfg.maxtext_overrides
    )
  elif cfg.model == "tiny":
    from tunix_mcjax import engines  # pylint: disable=g-import-not-at-top,unused-import
    from tunix_mcjax.registry import ENGINES  # pylint: disable=g-import-not-at-top

    # The engine's tiny shape, as for Tunix's tiny model (vLLM's CPU
    # attention has no head_dim 16 kernel); the names are shared.
    overrides = {
        **maxtext_models.TINY_QWEN3_OVERRIDES,
        **getattr(ENGINES.get(cfg.engine), "tiny_model_overrides", {}),
    }
  return maxtext_models.maxtext_config(
      base_config=cfg.maxtext_config,
      overrides=overrides,
      load_parameters_path=cfg.load_parameters_path,
      scan_layers=cfg.scan_layers,
      # The tiny model's vocabulary is the toy tokenizer's.
      vocab_size=tokenizer.vocab_size if cfg.model == "tiny" else None,
  )


def maxtext_engine_model(cfg: GrpoJobConfig, mesh: Any) -> tuple[Any, Any]:
  """The engine model behind the job's MaxText actor, and the tokenizer.

  For a disaggregated rollout host (no actor there): the Tunix Qwen3 of
  `maxtext.models.engine_model_spec`, replicated on `mesh` as the colocated
  cluster builds it, with zero weights until the trainers' first
  publication (which they map from MaxText's layout before sending).
  """
  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp
  from tunix_mcjax.maxtext import models as maxtext_models
  # pylint: enable=g-import-not-at-top

  tokenizer = _tokenizer(cfg)
  spec = maxtext_models.engine_model_spec(
      _maxtext_config(cfg, tokenizer), dtype=jnp.dtype(cfg.dtype))
  return maxtext_models.zero_engine_model(spec, mesh), tokenizer


def _hsdp_sharding(shd: Any) -> Any:
  """Tunix's Qwen3 ShardingConfig with activations' batch over data x fsdp.

  Weights keep their "fsdp" specs (replicated across hosts). The default
  activation specs put the batch on "fsdp" alone, which on an hsdp mesh
  would replicate activations across hosts (Tunix applies them on
  accelerators only; on CPU they are no-ops).
  """
  batch = ("data", "fsdp")
  return dataclasses.replace(
      shd,
      act_btd=(batch, *shd.act_btd[1:]),
      act_btf=(batch, *shd.act_btf[1:]),
      act_btnh=(batch, *shd.act_btnh[1:]),
  )


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
    # 'vanilla' (Tunix's own sampler) runs the model as the native engine.
    from tunix_mcjax import rules  # pylint: disable=g-import-not-at-top

    engine = rules.registered_engine(cfg.engine)
    overrides = dict(
        getattr(ENGINES.get(engine), "tiny_model_overrides", {}))
    if "data" in mesh.axis_names:
      overrides["shd_config"] = _hsdp_sharding(
          models.tiny_qwen3_config().shd_config)
    if dtype != jnp.float32:
      overrides.setdefault("dtype", dtype)
      overrides.setdefault("param_dtype", dtype)
    model_cfg = models.tiny_qwen3_config(**overrides)
    make = lambda: models.create_tiny_model(model_cfg, seed=cfg.seed, mesh=mesh)
    actor, tokenizer = make(), _tokenizer(cfg)
  else:
    make = lambda: models.load_hf_qwen3(cfg.model, mesh=mesh, dtype=dtype)[0]
    actor, tokenizer, _ = models.load_hf_qwen3(
        cfg.model, mesh=mesh, dtype=dtype)
  reference = make() if _needs_reference(cfg) else None
  if cfg.lora_rank is not None:
    # As Tunix's CLI (grpo_main): the reference is the base model and the
    # actor is that model with qwix LoRA adapters (Tunix's own helper).
    from tunix.cli.utils import model as tunix_model_lib  # pylint: disable=g-import-not-at-top

    if reference is not None:
      reference = actor
    actor = tunix_model_lib.apply_lora_to_model(actor, mesh, cfg.lora_config())
  return actor, reference, tokenizer


def train_rollout_config(cfg: GrpoJobConfig) -> Any:
  """The job's TRAIN `RolloutConfig` (also what rollout hosts build with)."""
  from tunix.rl.rollout import base_rollout  # pylint: disable=g-import-not-at-top

  return base_rollout.RolloutConfig(
      max_tokens_to_generate=cfg.max_new_tokens,
      max_prompt_length=cfg.max_prompt_length,
      kv_cache_size=cfg.max_prompt_length + cfg.max_new_tokens + 8,
      temperature=cfg.temperature,
      top_p=cfg.top_p,
      top_k=cfg.top_k,
      seed=cfg.seed,
      # Tunix's vLLM LoRA setting: the vLLM engine merges the adapters with
      # this rank and alpha (the model does not store them).
      rollout_vllm_lora_config=(
          cfg.lora_config() if cfg.engine == "vllm" else None),
      # vLLM's share of the GPU (JAX's is set before its backend starts).
      rollout_vllm_hbm_utilization=cfg.engine_memory_fraction,
      # Tunix's agentic learner trains on the sampler's log-probs.
      return_logprobs=cfg.learner == "agentic_grpo",
      eos_tokens=_agentic_stop_tokens(cfg),
  )


def _agentic_stop_tokens(cfg: GrpoJobConfig) -> list[int] | None:
  if cfg.dataset != "calc":
    return None
  from tunix_mcjax.recipes import agentic_tasks  # pylint: disable=g-import-not-at-top

  return agentic_tasks.stop_tokens(_tokenizer(cfg))


def _needs_reference(cfg: GrpoJobConfig) -> bool:
  # Tunix's learner asks for reference log-probs whenever `beta != 0.0`,
  # which DAPO's `beta=None` is (its loss then ignores them).
  return cfg.beta != 0.0 or cfg.learner == "dapo"


def _learner(cfg: GrpoJobConfig, cluster: Any, reward_fns: Any,
             dump: Any) -> Any:
  """Tunix's learner named by `cfg.learner`, configured as stock."""
  if cfg.learner == "agentic_grpo":
    from tunix_mcjax.recipes import agentic_tasks  # pylint: disable=g-import-not-at-top

    return agentic_tasks.learner(
        cfg, cluster, reward_fns,
        recorder=None if dump is None else dump.agent_rows)
  # pylint: disable=g-import-not-at-top
  from tunix.rl.grpo import dapo_learner
  from tunix.rl.grpo import drgrpo_learner
  from tunix.rl.grpo import grpo_learner
  # pylint: enable=g-import-not-at-top

  common = dict(num_generations=cfg.num_generations,
                num_iterations=cfg.num_iterations, epsilon=cfg.epsilon)
  if cfg.learner == "dapo":
    # Tunix's defaults otherwise (epsilon_high, overlong reward shaping).
    return dapo_learner.DAPOLearner(
        rl_cluster=cluster, algo_config=dapo_learner.DAPOConfig(**common),
        reward_fns=list(reward_fns))
  if cfg.learner == "drgrpo":
    return drgrpo_learner.DrGRPOLearner(
        rl_cluster=cluster,
        algo_config=drgrpo_learner.DrGRPOConfig(beta=cfg.beta, **common),
        reward_fns=reward_fns)
  return grpo_learner.GRPOLearner(
      rl_cluster=cluster,
      algo_config=grpo_learner.GRPOConfig(beta=cfg.beta, **common),
      reward_fns=reward_fns)


def check_inputs(cfg: GrpoJobConfig) -> None:
  """The data and tokenizer checks, without devices or a model.

  The example runs them before any host starts (the hosts run them again).

  Raises:
    validation.InputError: naming the row or setting and the fix.
  """
  _datasets(cfg, _tokenizer(cfg), model_dims(cfg).get("vocab_size"),
            host=None)


def _datasets(
    cfg: GrpoJobConfig, tokenizer: Any, model_vocab: int | None,
    host: int | None,
) -> tuple[list[Any], list[Any], list[Any] | None]:
  """Checked global train batches, the task's rewards, eval batches or None.

  Raises validation.InputError (data, tokenizer) before any collective, the
  same on every host; long prompts are dropped from the global dataset.
  Host 0 prints what --skip_long_prompts dropped.
  """
  validation.check_vocab(validation.tokenizer_vocab_size(tokenizer),
                         model_vocab if cfg.trainer == "tunix" else None,
                         model=cfg.model)
  lengths = validation.sampler_prompt_lengths(tokenizer)
  common = dict(seed=cfg.seed, length_fn=lengths,
                max_prompt_length=cfg.max_prompt_length,
                skip_long_prompts=cfg.skip_long_prompts)
  data = validation.prepare_dataset(
      cfg.dataset, batch_size=cfg.batch_size, num_batches=cfg.steps, **common)
  evaluation = None
  if cfg.eval_every is not None:
    evaluation = validation.prepare_eval_dataset(
        cfg.dataset, batch_size=cfg.batch_size,
        num_batches=cfg.eval_batches, **common)
  if host == 0 and cfg.skip_long_prompts:
    for what, d in (("training", data), ("evaluation", evaluation)):
      if d is not None:
        print(f"[grpo] --skip_long_prompts: dropped {d.dropped} of {d.rows}"
              f" {what} rows longer than {cfg.max_prompt_length} tokens",
              flush=True)
  return (data.batches, data.reward_fns,
          None if evaluation is None else evaluation.batches)


def run(cfg: GrpoJobConfig) -> dict[str, Any]:
  """Runs the job in this process (one host of it). Returns a summary."""
  from tunix_mcjax import device_memory  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import runtime  # pylint: disable=g-import-not-at-top

  if cfg.engine == "vllm":
    # JAX's share of the GPU beside vLLM's, before its backend starts.
    device_memory.apply(device_memory.split(cfg.engine_memory_fraction))
  info = runtime.initialize(runtime.RuntimeConfig.from_env(
      heartbeat_timeout_s=cfg.heartbeat_timeout_s))
  # On a real cluster no launcher checked the job before the hosts started.
  check_job(cfg, num_hosts=info.process_count,
            devices_per_host=info.local_device_count)
  import optax  # pylint: disable=g-import-not-at-top

  import tunix_mcjax  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import cluster as cluster_lib  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import compat  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import publication  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import stock_engine  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import telemetry  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.recipes import run_dump  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.telemetry import stock as telemetry_stock  # pylint: disable=g-import-not-at-top
  if cfg.backend == "tunix" and info.process_count > 1:
    raise ValueError(
        "The 'tunix' backend is single-controller: run it as one process"
        " (Pathways is not available here); use --backend=mcjax for"
        " one process per host."
    )
  engine_model = None
  axis_rules = None
  batch_sharding = {}
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
    import jax  # pylint: disable=g-import-not-at-top

    choice = choose_mesh(cfg, num_hosts=info.process_count,
                         devices_per_host=jax.local_device_count())
    if choice.reason and info.process_index == 0:
      print(f"[grpo] mesh: {choice.describe()} ({choice.reason})",
            flush=True)
    mesh = runtime.global_mesh(kind=choice.kind)
    actor, reference, tokenizer = _build_models(cfg, mesh)
    if choice.kind == "hsdp":
      # Tunix's shard_input reads this as PartitionSpec(("data", "fsdp")):
      # the batch splits over hosts and their devices; parameters (sharded
      # over "fsdp" only) stay replicated across hosts.
      batch_sharding = dict(data_sharding_axis=(choice.batch_axes,))
  batches, reward_fns, eval_batches = _datasets(
      cfg, tokenizer,
      getattr(getattr(actor, "config", None), "vocab_size", None),
      info.process_index)
  batches = list(batches) * cfg.passes
  total_steps = cfg.steps * cfg.passes
  from tunix_mcjax import rewards_pool  # pylint: disable=g-import-not-at-top

  # Every reward call has cfg.reward_timeout_s: in this host's pool (started
  # now, before the first step), or on a watchdog thread in this process.
  reward_pool = None
  host = rewards_pool.host_label(info.process_index)
  if cfg.reward_workers:
    reward_pool = rewards_pool.RewardPool(
        reward_fns, num_workers=cfg.reward_workers,
        timeout_s=cfg.reward_timeout_s, host=host)
    reward_fns = reward_pool.fns
  else:
    reward_fns = rewards_pool.with_timeouts(
        reward_fns, timeout_s=cfg.reward_timeout_s, host=host)
  # A reward function that raises, returns NaN or the wrong number of values
  # is an error naming it (Tunix would nansum NaN into 0); outside the pool,
  # which pickles the functions themselves.
  reward_fns = validation.checked_reward_fns(reward_fns)
  dump = run_dump.RunDump(cfg.dump_dir) if cfg.dump_dir else None
  if dump is not None:
    reward_fns = dump.reward_fns(reward_fns)

  rollout_config = train_rollout_config(cfg)
  training_config = compat.RLTrainingConfig(
      actor_optimizer=optax.adam(cfg.learning_rate),
      eval_every_n_steps=cfg.eval_every or 10**9,
      # Tunix counts optimizer updates: mini-batches x num_iterations per
      # global batch.
      max_steps=total_steps * cfg.updates_per_batch() * cfg.num_iterations,
      mini_batch_size=cfg.mini_batch_size,
      train_micro_batch_size=cfg.micro_batch_size,
      # The agentic learner then computes log-probs where it trains (on its
      # main thread, as mcjax needs: agent_turns).
      compute_logps_micro_batch_size=(
          cfg.micro_prompts() if cfg.learner == "agentic_grpo" else None),
      max_seq_token_per_tpu=cfg.max_seq_token_per_tpu,
      **batch_sharding,
      # Tunix's trainer saves (and restores) the actor; mcjax adds the resume
      # state (docs/checkpointing.md).
      **({} if cfg.checkpoint_dir is None
         else cfg.checkpoint_config().training_config_fields(
             updates_per_step=cfg.updates_per_batch() * cfg.num_iterations)),
  )
  roles = {compat.Role.ACTOR: mesh, compat.Role.ROLLOUT: mesh,
           compat.Role.REFERENCE: mesh}
  common = dict(actor=actor, reference=reference, tokenizer=tokenizer)
  if cfg.backend in ("mcjax", "mcjax_da"):
    # The disaggregated backend also needs where its rollout hosts are and
    # how stale their batches may be.
    da = ({} if cfg.backend == "mcjax"
          else dict(da=cfg.da_options(), num_generations=cfg.num_generations))
    cluster = tunix_mcjax.create_rl_cluster(
        cfg.backend,
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
            checkpoint_fingerprint=cfg.checkpoint_fingerprint(),
            resume_step=cfg.resume_step,
            transfer_guard=cfg.transfer_guard,
            step_timeout_s=cfg.step_timeout_s,
            engine_tp=cfg.engine_tp,
        ),
        **da,
        **common,
    )
    train_ds = cluster.shard_dataset(
        batches, num_generations=cfg.num_generations,
        loss_agg_mode=cfg.loss_agg_mode())
    eval_ds = None if eval_batches is None else cluster.shard_eval_dataset(
        eval_batches, num_generations=cfg.num_generations)
    stock_recorder = None
    fixes = None
  else:
    # Stock single-controller cluster; only the engine is ours, so that both
    # backends draw the same per-row samples.
    from tunix.generate import tokenizer_adapter  # pylint: disable=g-import-not-at-top

    adapter = tokenizer_adapter.TokenizerAdapter(tokenizer)
    # The single controller admits (and tokenizes) every prompt, as the mcjax
    # hosts do for their shares.
    stock = stock_engine.StockAdmission(
        num_generations=cfg.num_generations,
        length_fn=lambda ps: [len(adapter.encode(p)) for p in ps])
    engine_context = stock.engine_context(seed=cfg.seed)
    fixes = None
    if engine_model is not None:
      # The learner compares actor and engine models (Tunix fix, undone at
      # the end of the job as the mcjax cluster undoes it at close()).
      fixes = compat.install_fixes()
      from flax import nnx  # pylint: disable=g-import-not-at-top

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
    # --engine=vanilla: Tunix's own rollout, sharing the actor's weights
    # (no copy per step), exactly as a Tunix user runs it; it draws one
    # random stream per batch, so its samples differ from mcjax's.
    stock_rollout = ("vanilla" if cfg.engine == "vanilla"
                     else stock.rollout_engine(cfg.engine, engine_context))
    cluster = tunix_mcjax.create_rl_cluster(
        "tunix",
        cluster_config=compat.ClusterConfig(
            role_to_mesh=roles,
            role_to_logical_axis_rule=axis_rules,
            rollout_engine=stock_rollout,
            training_config=training_config,
            rollout_config=rollout_config,
        ),
        **common,
    )
    # Step records with the mcjax schema, measured the same way.
    stock_recorder = telemetry_stock.StockClusterRecorder(
        cluster, ledger=stock.train.ledger, metrics_out=cfg.metrics_out,
        trace_steps=tuple(cfg.trace_steps), trace_dir=cfg.trace_dir,
        take_rows=cfg.engine == "vanilla",
    )
    train_ds = stock.train.shard(batches)
    if cfg.learner == "agentic_grpo":
      from tunix_mcjax import agent_turns  # pylint: disable=g-import-not-at-top
      from tunix_mcjax import admission  # pylint: disable=g-import-not-at-top

      admission.route_agent_turns(cluster, agent_turns.AgentTurns(
          stock.train.ledger, stock.row_ids, first_step=cluster.global_steps))
    eval_ds = None
    if eval_batches is not None:
      stock.route_eval(cluster)
      eval_ds = stock.eval.shard_eval(eval_batches)
  # Both clusters expose their step clock: reward scoring is its own phase.
  reward_fns = telemetry.timed_reward_fns(reward_fns, cluster.step_clock)

  learner = _learner(cfg, cluster, reward_fns, dump)
  if dump is not None:
    dump.before_training(cluster)
  chunked = None
  if cfg.logps_chunk_size is not None:
    from tunix_mcjax.compat import chunked_logps  # pylint: disable=g-import-not-at-top

    chunked = chunked_logps.install_chunked_logps(cfg.logps_chunk_size)
  t0 = time.perf_counter()
  try:
    if cluster.global_steps < total_steps:
      learner.train(train_ds, eval_ds)
    else:
      # Resumed from the last step's checkpoint: nothing left to train.
      cluster.close()
  finally:
    if chunked is not None:
      chunked.undo()
  wall = time.perf_counter() - t0
  if reward_pool is not None:
    reward_pool.close()
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
  if dump is not None:
    # Under mcjax_da the engines live on the rollout hosts.
    dump.write(cluster, records, host=info.process_index,
               engine_params=(cfg.lora_rank is not None
                              and cfg.backend != "mcjax_da"))
  from tunix_mcjax.engines import base as engine_base  # pylint: disable=g-import-not-at-top

  engine_base.close(cluster.rollout)
  return summary
