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

r"""Tunix's GRPO command line with a choice of cluster backend.

Takes exactly the arguments of the pinned Tunix release's
`python -m tunix.cli.grpo_main` (a base config, `override_config_file=...`,
`key=value` overrides, `T_*` environment variables, `--pathways_bns`) plus
`--backend`:

  python -m tunix_mcjax.cli.grpo_main base_config.yaml key=value ... \
      --backend=mcjax [--num_hosts=2 --devices_per_host=4]

Everything runs through Tunix's own `GrpoPipeline` (config, tokenizer,
dataset, models, optimizer, rewards, learner); this module only swaps what
differs between backends:

* `--backend=tunix` (default): the stock pipeline and the stock `RLCluster`,
  started by Tunix's own `main`. Nothing changes for a config the stock CLI
  can run. Two additions only take effect where the stock CLI cannot run:
  a `model_config.model_id` that names a local Hugging Face Qwen3 checkpoint
  directory is loaded from disk (the stock loader always asks the hub); and
  on devices without physical coordinates (CPU, GPU), where Tunix's mesh
  allocator always fails, a config whose roles all share the actor's mesh
  gets that mesh over the first devices (see `_coordless_role_to_mesh`).
* `--backend=mcjax`: one process per host. Every role shares one global mesh
  (`runtime.global_mesh`, shaped like `actor_model_config.mesh`), the cluster
  is `tunix_mcjax.create_rl_cluster("mcjax", ...)`, and each global batch of
  Tunix's dataset (after its prompt-length filtering) is dealt to the hosts by
  `cluster.shard_dataset`, full batches only, so every host runs the same
  number of steps with global batch / hosts prompts each. Configs mcjax cannot
  honour (disjoint role meshes, LoRA actors, engines without a host-local
  mcjax version, agentic mode, batch sizes that do not divide over the
  hosts, ...) fail before any host starts. Without a detected cluster the
  command re-runs itself as --num_hosts local processes under
  `tunix_mcjax.launch`.

Under both backends, the literal first argument `base_config.yaml` means
Tunix's own `tunix/cli/base_config.yaml`, which the google-tunix 0.1.7 wheel
does not ship and this project does not carry: where the installed Tunix
lacks it, the environment variable TUNIX_BASE_CONFIG names the file (e.g.
that file in a Tunix checkout of the pinned release), and without it the
command fails before any host starts (see `resolve_base_config`).

How the swap works: `GrpoPipeline` looks three names up in its module at call
time (`model_lib.create_model`, `rl_cluster_lib.RLCluster` in
`create_rl_cluster`, `data_lib.post_init_dataset` in `_run`). The subclass
below rebinds those module names to thin overlays for the duration of its own
call of that method only, and overrides the public `create_role_to_mesh` and
`create_cluster_config`. `check_tunix_seams()` verifies the three call sites
at start-up, so a Tunix upgrade that moves them fails loudly instead of
silently running the stock cluster in several processes.

`--placement_invariant_sampling` (default off; tunix backend only) makes the
stock cluster sample with the mcjax native engine and per-row keys, as
`grpo_job.py` does, so that the two backends can be compared number for number
(tests/cli/test_grpo_main.py). It also drops a final partial batch, as mcjax
does. It is a test and comparison mode, not part of the stock behaviour.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
import contextlib
import dataclasses
import functools
from importlib import metadata as importlib_metadata
import inspect
import json
import math
import os
import pathlib
import sys
import time
from typing import Any, NoReturn

from absl import app
from absl import flags
from absl import logging
import numpy as np
from tunix.cli import config as tunix_config
from tunix.cli import grpo_main as tunix_grpo_main

BACKENDS = ("tunix", "mcjax")

# Tunix's pipeline class, captured at import: `_run_pipeline` temporarily
# rebinds the module name to our subclass.
_TunixGrpoPipeline = tunix_grpo_main.GrpoPipeline

# The base-config argument Tunix maps to a file next to tunix/cli/config.py,
# and the variable naming that file when the installed Tunix lacks it.
BASE_CONFIG_ARG = "base_config.yaml"
BASE_CONFIG_ENV = "TUNIX_BASE_CONFIG"
# The Tunix release this module is written against (requirements/main.in).
TUNIX_RELEASE = "0.1.7"

# Tunix's vanilla engine name; under mcjax it means the native engine.
_VANILLA = "vanilla"
_LOCAL_SIM_NUM_HOSTS = 2

_BACKEND = flags.DEFINE_enum(
    "backend",
    "tunix",
    list(BACKENDS),
    "RL cluster backend: 'tunix' (stock, single controller) or 'mcjax' (one"
    " process per host).",
)
_NUM_HOSTS = flags.DEFINE_integer(
    "num_hosts",
    None,
    "mcjax local simulation only (no cluster detected): number of host"
    f" processes to start on this machine (default {_LOCAL_SIM_NUM_HOSTS}).",
)
_DEVICES_PER_HOST = flags.DEFINE_integer(
    "devices_per_host",
    None,
    "mcjax local simulation only: fake CPU devices per host (default: the"
    " size of actor_model_config.mesh divided by --num_hosts).",
)
_TIMEOUT = flags.DEFINE_integer(
    "timeout",
    3600,
    "mcjax local simulation only: stop all hosts after this many seconds.",
)
_METRICS_OUT = flags.DEFINE_string(
    "metrics_out",
    None,
    "Append one JSON object per GRPO step (step, reward_mean, loss, ...) to"
    " this file (host 0 writes).",
)
_PLACEMENT_INVARIANT = flags.DEFINE_bool(
    "placement_invariant_sampling",
    False,
    "tunix backend only, for comparisons with mcjax: sample with the mcjax"
    " native engine and per-row keys, and drop a final partial batch. Off:"
    " the stock engine named by `rollout_engine`.",
)


class ConfigError(ValueError):
  """A config the chosen backend cannot run; raised before hosts start."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class CliOptions:
  """What this entry point adds to Tunix's GRPO config.

  Attributes:
    backend: "tunix" or "mcjax".
    metrics_out: JSONL file of per-step records, or None.
    placement_invariant_sampling: tunix backend only; see the module doc.
  """

  backend: str = "tunix"
  metrics_out: str | None = None
  placement_invariant_sampling: bool = False

  def __post_init__(self):
    if self.backend not in BACKENDS:
      raise ConfigError(
          f"--backend={self.backend!r} is not one of {list(BACKENDS)}."
      )
    if self.placement_invariant_sampling and self.backend != "tunix":
      raise ConfigError(
          "--placement_invariant_sampling applies to --backend=tunix only;"
          " mcjax always samples placement-invariantly."
      )

  @property
  def deals_prompts(self) -> bool:
    """Whether batches go through admission (row ids, equal host shares)."""
    return self.backend == "mcjax" or self.placement_invariant_sampling


