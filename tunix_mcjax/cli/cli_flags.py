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

"""The absl flags that `grpo_main` adds to Tunix's GRPO command line.

Defined on import, next to Tunix's own flags (`tunix.cli.grpo_main`), so only
the entry point imports this module; the rest of the CLI reads
`CliOptions` (`options_from_flags`).
"""

from __future__ import annotations

from absl import flags

from tunix_mcjax import compilation_cache
from tunix_mcjax import support
from tunix_mcjax.cli.options import BACKENDS
from tunix_mcjax.cli.options import CliOptions
from tunix_mcjax.cli.options import ConfigError

# Host processes of a local simulation when --num_hosts is not given.
LOCAL_SIM_NUM_HOSTS = 2

BACKEND = flags.DEFINE_enum(
    "backend",
    BACKENDS[0],
    list(BACKENDS),
    "RL cluster backend: 'tunix' (stock, single controller), 'mcjax' (one"
    " process per host) or 'mcjax_da' (trainer hosts and rollout hosts"
    " apart, from the actor's and the rollout's meshes; docs/cli.md).",
)
NUM_HOSTS = flags.DEFINE_integer(
    "num_hosts",
    None,
    "mcjax on one machine (no cluster detected): host processes to start;"
    " each owns 1/N of the GPUs or TPU chips here (default 1), or N"
    f" simulated hosts (default {LOCAL_SIM_NUM_HOSTS}).",
)
DEVICES_PER_HOST = flags.DEFINE_integer(
    "devices_per_host",
    None,
    "mcjax on one machine: fake CPU devices per simulated host (default: the"
    " size of actor_model_config.mesh divided by --num_hosts); asks for"
    " simulated hosts.",
)
SIMULATE = flags.DEFINE_boolean(
    "simulate",
    False,
    "mcjax on one machine: simulated hosts of fake CPU devices even where"
    " GPUs or TPU chips are present (a machine without them always"
    " simulates).",
)
TIMEOUT = flags.DEFINE_integer(
    "timeout",
    3600,
    "mcjax on one machine: stop all hosts after this many seconds.",
)
METRICS_OUT = flags.DEFINE_string(
    "metrics_out",
    None,
    "Append one JSON object per GRPO step (step, reward_mean, loss, ...) to"
    " this file (host 0 writes).",
)
TRANSFER_GUARD = flags.DEFINE_enum(
    "transfer_guard",
    "allow",
    ["allow", "log", "disallow"],
    "mcjax only: JAX's transfer guard over the backend's calls of every step"
    " after the first; 'disallow' raises on an implicit host<->device"
    " transfer (docs/design.md lists the deliberate ones).",
)
REWARD_WORKERS = flags.DEFINE_integer(
    "reward_workers",
    0,
    "Score the reward functions in a per-host pool of this many worker"
    " processes (functions must be picklable); 0: in-process (stock).",
)
PLACEMENT_INVARIANT = flags.DEFINE_bool(
    "placement_invariant_sampling",
    False,
    "tunix backend only, for comparisons with mcjax: sample with the mcjax"
    " native engine and per-row keys, and drop a final partial batch. Off:"
    " the stock engine named by `rollout_engine`.",
)
ENGINE = flags.DEFINE_string(
    "engine",
    None,
    "mcjax only: the mcjax rollout engine by registered name (native, vllm ="
    " PyTorch vLLM, vllm_tpu). Default: `rollout_engine` in Tunix's meaning"
    " (vanilla = native; Tunix's vllm and sglang_jax are refused, naming the"
    " engine to pass here).",
)
PROFILE = flags.DEFINE_enum(
    "profile",
    None,
    ["base", "optimized"],
    "mcjax only: host-side optimizations; base = O1-O4 off, optimized = all"
    " on; unset = the backend's defaults (only O4 on). The switches below"
    " override it.",
)
ASYNC_METRICS = flags.DEFINE_boolean(
    "async_metrics", None,
    "mcjax only, O1: export metrics on a background thread.",
)
FREEZE_GC = flags.DEFINE_boolean(
    "freeze_gc", None,
    "mcjax only, O2: gc.freeze() after warm-up; no full collect per step.",
)
BALANCE_ADMISSION = flags.DEFINE_boolean(
    "balance_admission", None,
    "mcjax only, O3: deal prompts to hosts balanced by prompt length.",
)
PUBLISH_IN_ONE_CALL = flags.DEFINE_boolean(
    "publish_in_one_call", None,
    "mcjax only, O4: publish all weights in one call (else one per"
    " parameter).",
)
MESH = flags.DEFINE_enum(
    "mesh",
    None,
    list(support.MESH_KINDS),
    "mcjax only: the trainer mesh. fsdp = actor_model_config.mesh's (fsdp,"
    " tp) over every device; hsdp = data-parallel across hosts x (fsdp, tp)"
    " within a host; auto (default) = fsdp when it divides the model's"
    " widths (read from a local checkpoint's config.json), else hsdp. A"
    " 3-axis (data, fsdp, tp) actor mesh is hsdp.",
)
TRAINER_HOSTS = flags.DEFINE_integer(
    "trainer_hosts",
    None,
    "mcjax_da only: trainer processes. Default: the size of"
    " actor_model_config.mesh / --devices_per_host.",
)
ROLLOUT_HOSTS = flags.DEFINE_integer(
    "rollout_hosts",
    None,
    "mcjax_da only: rollout processes, one local engine each. Default: the"
    " size of rollout_model_config.mesh / --devices_per_host (needed when"
    " the rollout has no mesh of its own).",
)
MAX_STALENESS = flags.DEFINE_integer(
    "max_staleness",
    1,
    "mcjax_da only: most policy versions a trained rollout may lag; 0 ="
    " synchronous, 1 = generate the next batch while training this one.",
)
IS_CAP = flags.DEFINE_float(
    "is_cap",
    2.0,
    "mcjax_da only: cap C of the truncated importance weight"
    " min(exp(logp_trainer - logp_sampler), C) per token (max_staleness >= 1).",
)
RAY_ADDRESS = flags.DEFINE_string(
    "ray_address",
    None,
    "mcjax_da only: an existing Ray cluster to run on (HOST:PORT of its GCS,"
    " ray://HOST:PORT, or 'auto'); the job kills only its own actors and"
    " leaves it running. Default: a Ray head of the job's own on 127.0.0.1.",
)
RAY_PLACEMENT_STRATEGY = flags.DEFINE_enum(
    "ray_placement_strategy",
    "SPREAD",
    ["SPREAD", "STRICT_SPREAD", "PACK", "STRICT_PACK"],
    "mcjax_da only: Ray placement-group strategy over the hosts' bundles"
    " (one per host).",
)
RAY_BUNDLE = flags.DEFINE_list(
    "ray_bundle",
    ["CPU=1"],
    "mcjax_da only: Ray resources of each host's bundle, NAME=AMOUNT items"
    " (e.g. CPU=8,TPU=4 or CPU=8,GPU=1).",
)
PARAMS_OUT = flags.DEFINE_string(
    "params_out",
    None,
    "After training, host 0 writes the actor's final parameters to this .npz"
    " file (any backend; for comparing backends).",
)
COMPILATION_CACHE_DIR = compilation_cache.define_flag()
RUN_EVAL = flags.DEFINE_bool(
    "run_eval",
    False,
    "Evaluate on Tunix's test split (the batches after `train_fraction`,"
    " every `eval_every_n_steps`), under either backend; Tunix's own"
    " grpo_main discards that split. Off: stock behaviour.",
)


