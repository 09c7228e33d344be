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

"""What the mcjax backend can run: its support rules, each stated once.

The rules are checked in two places, from two views of the same job:

* `check_cluster` / `per_host_training_config`: `McJaxRLCluster` at
  construction, on the objects (actor, meshes, Tunix's `ClusterConfig`).
* `check_job`: the CLI, on Tunix's parsed GRPO config, before any host
  starts; it uses no JAX device.

Each rule is one function below that returns a `Problem` (message and the
exception type the cluster raises) or None; both views call the same
function, so a rule and its message live in one place. The cluster raises
the first problem; the CLI lists them all.

The mesh choice (fsdp or hsdp from the model's widths) is in `meshes`. This
package imports no JAX at module level: `check_job` runs in the process that
launches the hosts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
import copy
import dataclasses
import math
import re
from typing import Any

# Re-exported: callers read every rule as `support.<name>`.
# pylint: disable=unused-import
from tunix_mcjax.support.problem import Problem
from tunix_mcjax.support.meshes import BATCH_AXES
from tunix_mcjax.support.meshes import DATA_AXIS
from tunix_mcjax.support.meshes import FSDP_DIMS
from tunix_mcjax.support.meshes import MESH_AXIS_NAMES
from tunix_mcjax.support.meshes import MESH_KINDS
from tunix_mcjax.support.meshes import MeshChoice
from tunix_mcjax.support.meshes import TP_DIMS
from tunix_mcjax.support.meshes import choose_mesh
from tunix_mcjax.support.meshes import config_mesh
from tunix_mcjax.support.meshes import hf_model_dims
# pylint: enable=unused-import

# Batch knobs of Tunix's RLTrainingConfig that count the whole job's rows
# (as in a single-controller recipe); each host's learner gets 1/H of each.
GLOBAL_BATCH_KNOBS = (
    "mini_batch_size",
    "train_micro_batch_size",
    "rollout_micro_batch_size",
    "compute_logps_micro_batch_size",
)
# Tunix's name of its own engine; under mcjax it means the native engine.
VANILLA_ENGINE = "vanilla"
# Tunix's rollout_engine names -> why mcjax cannot take each as it means in
# Tunix, and the mcjax engine to name instead (None: the name is honoured).
TUNIX_ENGINES = {
    VANILLA_ENGINE: None,
    "vllm": "in Tunix this is tpu-inference's vLLM; mcjax does not run it"
    " under that name (its engine 'vllm' is PyTorch vLLM, a different"
    " engine). Name the mcjax engine explicitly: 'vllm_tpu' (host-local"
    " tpu-inference vLLM, experimental) or 'vllm' (PyTorch vLLM), with"
    " McJaxOptions(engine=...) or the CLI's --engine, or as"
    " rollout_engine='mcjax:vllm'; or"
    f" rollout_engine={VANILLA_ENGINE} for the native engine.",
    "sglang_jax": "mcjax has no host-local SGLang-JAX engine; set"
    f" rollout_engine={VANILLA_ENGINE} (the native engine, Tunix's sampler).",
}
# `rollout_engine="mcjax:<name>"` names the registered mcjax engine <name>
# even where the bare name means another engine in Tunix ('vllm'); a
# rollout_engine string is all that recipes such as MaxText's train_rl pass.
MCJAX_ENGINE_PREFIX = "mcjax:"
# Loss aggregation modes of Tunix (`tunix.rl.common.aggregate_loss`) whose
# gradient, accumulated as the mean over equal-sized micro-batches, does not
# depend on which rows share a micro-batch: each normalises per row (by the
# row's own token count, a constant, or the micro-batch's row count, equal in
# every micro-batch). Exact as long as every row has a completion token
# (rows count by `completion_mask`; a generated EOS counts). 'token-mean'
# divides by the micro-batch's token count, which changes when rows move.
ROW_NORMALISED_LOSS_MODES = (
    "sequence-mean-token-mean",
    "sequence-mean-token-scale",
    "seq-mean-token-sum",
    "sequence-mean-token-sum-norm",
)
# Learners mcjax runs (Tunix's GRPO family); PPO needs a critic model.
LEARNERS = ("grpo", "dapo", "drgrpo")
# Roles whose models mcjax does not run (GRPO needs none of them).
UNSUPPORTED_ROLES = ("critic", "reward")


# --- the rules ----------------------------------------------------------------


def training_mode(mode: str) -> Problem | None:
  if mode == "grpo":
    return None
  return Problem(
      message=f"training_mode={mode!r}: mcjax runs standard GRPO"
      " (training_mode=grpo) only; agentic GRPO is not supported yet.",
      error=NotImplementedError,
  )


def rollout_engine(engine: str, engine_names: Sequence[str]) -> Problem | None:
  """A `rollout_engine` name means what it means in Tunix, or is refused.

  'vanilla' (Tunix's own sampler) is the native engine, which runs Tunix's
  sampler. Tunix's other names ('vllm' = tpu-inference vLLM, 'sglang_jax')
  are refused with the mcjax engine to name instead: mcjax's registered
  'vllm' is the PyTorch vLLM engine, i.e. another engine than Tunix's. A
  registered mcjax name that is not a Tunix name is taken as given, and
  'mcjax:<name>' names the registered engine <name> in any case.
  """
  if engine.startswith(MCJAX_ENGINE_PREFIX):
    if mcjax_engine_name(engine) in engine_names:
      return None
    return Problem(
        message=f"rollout_engine={engine!r}: no such mcjax engine; use one"
        f" of {[MCJAX_ENGINE_PREFIX + n for n in engine_names]}.",
    )
  if engine in TUNIX_ENGINES:
    if engine == VANILLA_ENGINE:
      return None
    return Problem(
        message=f"rollout_engine={engine!r}: {TUNIX_ENGINES[engine]}"
    )
  if engine in engine_names:
    return None
  choices = ", ".join([VANILLA_ENGINE, *engine_names])
  return Problem(
      message=f"rollout_engine={engine!r}: mcjax generates with a host-local"
      f" engine ({choices}; '{VANILLA_ENGINE}' means the native engine); set"
      f" rollout_engine={VANILLA_ENGINE}.",
  )


def mcjax_engine_name(engine: str) -> str:
  """The registered engine a `rollout_engine` name (valid by
  `rollout_engine`) selects: 'vanilla' -> 'native', 'mcjax:<name>' ->
  <name>, other names as given."""
  if engine == VANILLA_ENGINE:
    return "native"
  if engine.startswith(MCJAX_ENGINE_PREFIX):
    return engine[len(MCJAX_ENGINE_PREFIX):]
  return engine


def balanced_micro_batches(
    *,
    balance_by_length: bool,
    loss_agg_mode: str,
    micro_batch_size: int | None,
    mini_batch_size: int | None,
    prefix: str = "",
) -> Problem | None:
  """O3 with gradient accumulation keeps the update only for row-normalised
  losses.

  With balance_admission (O3) each global micro-batch holds other rows than
  the single controller's (the host shares are dealt by length, not in
  micro-batch chunks). The optimizer step averages the micro-batches'
  gradients, so the update is unchanged exactly when the loss normalises per
  row (`ROW_NORMALISED_LOSS_MODES`); 'token-mean' divides by each
  micro-batch's token count, which moving rows changes.
  """
  if not balance_by_length or loss_agg_mode in ROW_NORMALISED_LOSS_MODES:
    return None
  if micro_batch_size is None or mini_batch_size is None or (
      micro_batch_size >= mini_batch_size):
    return None
  return Problem(
      message=f"{prefix}loss_agg_mode={loss_agg_mode!r} with"
      f" balance_admission (O3) and train_micro_batch_size={micro_batch_size}"
      f" < mini_batch_size={mini_batch_size}: O3 moves rows between"
      " micro-batches, which changes a per-micro-batch token-mean (not the"
      " single-controller update). Turn balance_admission off, use one"
      " micro-batch per update, or a row-normalised loss_agg_mode (one of"
      f" {list(ROW_NORMALISED_LOSS_MODES)}).",
  )


def balanced_updates(
    *,
    balance_by_length: bool,
    mini_batch_size: int | None,
    batch_size: int | None,
    prefix: str = "",
) -> Problem | None:
  """O3 keeps the single controller's updates only with one per batch.

  Balanced dealing spreads the batch's prompts over the hosts by length,
  so with several optimizer updates per batch (mini_batch_size <
  batch_size) each update would hold other prompts than the single
  controller's, whatever the loss. Admission refuses it on every host
  (`admission.AdmissionConfig.host_prompt_indices`); this is the same rule
  for the checks that run before any host starts.
  """
  if not balance_by_length or mini_batch_size is None or batch_size is None:
    return None
  if mini_batch_size >= batch_size:
    return None
  return Problem(
      message=f"balance_admission (O3) with {prefix}mini_batch_size="
      f"{mini_batch_size} < batch_size={batch_size}: O3 deals each batch's"
      " prompts by length, so every optimizer update but one per batch would"
      " hold other prompts than the single controller's. Turn"
      " balance_admission off, or set mini_batch_size = batch_size.",
  )


def learner(name: str) -> Problem | None:
  """mcjax runs Tunix's GRPO-family learners; PPO needs a critic."""
  if name in LEARNERS:
    return None
  if name == "ppo":
    return unsupported_role("learner='ppo' (a critic model)")
  return Problem(
      message=f"learner={name!r}: mcjax runs one of {list(LEARNERS)}.",
  )