# --- the seams in Tunix's CLI -------------------------------------------------

# (method of GrpoPipeline, module name it looks up, attribute called on it).
TUNIX_SEAMS = (
    ("create_rl_cluster", "model_lib", "create_model"),
    ("create_rl_cluster", "rl_cluster_lib", "RLCluster"),
    ("_run", "data_lib", "post_init_dataset"),
)


def check_tunix_seams() -> None:
  """Raises if Tunix's CLI no longer calls what this module rebinds."""
  problems = []
  for method, module_name, attr in TUNIX_SEAMS:
    module = getattr(tunix_grpo_main, module_name, None)
    if module is None or not hasattr(module, attr):
      problems.append(f"tunix.cli.grpo_main.{module_name}.{attr} is gone")
      continue
    try:
      source = inspect.getsource(getattr(_TunixGrpoPipeline, method))
    except (AttributeError, OSError, TypeError):
      problems.append(f"GrpoPipeline.{method} cannot be read")
      continue
    if f"{module_name}.{attr}(" not in source:
      problems.append(
          f"GrpoPipeline.{method} no longer calls {module_name}.{attr}"
      )
  if problems:
    raise RuntimeError(
        "The installed Tunix CLI does not match what tunix_mcjax.cli expects"
        f" ({'; '.join(problems)}); update tunix_mcjax/cli/grpo_main.py for"
        " this Tunix version."
    )


class _Overlay:
  """A module with some attributes replaced; every other name delegates."""

  def __init__(self, module: Any, **replacements: Any):
    self._module = module
    self.__dict__.update(replacements)

  def __getattr__(self, name: str) -> Any:
    return getattr(self._module, name)