def options_from_flags() -> CliOptions:
  """This entry point's options from its parsed flags; ConfigError if bad."""
  da_only = [f"--{f.name}" for f in (MAX_STALENESS, IS_CAP, RAY_ADDRESS,
                                      RAY_PLACEMENT_STRATEGY, RAY_BUNDLE)
             if f.present]
  if da_only and BACKEND.value != "mcjax_da":
    raise ConfigError(f"{', '.join(da_only)} apply to --backend=mcjax_da"
                      " only.")
  if not TIMEOUT.value > 0:  # Before the metrics file is claimed (emptied).
    raise ConfigError(
        f"--timeout must be > 0 seconds, got {TIMEOUT.value!r}.")
  return CliOptions(
      backend=BACKEND.value,
      metrics_out=METRICS_OUT.value,
      placement_invariant_sampling=PLACEMENT_INVARIANT.value,
      engine=ENGINE.value,
      profile=PROFILE.value,
      async_metrics=ASYNC_METRICS.value,
      freeze_gc=FREEZE_GC.value,
      balance_admission=BALANCE_ADMISSION.value,
      publish_in_one_call=PUBLISH_IN_ONE_CALL.value,
      run_eval=RUN_EVAL.value,
      mesh=MESH.value,
      reward_workers=REWARD_WORKERS.value,
      trainer_hosts=TRAINER_HOSTS.value,
      rollout_hosts=ROLLOUT_HOSTS.value,
      max_staleness=MAX_STALENESS.value,
      is_cap=IS_CAP.value,
      params_out=PARAMS_OUT.value,
      transfer_guard=TRANSFER_GUARD.value,
  )