def unsupported_role(name: str) -> Problem:
  """`name` (a role, or its config key) is set but mcjax cannot run it."""
  return Problem(
      message=f"{name} is set: mcjax supports GRPO's actor, reference and"
      " rollout roles only (critic and reward models are not supported yet);"
      " remove it.",
      error=NotImplementedError,
  )


# Engines that take a LoRA actor: native holds base + adapters; vllm and
# vllm_tpu (tpu-inference's mapping, `with_lora`) merge the adapters into
# their weights on the host. All receive only the adapters
# (`nnx.LoRAParam`) at each publication.
LORA_ENGINES = ("native", "vllm", "vllm_tpu")
# The module paths (qwix's '/'-joined names, matched with re.fullmatch) of a
# Qwen3 layer's linear projections: what a LoRA `module_path` regex selects.
QWEN3_LORA_TARGETS = (
    "attn/q_proj", "attn/k_proj", "attn/v_proj", "attn/o_proj",
    "mlp/gate_proj", "mlp/up_proj", "mlp/down_proj",
)
# All seven projections, as Tunix's Qwen3 GSM8K recipe selects them.
DEFAULT_LORA_MODULES = (
    ".*q_proj|.*k_proj|.*v_proj|.*o_proj|.*gate_proj|.*up_proj|.*down_proj"
)