@contextlib.contextmanager
def _rebound(namespace: Any, bindings: Mapping[str, Any]) -> Iterator[None]:
  """Temporarily rebinds names in `namespace` (a module)."""
  saved = {name: getattr(namespace, name) for name in bindings}
  for name, value in bindings.items():
    setattr(namespace, name, value)
  try:
    yield
  finally:
    for name, value in saved.items():
      setattr(namespace, name, value)


# --- base config --------------------------------------------------------------


def resolve_base_config(
    argv: Sequence[str], environ: Mapping[str, str] | None = None
) -> list[str]:
  """Resolves the literal base-config argument `base_config.yaml`.

  Tunix maps `base_config.yaml` to a file next to `tunix/cli/config.py`, which
  the google-tunix 0.1.7 wheel does not include, and this project does not
  carry a copy of it. So the literal name resolves to, in order:

  1. Tunix's own file, when the installed Tunix ships it (argv unchanged:
     Tunix resolves it itself);
  2. the file named by the environment variable TUNIX_BASE_CONFIG, e.g.
     `tunix/cli/base_config.yaml` of a Tunix checkout of the pinned release;
  3. nothing: ConfigError, raised before any host starts.

  Any other first argument (a path) is left alone.

  Args:
    argv: The program name and positional arguments.
    environ: The environment to read TUNIX_BASE_CONFIG from; os.environ if
      None.

  Returns:
    The arguments to hand to Tunix.

  Raises:
    ConfigError: `base_config.yaml` cannot be resolved to a file.
  """
  argv = list(argv)
  if len(argv) < 2 or argv[1] != BASE_CONFIG_ARG:
    return argv
  shipped = pathlib.Path(tunix_config.__file__).parent / BASE_CONFIG_ARG
  environ = os.environ if environ is None else environ
  configured = environ.get(BASE_CONFIG_ENV, "")
  if shipped.is_file():
    if configured:
      logging.warning(
          "%s=%s is ignored: the installed Tunix ships %s, which the"
          " argument %s names; pass a path as the first argument to use"
          " another base config.",
          BASE_CONFIG_ENV,
          configured,
          shipped,
          BASE_CONFIG_ARG,
      )
    return argv
  if not configured:
    raise ConfigError(
        _missing_base_config_message(f"{BASE_CONFIG_ENV} is unset")
    )
  path = pathlib.Path(os.path.abspath(os.path.expanduser(configured)))
  if not path.is_file():
    raise ConfigError(
        _missing_base_config_message(
            f"{BASE_CONFIG_ENV}={configured!r} is not a file"
        )
    )
  argv[1] = str(path)
  return argv


def _missing_base_config_message(reason: str) -> str:
  """The error for an unresolvable `base_config.yaml`, with the fix."""
  try:
    installed = importlib_metadata.version("google-tunix")
  except importlib_metadata.PackageNotFoundError:
    installed = None
  if installed == TUNIX_RELEASE:
    tunix = f"the google-tunix {TUNIX_RELEASE} wheel"
  else:
    tunix = f"the installed Tunix ({installed or 'version unknown'})"
  return (
      f"cannot resolve the base config {BASE_CONFIG_ARG!r}: {tunix} does not"
      f" ship tunix/cli/{BASE_CONFIG_ARG} and {reason}. Point"
      f" {BASE_CONFIG_ENV} (or the first argument) at"
      f" tunix/cli/{BASE_CONFIG_ARG} of a Tunix checkout of the pinned"
      f" release, e.g. `git clone --branch v{TUNIX_RELEASE}"
      f" https://github.com/google/tunix` then"
      f" {BASE_CONFIG_ENV}=$PWD/tunix/tunix/cli/{BASE_CONFIG_ARG}, or at a"
      " config of your own."
  )


# --- local Hugging Face checkpoints -------------------------------------------

# Model-config keys Tunix's AutoModel applies to a model preset (its kwargs
# that are ModelConfig fields), with create_model's defaults.
_MODEL_CONFIG_OVERRIDES = {
    "use_flash_attention": False,
    "flash_attention_block_size": 1024,
    "remat_config": 1,
}


