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

BACKENDS = ("tunix", "mcjax")


@dataclasses.dataclass(frozen=True, kw_only=True)
class GrpoJobConfig:
  """A GRPO job; sizes are global (the whole cluster), as in Tunix recipes."""

  backend: str = "mcjax"
  engine: str = "native"
  # Defaults: the built-in demo (tasks.DEMO_DEFAULTS), which the tiny model
  # measurably learns on CPU.
  steps: int = 60
  seed: int = 0
  batch_size: int = 16
  num_generations: int = 16
  max_new_tokens: int = 8
  max_prompt_length: int = 4
  temperature: float = 1.0
  top_p: float = 1.0
  top_k: int | None = None
  learning_rate: float = 5e-3
  beta: float = 0.0
  epsilon: float = 0.2
  model: str = "tiny"
  dataset: str = "toy"
  dtype: str = "float32"
  metrics_out: str | None = None
  dump_dir: str | None = None

  def __post_init__(self):
    if self.backend not in BACKENDS:
      raise ValueError(
          f"backend must be one of {BACKENDS}, got {self.backend!r}."
      )
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


def _build_models(cfg: GrpoJobConfig, mesh):
  """Actor, reference (or None) and tokenizer, sharded on `mesh`."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import models  # pylint: disable=g-import-not-at-top

  dtype = jnp.dtype(cfg.dtype)
  if cfg.model == "tiny":
    model_cfg = models.tiny_qwen3_config()
    make = lambda: models.create_tiny_model(model_cfg, seed=cfg.seed, mesh=mesh)
    tokenizer = models.ToyTokenizer()
  else:
    if not os.path.isdir(cfg.model):
      raise FileNotFoundError(
          f"--model={cfg.model!r} is neither 'tiny' nor a local directory with"
          " a Hugging Face Qwen3 checkpoint."
      )
    make = lambda: models.load_hf_qwen3(cfg.model, mesh=mesh, dtype=dtype)[0]
    tokenizer = models.load_hf_qwen3_tokenizer(cfg.model)
  actor = make()
  reference = make() if cfg.beta != 0.0 else None
  return actor, reference, tokenizer


def run(cfg: GrpoJobConfig) -> dict[str, Any]:
  """Runs the job in this process (one host of it). Returns a summary."""
  from tunix_mcjax import runtime  # pylint: disable=g-import-not-at-top

  info = runtime.initialize()
  import jax  # pylint: disable=g-import-not-at-top
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  from tunix.rl.grpo import grpo_learner  # pylint: disable=g-import-not-at-top
  from tunix.rl.rollout import base_rollout  # pylint: disable=g-import-not-at-top

  import tunix_mcjax  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import admission as admission_lib  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import cluster as cluster_lib  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import compat  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import engines  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import tasks  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.registry import ENGINES  # pylint: disable=g-import-not-at-top

  del engines  # Registers the built-in engines.
  if cfg.backend == "tunix" and info.process_count > 1:
    raise ValueError(
        "The 'tunix' backend is single-controller: run it as one process"
        " (Pathways is not available here); use --backend=mcjax for"
        " one process per host."
    )
  mesh = runtime.global_mesh()
  actor, reference, tokenizer = _build_models(cfg, mesh)
  batches, reward_fns = tasks.dataset_from_spec(
      cfg.dataset, batch_size=cfg.batch_size, num_batches=cfg.steps,
      seed=cfg.seed,
  )
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
      max_steps=cfg.steps,
  )
  roles = {compat.Role.ACTOR: mesh, compat.Role.ROLLOUT: mesh,
           compat.Role.REFERENCE: mesh}
  common = dict(actor=actor, reference=reference, tokenizer=tokenizer)
  if cfg.backend == "mcjax":
    cluster = tunix_mcjax.create_rl_cluster(
        "mcjax",
        cluster_config=compat.ClusterConfig(
            role_to_mesh=roles,
            rollout_engine=cfg.engine,
            training_config=training_config,
            rollout_config=rollout_config,
        ),
        options=cluster_lib.McJaxOptions(
            engine=cfg.engine, sampling_seed=cfg.seed,
            metrics_out=cfg.metrics_out,
        ),
        **common,
    )
    train_ds = cluster.shard_dataset(batches, num_generations=cfg.num_generations)
  else:
    # Stock single-controller cluster; only the engine is ours, so that both
    # backends draw the same per-row samples.
    adm = admission_lib.Admission(admission_lib.AdmissionConfig(
        num_hosts=1, host_index=0, num_generations=cfg.num_generations))
    cluster = tunix_mcjax.create_rl_cluster(
        "tunix",
        cluster_config=compat.ClusterConfig(
            role_to_mesh=roles,
            rollout_engine=functools.partial(
                ENGINES.get(cfg.engine), row_ids=adm.row_ids, seed=cfg.seed,
                reshard_on_update=True),
            training_config=training_config,
            rollout_config=rollout_config,
        ),
        **common,
    )
    train_ds = adm.shard(batches)
    _StockStepLogger(cluster, cfg)

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
  t0 = time.perf_counter()
  learner.train(train_ds)
  wall = time.perf_counter() - t0

  records = list(getattr(cluster, "step_records", None) or
                 getattr(cluster, "_mcjax_records", []))
  summary = {"backend": cfg.backend, "num_hosts": info.process_count,
             "steps": len(records), "wall_s": wall, "records": records}
  if cfg.dump_dir:
    params = jax.tree.map(
        np.asarray,
        multihost_utils.process_allgather(
            jax.tree.map(lambda x: x,
                         dict(_flat_params(cluster.actor_trainer.model))),
            tiled=True,
        ),
    )
    os.makedirs(cfg.dump_dir, exist_ok=True)
    host = info.process_index
    with open(os.path.join(cfg.dump_dir, f"rollouts_host{host}.json"), "w") as f:
      json.dump(recorder.calls, f)
    if host == 0:
      np.savez(os.path.join(cfg.dump_dir, "params.npz"), **params)
      with open(os.path.join(cfg.dump_dir, "records.json"), "w") as f:
        json.dump(records, f)
  return summary


def _flat_params(model) -> dict[str, Any]:
  import jax  # pylint: disable=g-import-not-at-top
  from flax import nnx  # pylint: disable=g-import-not-at-top

  leaves = jax.tree_util.tree_flatten_with_path(nnx.state(model, nnx.Param))[0]
  return {jax.tree_util.keystr(p): v for p, v in leaves}


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


class _StockStepLogger:  # pylint: disable=too-few-public-methods
  """Per-step records for the stock cluster, through its public hook.

  Tunix calls the external metrics logger with each step's buffered metrics
  when the next step starts (and at close), so the record of step k is
  complete then.
  """

  def __init__(self, cluster, cfg: GrpoJobConfig):
    self._cluster = cluster
    self._cfg = cfg
    self._last = time.perf_counter()
    cluster._mcjax_records = []  # pylint: disable=protected-access
    if cfg.metrics_out:
      os.makedirs(os.path.dirname(os.path.abspath(cfg.metrics_out)),
                  exist_ok=True)
    self._file = open(cfg.metrics_out, "a") if cfg.metrics_out else None
    cluster.with_external_metrics_logger(self)

  def __call__(self, buf) -> None:
    from tunix_mcjax import compat  # pylint: disable=g-import-not-at-top

    m = buf.metrics
    if buf.mode != "train" or "rewards/score/mean" not in m:
      return  # E.g. the perf-only buffer that close() flushes.
    get = lambda k: float(np.mean(m[k][0])) if k in m else None
    now = time.perf_counter()
    record = {
        "step": buf.global_steps + 1,
        "backend": "tunix",
        "num_hosts": 1,
        "reward_mean": get("rewards/score/mean"),
        "completion_len_mean": get("completions/mean_length"),
        "loss": compat.last_train_metrics(
            self._cluster.actor_trainer).get("loss"),
        "step_time_s": now - self._last,
        "phases": {},
    }
    self._last = now
    self._cluster._mcjax_records.append(record)  # pylint: disable=protected-access
    if self._file:
      self._file.write(json.dumps(record) + "\n")
      self._file.flush()