def lora_module_paths(num_layers: int = 64) -> tuple[str, ...]:
  """Qwen3 module paths a LoRA regex may select (no model needed)."""
  return tuple(
      f"layers/{i}/{t}" for i in range(num_layers) for t in QWEN3_LORA_TARGETS
  )


def lora_settings(
    rank: Any,
    alpha: Any,
    module_path: Any,
    *,
    prefix: str = "",
    module_path_key: str = "module_path",
    module_paths: Sequence[str] | None = None,
) -> Problem | None:
  """A LoRA config (Tunix's `lora_config`) that qwix can apply.

  Checked before any host starts: a rank below 1 or a regex that selects no
  projection would otherwise fail (or silently train nothing) deep inside
  qwix on every host.
  """
  if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
    return Problem(
        message=f"{prefix}rank={rank!r}: a LoRA rank must be an integer >= 1"
        " (e.g. 8); remove the LoRA settings to train full weights.",
    )
  if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or (
      alpha <= 0
  ):
    return Problem(
        message=f"{prefix}alpha={alpha!r}: LoRA alpha must be a number > 0"
        " (the adapters are scaled by alpha/rank; alpha=rank scales by 1).",
    )
  if not isinstance(module_path, str) or not module_path:
    return Problem(
        message=f"{prefix}{module_path_key}={module_path!r}: give a regex of the"
        f" modules to adapt, e.g. {DEFAULT_LORA_MODULES!r}.",
    )
  try:
    pattern = re.compile(module_path)
  except re.error as e:
    return Problem(
        message=f"{prefix}{module_path_key}={module_path!r} is not a valid regex"
        f" ({e}).",
    )
  paths = lora_module_paths() if module_paths is None else module_paths
  if not any(pattern.fullmatch(p) for p in paths):
    return Problem(
        message=f"{prefix}{module_path_key}={module_path!r} matches no module (qwix"
        " matches the whole '/'-joined path, e.g. 'layers/0/attn/q_proj');"
        f" e.g. {DEFAULT_LORA_MODULES!r} selects all seven projections.",
    )
  return None