def local_checkpoint_dir(model_config: Mapping[str, Any]) -> str | None:
  """The local checkpoint directory named by `model_id`, or None (a hub id).

  Args:
    model_config: One `*_model_config` section.

  Returns:
    The directory when `model_source` is huggingface and `model_id` is an
    existing local directory; None otherwise (Tunix's own loading applies).

  Raises:
    ConfigError: The directory exists but holds no config.json.
  """
  model_id = model_config.get("model_id")
  if model_config.get("model_source") != "huggingface" or not model_id:
    return None
  path = pathlib.Path(str(model_id)).expanduser()
  if not path.is_dir():
    return None
  if not (path / "config.json").is_file():
    raise ConfigError(
        f"model_id={model_id!r} is a local directory without config.json;"
        " point it at a Hugging Face checkpoint directory (config.json,"
        " *.safetensors, tokenizer files)."
    )
  return str(path)


def load_local_checkpoint(path: str, model_config: Mapping[str, Any], mesh):
  """Tunix's safetensors loading with the architecture from config.json.

  Same steps as Tunix's `AutoModel.from_pretrained` for a Hugging Face model,
  except that the download is skipped and the architecture comes from the
  checkpoint's config.json instead of the preset named by `model_name`.

  Args:
    path: The checkpoint directory.
    model_config: The `*_model_config` section (model_name, overrides).
    mesh: The mesh to shard the weights on.

  Returns:
    The model.
  """
  # pylint: disable=g-import-not-at-top
  from tunix.models import automodel
  from tunix.models import naming
  from tunix_mcjax.recipes import models
  # pylint: enable=g-import-not-at-top

  os.environ["HF_HUB_OFFLINE"] = "1"  # Nothing here may reach a hub.
  model_name = str(model_config.get("model_name", ""))
  family = naming.ModelNaming(model_name=model_name).model_family
  if family != "qwen3":
    raise ConfigError(
        f"model_config.model_name={model_name!r} (family {family!r}): local"
        " checkpoint directories are supported for Qwen3 models only; use a"
        " name such as 'qwen3-1.7b-base'."
    )
  hf = json.loads((pathlib.Path(path) / "config.json").read_text())
  model_params = models.qwen3_config_from_hf(hf)
  model_params = dataclasses.replace(
      model_params,
      **{k: model_config.get(k, d) for k, d in _MODEL_CONFIG_OVERRIDES.items()},
  )
  with mesh:
    return automodel.create_model_from_safe_tensors(
        model_name, path, model_params, mesh
    )


# --- mcjax configuration checks -----------------------------------------------


def _positive(name: str, value: Any) -> int | None:
  if value is None:
    return None
  if isinstance(value, bool) or not isinstance(value, int) or value < 1:
    raise ConfigError(f"{name} must be an integer >= 1, got {value!r}.")
  return value


def check_mcjax_config(
    pipeline: _TunixGrpoPipeline,
    *,
    num_hosts: int,
    devices_per_host: int | None = None,
) -> int:
  """Checks that mcjax can run `pipeline`'s config on this many hosts.

  Pure config checks: uses no JAX device, so the parent process runs it
  before starting any host.

  Args:
    pipeline: The parsed Tunix config.
    num_hosts: Number of hosts (processes).
    devices_per_host: Devices per host; None derives it from the actor mesh.

  Returns:
    The devices per host.

  Raises:
    ConfigError: Listing everything mcjax cannot honour, with the fix.
  """
  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import engines
  from tunix_mcjax.registry import ENGINES
  # pylint: enable=g-import-not-at-top

  del engines  # Registers the built-in engines.
  _positive("--num_hosts", num_hosts)
  _positive("--devices_per_host", devices_per_host)
  cfg = pipeline.config
  problems: list[str] = []

  mode = cfg.get("training_mode", "grpo")
  if mode != "grpo":
    problems.append(
        f"training_mode={mode!r}: mcjax runs standard GRPO (training_mode="
        "grpo) only; agentic GRPO is not supported yet."
    )
  engine = cfg.get("rollout_engine") or _VANILLA
  if engine != _VANILLA and engine not in ENGINES.names():
    problems.append(
        f"rollout_engine={engine!r}: mcjax generates with a host-local engine"
        f" ({', '.join([_VANILLA, *ENGINES.names()])}; '{_VANILLA}' means"
        " the native engine); set rollout_engine=vanilla."
    )
  if cfg.get("offload_to_cpu"):
    problems.append("offload_to_cpu=true is not supported by mcjax; set false.")
  for key in ("critic_model_config", "reward_model_config"):
    if key in cfg:
      problems.append(
          f"{key} is set: mcjax supports GRPO's actor, reference and rollout"
          " roles only; remove it."
      )
  actor_cfg = cfg.get("actor_model_config") or {}
  if actor_cfg.get("lora_config"):
    problems.append(
        "actor_model_config.lora_config is set: mcjax does not train or"
        " publish LoRA actors yet; remove the lora_config overrides to train"
        " full weights, or use --backend=tunix."
    )

  # Roles: all on the actor's mesh (colocated). Tunix gives every role with
  # its own `mesh` a separate device slice (disaggregated).
  try:
    owners = pipeline._resolve_mesh_owners()  # pylint: disable=protected-access
  except ValueError as e:
    owners = {}
    problems.append(f"role meshes: {e}")
  actor = tunix_grpo_main.rl_cluster_lib.Role.ACTOR
  for role, owner in owners.items():
    if owner != actor:
      key = pipeline._ROLE_TO_MODEL_KEY[role]  # pylint: disable=protected-access
      problems.append(
          f"{key}.mesh gives the {role.value} role its own devices, disjoint"
          " from the actor's (Tunix's disaggregated placement); mcjax is"
          f" colocated, every role shares the actor's mesh: set {key}.mesh=null"
          f" {key}.same_mesh_as=actor."
      )

  # The actor mesh becomes runtime.global_mesh: (fsdp, tp) over all hosts,
  # host by host, so a tp group never spans hosts.
  try:
    shape, names = pipeline.parse_mesh_config("actor_model_config")
  except (ValueError, KeyError) as e:
    shape, names = None, None
    problems.append(f"actor_model_config.mesh: {e}")
  if shape is not None:
    total = math.prod(shape)
    if len(shape) != 2:
      problems.append(
          f"actor_model_config.mesh.shape={shape}: mcjax needs a 2-axis"
          " (fsdp, tp) mesh, e.g. shape='(8,1)' axis_names=\"('fsdp','tp')\"."
      )
    elif devices_per_host is None and total % num_hosts:
      problems.append(
          f"actor_model_config.mesh.shape={shape} has {total} devices, which"
          f" do not divide over {num_hosts} hosts."
      )
    else:
      if devices_per_host is None:
        devices_per_host = total // num_hosts
      if total != num_hosts * devices_per_host:
        problems.append(
            f"actor_model_config.mesh.shape={shape} has {total} devices but"
            f" the job has {num_hosts} hosts x {devices_per_host} devices ="
            f" {num_hosts * devices_per_host}; make them equal."
        )
      elif devices_per_host % shape[1]:
        problems.append(
            f"actor_model_config.mesh.shape={shape}: tp={shape[1]} must divide"
            f" the {devices_per_host} devices of a host (a tp group may not"
            " span hosts)."
        )
    training = cfg.get("rl_training_config") or {}
    axes = tuple(training.get("data_sharding_axis") or ("fsdp",))
    if names is not None and not set(axes) <= set(names):
      problems.append(
          f"rl_training_config.data_sharding_axis={list(axes)} names axes"
          f" missing from actor_model_config.mesh.axis_names={names}."
      )

  # Batch knobs are global (the whole job); each host takes 1/H.
  knobs = {"batch_size": cfg.get("batch_size", 1)}
  training = cfg.get("rl_training_config") or {}
  for name in (
      "mini_batch_size",
      "train_micro_batch_size",
      "rollout_micro_batch_size",
      "compute_logps_micro_batch_size",
  ):
    knobs[f"rl_training_config.{name}"] = training.get(name)
  for name, value in knobs.items():
    if value is not None and value % num_hosts:
      problems.append(
          f"{name}={value} is global and must divide over {num_hosts} hosts;"
          f" use a multiple of {num_hosts}."
      )
  if training.get("max_seq_token_per_tpu") is not None:
    problems.append(
        "rl_training_config.max_seq_token_per_tpu (sequence packing) is not"
        " supported by mcjax; unset it."
    )
  if problems:
    raise ConfigError(
        "this config cannot run with --backend=mcjax:\n  - "
        + "\n  - ".join(problems)
    )
  return devices_per_host


# --- datasets -----------------------------------------------------------------