def lora_engine(engine: str, lora_enabled: bool) -> Problem | None:
  """Only engines that hold base + adapters take a LoRA actor."""
  if not lora_enabled or engine in LORA_ENGINES:
    return None
  return Problem(
      message=f"engine={engine!r} with a LoRA actor: mcjax publishes only the"
      " adapters, which this engine cannot apply yet (its weight mapping"
      " does not merge them). Use one of"
      f" {list(LORA_ENGINES)} for LoRA actors, or train full weights.",
      error=NotImplementedError,
  )


# Engines a MaxText trainer publishes into (through the MaxText -> Tunix
# Qwen3 mapping, `maxtext.models.qwen3_param_mapping`), with the modules each
# needs importable in the one Python environment of every host and the
# Makefile target that builds such an environment.
MAXTEXT_ENGINES = {
    "native": (("maxtext",), "make venv"),
    "vllm": (("maxtext", "vllm"), "make venv-maxtext-vllm"),
}


def missing_modules(names: Iterable[str]) -> tuple[str, ...]:
  """The top-level modules among `names` this interpreter cannot import.

  Uses `importlib.util.find_spec`, which imports nothing: the check runs in
  the launching process before any host starts.
  """
  import importlib.util  # pylint: disable=g-import-not-at-top

  return tuple(n for n in names if importlib.util.find_spec(n) is None)


def trainer_engine(
    trainer: str,
    engine: str,
    *,
    backend: str = "mcjax",
    missing: Sequence[str] | None = None,
) -> Problem | None:
  """A MaxText trainer runs with the engines its mapping feeds, in one env.

  Args:
    trainer: "tunix" (always fine here) or "maxtext".
    engine: the registered engine name.
    backend: the cluster backend; the stock one hands the engine the actor's
      MaxText parameters at every sync, which only the native engine maps
      (`EngineContext.source_mapping`).
    missing: modules the environment lacks; None: found with
      `missing_modules` (tests pass it to check the message).
  """
  if trainer != "maxtext":
    return None
  if engine not in MAXTEXT_ENGINES:
    return Problem(
        message=f"trainer='maxtext' with engine={engine!r}: MaxText's"
        " parameters reach an engine through the MaxText -> Tunix Qwen3"
        " mapping, which only these engines take:"
        f" {list(MAXTEXT_ENGINES)}. Use one of them.",
    )
  if engine != "native" and backend != "mcjax":
    return Problem(
        message=f"trainer='maxtext' with engine={engine!r} and"
        f" backend={backend!r}: the stock cluster hands the engine the"
        " actor's MaxText parameters at every sync, and only the native"
        " engine maps them itself. Use backend='mcjax' (its publisher maps"
        " them) or engine='native'.",
    )
  modules, target = MAXTEXT_ENGINES[engine]
  if missing is None:
    missing = missing_modules(modules)
  if missing:
    return Problem(
        message=f"trainer='maxtext' with engine={engine!r} needs"
        f" {' and '.join(modules)} importable in one Python environment;"
        f" {', '.join(missing)} cannot be imported by this interpreter. Build"
        f" that environment with `{target}` and run with its Python"
        + (" (.venv-maxtext-vllm/bin/python)." if engine == "vllm" else "."),
    )
  return None


def offload_to_cpu(offload: bool) -> Problem | None:
  if not offload:
    return None
  return Problem(
      message="offload_to_cpu is not supported by mcjax; set it to false.",
  )


def disjoint_role(role: str, *, cause: str, fix: str) -> Problem:
  """`role` runs on devices other than the actor's mesh (disaggregated)."""
  return Problem(
      message=f"{cause}; mcjax is colocated: every role shares the actor's"
      " global mesh (every host generates on its own devices; disjoint"
      f" trainer/rollout meshes are the disaggregated mode). {fix}",
  )