def full_batches(
    batches: Iterable[Mapping[str, Any]], batch_size: int
) -> Iterator[Mapping[str, Any]]:
  """The batches holding exactly `batch_size` prompts, in order.

  Tunix batches without dropping the remainder, so the last batch of the
  stream may be short; a short batch cannot be split evenly over hosts (and
  unequal steps would hang a collective), so it is skipped.

  Args:
    batches: Tunix's batched dataset.
    batch_size: The global batch size.

  Yields:
    The full batches.
  """
  for batch in batches:
    n = len(batch["prompts"])
    if n == batch_size:
      yield batch
    else:
      logging.warning(
          "Dropping a final partial batch of %d prompts (batch_size=%d): every"
          " host must run the same number of equal steps.",
          n,
          batch_size,
      )


class DealtDataset(Iterable[dict[str, Any]]):
  """Tunix's batched dataset, dealt to hosts when the learner iterates it.

  Built where Tunix builds its dataset (before the cluster exists); the
  cluster that deals the prompts is looked up on iteration, which the learner
  does after the cluster is created.
  """

  def __init__(
      self,
      batches: Iterable[Mapping[str, Any]],
      *,
      batch_size: int,
      deal: Callable[[Iterable[Mapping[str, Any]]], Iterable[dict[str, Any]]],
  ):
    self._batches = batches
    self._batch_size = batch_size
    self._deal = deal

  def __iter__(self) -> Iterator[dict[str, Any]]:
    return iter(self._deal(full_batches(self._batches, self._batch_size)))


# --- per-step records for the stock cluster -----------------------------------


class StockStepRecorder:
  """Appends one JSON record per step of the stock cluster to a file.

  Uses RLCluster's public external-metrics hook, which Tunix calls with each
  step's buffered metrics when the next step starts (and at close), so the
  record of step k, including its loss, is complete then.
  """

  def __init__(self, cluster: Any, path: str):
    self._cluster = cluster
    self._last = time.perf_counter()
    self.records: list[dict[str, Any]] = []
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    self._path = path
    cluster.with_external_metrics_logger(self)

  def __call__(self, buf: Any) -> None:
    from tunix_mcjax import compat  # pylint: disable=g-import-not-at-top

    m = buf.metrics
    if buf.mode != "train" or "rewards/score/mean" not in m:
      return  # E.g. the perf-only buffer that close() flushes.
    get = lambda k: float(np.mean(m[k][0])) if k in m else None
    now = time.perf_counter()
    train = compat.last_train_metrics(self._cluster.actor_trainer)
    record = {
        "step": buf.global_steps + 1,
        "backend": "tunix",
        "num_hosts": 1,
        "reward_mean": get("rewards/score/mean"),
        "completion_len_mean": get("completions/mean_length"),
        "loss": train.get("loss"),
        "grad_norm": train.get("grad_norm"),
        "step_time_s": now - self._last,
    }
    self._last = now
    self.records.append(record)
    with open(self._path, "a") as f:
      f.write(json.dumps(record) + "\n")


# --- the pipeline -------------------------------------------------------------


class GrpoCliPipeline(_TunixGrpoPipeline):
  """Tunix's `GrpoPipeline` with the cluster backend chosen by `options`."""

  def __init__(self, argv: list[str], *, options: CliOptions, **kwargs: Any):
    check_tunix_seams()
    self.options = options
    self.rl_cluster: Any = None
    self._admission: Any = None
    super().__init__(argv, **kwargs)

  @property
  def _num_generations(self) -> int:
    return int(self._config_mapping("grpo_config").get("num_generations", 1))

  # --- meshes and cluster config (public GrpoPipeline methods) ---------------

  def create_role_to_mesh(self):
    if self.options.backend != "mcjax":
      try:
        return super().create_role_to_mesh()
      except ValueError:
        fallback = self._coordless_role_to_mesh()
        if fallback is None:
          raise
        return fallback
    from tunix_mcjax import runtime  # pylint: disable=g-import-not-at-top

    shape, names = self.parse_mesh_config("actor_model_config")
    mesh = runtime.global_mesh(tp=shape[-1], axis_names=names)
    if tuple(mesh.devices.shape) != tuple(shape):
      raise ConfigError(
          f"actor_model_config.mesh.shape={shape} but this job's"
          f" {mesh.devices.size} devices form a {tuple(mesh.devices.shape)}"
          " global mesh; make the mesh size equal the number of devices."
      )
    # check_mcjax_config has ensured every role is owned by the actor.
    return {role: mesh for role in self._resolve_mesh_owners()}

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
      owners = self._resolve_mesh_owners()
      shape, names = self.parse_mesh_config("actor_model_config")
    except ValueError:
      return None  # A config error: the stock one is re-raised.
    if set(owners.values()) != {tunix_grpo_main.rl_cluster_lib.Role.ACTOR}:
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

  def create_cluster_config(self, *, role_to_mesh, rollout_config=None):
    cluster_config = super().create_cluster_config(
        role_to_mesh=role_to_mesh, rollout_config=rollout_config
    )
    if not self.options.placement_invariant_sampling:
      return cluster_config
    # Comparison mode: the stock cluster with the mcjax native engine, keyed
    # by the row ids that single-host admission records (as grpo_job.py).
    # pylint: disable=g-import-not-at-top
    from tunix_mcjax import admission as admission_lib
    from tunix_mcjax import engines
    from tunix_mcjax.registry import ENGINES
    # pylint: enable=g-import-not-at-top

    del engines  # Registers the built-in engines.
    self._admission = admission_lib.Admission(
        admission_lib.AdmissionConfig(
            num_hosts=1, host_index=0, num_generations=self._num_generations
        )
    )
    return dataclasses.replace(
        cluster_config,
        rollout_engine=functools.partial(
            ENGINES.get("native"),
            row_ids=self._admission.row_ids,
            reshard_on_update=True,
        ),
    )

  # --- the three rebound call sites -------------------------------------------

  def create_rl_cluster(self, tokenizer):
    bindings = {
        "model_lib": _Overlay(
            tunix_grpo_main.model_lib,
            create_model=functools.partial(
                self._create_model, tunix_grpo_main.model_lib
            ),
        )
    }
    if self.options.backend == "mcjax":
      bindings["rl_cluster_lib"] = _Overlay(
          tunix_grpo_main.rl_cluster_lib, RLCluster=self._create_mcjax_cluster
      )
    with _rebound(tunix_grpo_main, bindings):
      cluster = super().create_rl_cluster(tokenizer)
    if self.options.backend == "mcjax":
      from tunix_mcjax import cluster as cluster_lib  # pylint: disable=g-import-not-at-top

      if not isinstance(cluster, cluster_lib.McJaxRLCluster):
        raise RuntimeError(
            "Tunix's GrpoPipeline built a stock RLCluster instead of the mcjax"
            " one; this Tunix version is not supported by tunix_mcjax.cli."
        )
    elif self.options.metrics_out:
      StockStepRecorder(cluster, self.options.metrics_out)
    self.rl_cluster = cluster
    return cluster

  def run_grpo_trainer(self):
    if not self.options.deals_prompts:
      return super().run_grpo_trainer()
    mode = self.config.get("training_mode", "grpo")
    if mode != "grpo":
      raise ConfigError(
          f"training_mode={mode!r} cannot deal prompts over hosts; use"
          " training_mode=grpo."
      )
    real = tunix_grpo_main.data_lib
    bindings = {
        "data_lib": _Overlay(
            real,
            post_init_dataset=functools.partial(
                self._post_init_dataset, real.post_init_dataset
            ),
        )
    }
    with _rebound(tunix_grpo_main, bindings):
      return super().run_grpo_trainer()

  def _create_model(self, real_model_lib, model_config, tokenizer_config, mesh):
    path = local_checkpoint_dir(model_config)
    if path is None:
      return real_model_lib.create_model(model_config, tokenizer_config, mesh)
    model = load_local_checkpoint(path, model_config, mesh)
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
    # pylint: disable=g-import-not-at-top
    import tunix_mcjax
    from tunix_mcjax import cluster as cluster_lib
    # pylint: enable=g-import-not-at-top

    return tunix_mcjax.create_rl_cluster(
        "mcjax",
        options=cluster_lib.McJaxOptions(metrics_out=self.options.metrics_out),
        **kwargs,
    )

  def _post_init_dataset(self, real_post_init, dataset, tokenizer, **kwargs):
    train, rest = real_post_init(dataset, tokenizer, **kwargs)
    return (
        DealtDataset(train, batch_size=kwargs["batch_size"], deal=self._deal),
        rest,
    )

  def _deal(self, global_batches):
    """This host's share of each global batch, with row ids recorded."""
    if self.rl_cluster is None:
      raise RuntimeError("The dataset was iterated before the cluster exists.")
    if self.options.backend == "mcjax":
      return self.rl_cluster.shard_dataset(
          global_batches, num_generations=self._num_generations
      )
    return self._admission.shard(global_batches)