def batch_axes(data_sharding_axis: Sequence[Any]) -> tuple[str, ...]:
  """The mesh axes the batch (leading) dimension is split over.

  Accepts mcjax's flat form ("data", "fsdp") and Tunix's per-dimension form
  (("data", "fsdp"),), which Tunix's shard_input reads as
  PartitionSpec(("data", "fsdp")): the one way to split the batch over two
  axes that the stock backend honours too.
  """
  axes = tuple(data_sharding_axis)
  if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
    return tuple(axes[0])
  return axes


def data_sharding_axes(
    axes: Sequence[Any], mesh_axes: Sequence[str], *, prefix: str = ""
) -> Problem | None:
  missing = [a for a in batch_axes(axes) if a not in mesh_axes]
  if not missing:
    return None
  return Problem(
      message=f"{prefix}data_sharding_axis={list(axes)} names axes"
      f" {missing} missing from the actor mesh's axis names"
      f" {list(mesh_axes)}.",
  )


def global_batch(
    name: str, value: int | None, num_hosts: int
) -> Problem | None:
  """A global batch knob must split evenly over the hosts."""
  if value is None or value % num_hosts == 0:
    return None
  return Problem(
      message=f"{name}={value} is global and must divide over {num_hosts}"
      f" hosts; use a multiple of {num_hosts}.",
  )