# --- entry point --------------------------------------------------------------


def _fail(message: str) -> NoReturn:
  print(f"grpo_main: error: {message}", file=sys.stderr, flush=True)
  sys.exit(2)


def _run_pipeline(argv: list[str], options: CliOptions) -> None:
  """Tunix's own `main` with our pipeline class in place of GrpoPipeline."""
  pipeline_cls = functools.partial(GrpoCliPipeline, options=options)
  with _rebound(tunix_grpo_main, {"GrpoPipeline": pipeline_cls}):
    tunix_grpo_main.main(argv)


def _fresh_metrics_file(options: CliOptions) -> None:
  # One run per file; only the process that starts the job clears it.
  if options.metrics_out and os.path.exists(options.metrics_out):
    os.remove(options.metrics_out)


def _main_tunix(argv: list[str], options: CliOptions) -> None:
  if _NUM_HOSTS.present or _DEVICES_PER_HOST.present:
    logging.warning(
        "--num_hosts/--devices_per_host only apply to --backend=mcjax; the"
        " tunix backend runs as one process on this machine's devices."
    )
  _fresh_metrics_file(options)
  _run_pipeline(argv, options)


def _start_local_hosts(argv: list[str], options: CliOptions) -> int:
  """Checks the config here, then re-runs this command as N local hosts."""
  from tunix_mcjax import launch  # pylint: disable=g-import-not-at-top

  num_hosts = (
      _LOCAL_SIM_NUM_HOSTS if _NUM_HOSTS.value is None else _NUM_HOSTS.value
  )
  try:
    devices_per_host = check_mcjax_config(
        GrpoCliPipeline(argv, options=options),
        num_hosts=num_hosts,
        devices_per_host=_DEVICES_PER_HOST.value,
    )
  except ValueError as e:  # ConfigError, or Tunix's own config errors.
    _fail(str(e))
  _fresh_metrics_file(options)
  print(
      f"[grpo_main] mcjax local simulation: {num_hosts} host(s) x"
      f" {devices_per_host} CPU devices",
      flush=True,
  )
  return launch.launch(
      [sys.executable, "-m", "tunix_mcjax.cli.grpo_main", *sys.argv[1:]],
      num_hosts=num_hosts,
      devices_per_host=devices_per_host,
      timeout_s=_TIMEOUT.value,
  )


def _main_host(argv: list[str], options: CliOptions) -> None:
  """One host of an mcjax job (local simulation or a real cluster)."""
  from tunix_mcjax import runtime  # pylint: disable=g-import-not-at-top

  info = runtime.initialize()  # Before JAX is used.
  try:
    check_mcjax_config(
        GrpoCliPipeline(argv, options=options),
        num_hosts=info.process_count,
        devices_per_host=info.local_device_count,
    )
  except ConfigError as e:
    _fail(str(e))
  _run_pipeline(argv, options)


def main(argv: Sequence[str]) -> None:
  try:
    options = CliOptions(
        backend=_BACKEND.value,
        metrics_out=_METRICS_OUT.value,
        placement_invariant_sampling=_PLACEMENT_INVARIANT.value,
    )
  except ConfigError as e:
    _fail(str(e))
  try:
    argv = resolve_base_config(argv)
  except ConfigError as e:
    _fail(str(e))
  if options.backend == "tunix":
    _main_tunix(argv, options)
    return
  if tunix_grpo_main._PATHWAYS_BNS.value:  # pylint: disable=protected-access
    _fail("--pathways_bns: mcjax runs without Pathways (one process per host).")
  from tunix_mcjax import runtime  # pylint: disable=g-import-not-at-top

  if runtime.in_multi_controller_environment():
    _main_host(argv, options)
  else:
    sys.exit(_start_local_hosts(argv, options))


if __name__ == "__main__":
  app.run(main)