def checkpoint_interval(
    save_interval_steps: int | None,
    *,
    batch_size: int | None,
    mini_batch_size: int | None,
    num_iterations: int | None = 1,
    prefix: str = "",
) -> Problem | None:
  """A save interval (in optimizer updates) must end on a global step.

  Tunix counts `save_interval_steps` in optimizer updates: (batch_size /
  mini_batch_size) x num_iterations per global step. A checkpoint written
  inside a global step cannot be resumed exactly (its batch is half
  trained), and its resume would stop with an error; refused up front.
  """
  if not save_interval_steps or not batch_size:
    return None
  mini = mini_batch_size or batch_size
  if mini <= 0 or batch_size % mini:
    return None  # Reported by Tunix's own batch checks.
  updates = (batch_size // mini) * (num_iterations or 1)
  if save_interval_steps % updates == 0:
    return None
  return Problem(
      message=f"{prefix}checkpointing_options.save_interval_steps="
      f"{save_interval_steps} counts optimizer updates, and each global step"
      f" is {updates} (batch_size/mini_batch_size x num_iterations): a"
      " checkpoint inside a global step cannot be resumed exactly. Use a"
      f" multiple of {updates} ({updates} x the global steps between"
      " checkpoints).",
  )


# The one loss_agg_mode whose loss packing leaves unchanged
# (`tunix_mcjax.packing`): a sum over the micro-batch's completion tokens
# divided by their count, whatever rows they are packed into. The sequence-*
# modes reduce per row, and a packed row holds several sequences.
PACKING_LOSS_MODE = "token-mean"


def sequence_packing(
    max_seq_token_per_tpu: int | None,
    *,
    loss_agg_mode: str | None = None,
    num_iterations: int = 1,
    prefix: str = "",
) -> Problem | None:
  """Packing (`tunix_mcjax.packing`) only where it gives the unpacked loss.

  Args:
    max_seq_token_per_tpu: Tunix's packing budget (None: no packing).
    loss_agg_mode: the learner's; None when not known yet (the cluster
      checks the learner's own before the first packed micro-batch).
    num_iterations: the learner's (GRPO's mu); packing with several
      iterations per batch is not verified against unpacked.
    prefix: config path of the knob in messages.
  """
  if max_seq_token_per_tpu is None:
    return None
  if max_seq_token_per_tpu < 1:
    return Problem(
        message=f"{prefix}max_seq_token_per_tpu={max_seq_token_per_tpu}"
        " must be a positive number of tokens per packed row (at least the"
        " longest prompt plus max_tokens_to_generate), or unset.",
    )
  if loss_agg_mode is not None and loss_agg_mode != PACKING_LOSS_MODE:
    return Problem(
        message=f"{prefix}max_seq_token_per_tpu (sequence packing) with"
        f" loss_agg_mode={loss_agg_mode!r}: a packed row holds several"
        " sequences, so a per-row (sequence-*) reduction no longer averages"
        " over sequences and the loss differs from the unpacked run's."
        f" Use loss_agg_mode={PACKING_LOSS_MODE!r} (DAPO's default) or unset"
        " max_seq_token_per_tpu.",
        error=NotImplementedError,
    )
  if num_iterations != 1:
    return Problem(
        message=f"{prefix}max_seq_token_per_tpu (sequence packing) with"
        f" num_iterations={num_iterations}: mcjax has verified packing"
        " against the unpacked run only for num_iterations=1. Use 1 or"
        " unset max_seq_token_per_tpu.",
        error=NotImplementedError,
    )
  return None


def mesh_layout(
    shape: Sequence[int], *, num_hosts: int, devices_per_host: int | None
) -> tuple[int | None, Problem | None]:
  """The actor mesh as `runtime.global_mesh` builds it, by host.

  (fsdp, tp), or hsdp's (data, fsdp, tp) with data = hosts.

  Args:
    shape: `actor_model_config.mesh.shape`.
    num_hosts: Hosts in the job.
    devices_per_host: Devices per host; None derives it from `shape`.

  Returns:
    (devices per host or None, the problem or None). A tp group may not span
    hosts, so tp must divide a host's devices.
  """
  shape = tuple(shape)
  total = math.prod(shape)
  where = f"actor_model_config.mesh.shape={shape}"
  if len(shape) == 3:
    # hsdp: (data, fsdp, tp) with data = hosts (runtime.global_mesh kind).
    if shape[0] != num_hosts:
      return devices_per_host, Problem(
          message=f"{where}: a 3-axis (data, fsdp, tp) mesh is hsdp and its"
          f" data axis must equal the {num_hosts} hosts; use shape="
          f"'({num_hosts},F,T)' with F x T = the devices of one host.",
      )
    if devices_per_host is None:
      devices_per_host = shape[1] * shape[2]
    if shape[1] * shape[2] != devices_per_host:
      return devices_per_host, Problem(
          message=f"{where}: fsdp x tp = {shape[1] * shape[2]} must equal the"
          f" {devices_per_host} devices of a host.",
      )
    return devices_per_host, None
  if len(shape) != 2:
    return devices_per_host, Problem(
        message=f"{where}: mcjax needs a 2-axis (fsdp, tp) mesh, e.g."
        " shape='(8,1)' axis_names=\"('fsdp','tp')\", or a 3-axis hsdp"
        " (data, fsdp, tp) mesh with data = hosts.",
    )
  if devices_per_host is None:
    if total % num_hosts:
      return None, Problem(
          message=f"{where} has {total} devices, which do not divide over"
          f" {num_hosts} hosts.",
      )
    devices_per_host = total // num_hosts
  if total != num_hosts * devices_per_host:
    return devices_per_host, Problem(
        message=f"{where} has {total} devices but the job has {num_hosts}"
        f" hosts x {devices_per_host} devices ="
        f" {num_hosts * devices_per_host}; make them equal.",
    )
  if devices_per_host % shape[1]:
    return devices_per_host, Problem(
        message=f"{where}: tp={shape[1]} must divide the {devices_per_host}"
        " devices of a host (a tp group may not span hosts).",
    )
  return devices_per_host, None


# --- the cluster's view: objects ----------------------------------------------


def same_mesh(a: Any, b: Any) -> bool:
  """Whether two meshes place the same axes on the same devices."""
  return a is b or (
      a.axis_names == b.axis_names
      and a.devices.shape == b.devices.shape
      and [d.id for d in a.devices.flat] == [d.id for d in b.devices.flat]
  )


def check_cluster(
    *, actor: Any, critic: Any, reward: Any, cluster_config: Any
) -> None:
  """Raises for the first thing `McJaxRLCluster` cannot run.

  Args:
    actor: The actor model.
    critic: The critic model, or None.
    reward: The reward model, or None.
    cluster_config: Tunix's `ClusterConfig`.

  Raises:
    NotImplementedError, TypeError, ValueError: see the rules above.
  """
  # pylint: disable=g-import-not-at-top
  from flax import nnx
  from tunix_mcjax import compat
  from tunix_mcjax import runtime
  # pylint: enable=g-import-not-at-top

  cfg = cluster_config
  for name, model in (("critic", critic), ("reward", reward)):
    if model is not None:
      unsupported_role(f"a {name} model").raise_()
  if not isinstance(actor, nnx.Module):
    raise TypeError("mcjax needs the actor as an nnx.Module.")
  _raise_first(offload_to_cpu(cfg.offload_to_cpu))
  r2m = cfg.role_to_mesh
  mesh = r2m.get(compat.Role.ACTOR)
  if mesh is None:
    raise ValueError("cluster_config.role_to_mesh needs an ACTOR mesh.")
  for role in (compat.Role.ROLLOUT, compat.Role.REFERENCE):
    if role in r2m and not same_mesh(r2m[role], mesh):
      disjoint_role(
          role.value,
          cause=f"cluster_config.role_to_mesh gives the {role.value} role a"
          " mesh other than the actor's",
          fix="Give every role the actor's mesh.",
      ).raise_()
  devices = [d.id for d in mesh.devices.flat]
  expected = [d.id for d in runtime.host_contiguous_devices()]
  if devices != expected:
    raise ValueError(
        "The actor mesh must span every device of every host, host by host"
        " (use tunix_mcjax.runtime.global_mesh()); got device ids"
        f" {devices[:8]}..., expected {expected[:8]}..."
    )
  tc = cfg.training_config
  _raise_first(
      data_sharding_axes(tuple(tc.data_sharding_axis), mesh.axis_names),
      sequence_packing(tc.max_seq_token_per_tpu),
  )


def per_host_training_config(tc: Any, num_hosts: int) -> Any:
  """A copy of Tunix's RLTrainingConfig with this host's batch knobs.

  Args:
    tc: The job's RLTrainingConfig (global batch knobs).
    num_hosts: Hosts in the job.

  Returns:
    The copy; each knob of GLOBAL_BATCH_KNOBS divided by `num_hosts`, and
    data_sharding_axis in Tunix's per-dimension form ((axes...),) so that
    Tunix's own shard_input splits the batch as `batch_axes` does (e.g.
    ("data", "fsdp") of an hsdp mesh, which it would otherwise read as
    batch over "data" and sequence over "fsdp").

  Raises:
    ValueError: A knob does not divide over the hosts.
  """
  local = copy.copy(tc)
  for name in GLOBAL_BATCH_KNOBS:
    value = getattr(tc, name)
    _raise_first(global_batch(f"training_config.{name}", value, num_hosts))
    if value is not None:
      setattr(local, name, value // num_hosts)
  axes = batch_axes(tc.data_sharding_axis)
  if len(axes) > 1:
    local.data_sharding_axis = (axes,)
  return local


def _raise_first(*problems: Problem | None) -> None:
  for problem in problems:
    if problem is not None:
      problem.raise_()


# --- the CLI's view: Tunix's parsed config, no devices ------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobCheck:
  """What `check_job` found.

  Attributes:
    devices_per_host: The devices per host (given, or derived from the actor
      mesh); None where it cannot be derived.
    problems: The messages of everything mcjax cannot run, in rule order.
  """

  devices_per_host: int | None
  problems: tuple[str, ...]


def check_job(
    config: Mapping[str, Any],
    *,
    num_hosts: int,
    devices_per_host: int | None,
    engine_names: Sequence[str],
    separate_roles: Iterable[tuple[str, str]] = (),
    mesh_shape: Sequence[int] | None = None,
    mesh_axis_names: Sequence[str] | None = None,
    engine: str | None = None,
    balance_by_length: bool = False,
) -> JobCheck:
  """Checks Tunix's parsed GRPO config against every rule; uses no device.

  Args:
    config: Tunix's GRPO config (the pipeline's `config` mapping).
    num_hosts: Hosts in the job.
    devices_per_host: Devices per host; None derives it from the actor mesh.
    engine_names: The registered mcjax engines.
    separate_roles: (role, its model-config key) for each role Tunix would
      place on devices of its own.
    mesh_shape: `actor_model_config.mesh.shape`; None when it did not parse
      (the caller reports why).
    mesh_axis_names: `actor_model_config.mesh.axis_names`, likewise.
    engine: The mcjax engine named explicitly (the CLI's --engine); None
      takes it from `rollout_engine` (Tunix's meaning of the name).
    balance_by_length: Whether O3 (balance_admission) is on.

  Returns:
    The devices per host and the problems found.
  """
  training = config.get("rl_training_config") or {}
  actor_cfg = config.get("actor_model_config") or {}
  grpo = config.get("grpo_config") or {}
  problems = [
      training_mode(config.get("training_mode", "grpo")),
      rollout_engine(
          config.get("rollout_engine") or VANILLA_ENGINE, engine_names
      ) if engine is None else (
          None if engine in engine_names else Problem(
              message=f"--engine={engine!r} is not an mcjax engine; use one"
              f" of {list(engine_names)}."
          )
      ),
      balanced_micro_batches(
          balance_by_length=balance_by_length,
          loss_agg_mode=grpo.get("loss_agg_mode", "sequence-mean-token-mean"),
          micro_batch_size=training.get("train_micro_batch_size"),
          mini_batch_size=training.get("mini_batch_size"),
          prefix="grpo_config.",
      ),
      balanced_updates(
          balance_by_length=balance_by_length,
          mini_batch_size=training.get("mini_batch_size"),
          batch_size=config.get("batch_size"),
          prefix="rl_training_config.",
      ),
      offload_to_cpu(bool(config.get("offload_to_cpu"))),
      *(
          unsupported_role(f"{role}_model_config")
          for role in UNSUPPORTED_ROLES
          if f"{role}_model_config" in config
      ),
      *_lora_job(actor_cfg.get("lora_config"), engine, config),
  ]
  for role, key in separate_roles:
    problems.append(
        disjoint_role(
            role,
            cause=f"{key}.mesh gives the {role} role its own devices, disjoint"
            " from the actor's (Tunix's disaggregated placement)",
            fix=f"Set {key}.mesh=null {key}.same_mesh_as=actor.",
        )
    )
  if mesh_shape is not None:
    devices_per_host, problem = mesh_layout(
        mesh_shape, num_hosts=num_hosts, devices_per_host=devices_per_host
    )
    problems.append(problem)
    if mesh_axis_names is not None:
      problems.append(
          data_sharding_axes(
              tuple(training.get("data_sharding_axis") or ("fsdp",)),
              tuple(mesh_axis_names),
              prefix="rl_training_config.",
          )
      )
  problems.append(global_batch("batch_size", config.get("batch_size", 1),
                               num_hosts))
  problems.extend(
      global_batch(f"rl_training_config.{name}", training.get(name), num_hosts)
      for name in GLOBAL_BATCH_KNOBS
  )
  if training.get("checkpoint_root_directory"):
    problems.append(
        checkpoint_interval(
            # Orbax's default interval is 1 update.
            (training.get("checkpointing_options") or {}).get(
                "save_interval_steps", 1),
            batch_size=config.get("batch_size"),
            mini_batch_size=training.get("mini_batch_size"),
            num_iterations=grpo.get("num_iterations", 1),
            prefix="rl_training_config.",
        )
    )
  problems.append(
      sequence_packing(
          training.get("max_seq_token_per_tpu"),
          loss_agg_mode=grpo.get("loss_agg_mode", "sequence-mean-token-mean"),
          num_iterations=grpo.get("num_iterations", 1),
          prefix="rl_training_config.",
      )
  )
  return JobCheck(
      devices_per_host=devices_per_host,
      problems=tuple(p.message for p in problems if p is not None),
  )


def _lora_job(
    lora_config: Mapping[str, Any] | None,
    engine: str | None,
    config: Mapping[str, Any],
) -> list[Problem | None]:
  """The LoRA rules on Tunix's `actor_model_config.lora_config`."""
  if not lora_config:
    return []
  if engine is None:
    engine = config.get("rollout_engine") or VANILLA_ENGINE
    engine = "native" if engine == VANILLA_ENGINE else engine
  return [
      lora_settings(
          lora_config.get("rank"),
          lora_config.get("alpha"),
          lora_config.get("module_path"),
          prefix="actor_model_config.lora_config.",
      ),
      lora_engine(engine, True),
  ]
