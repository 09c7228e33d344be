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

"""Engine rules: what a `rollout_engine` name means under mcjax, and the
engines a MaxText trainer publishes into.

Imports no JAX: the CLI checks them before any host starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
import math
from typing import Any

from tunix_mcjax.rules.problem import Problem

# Tunix's name of its own engine; under mcjax it means the native engine.
VANILLA_ENGINE = "vanilla"

# Tunix's name of its vLLM rollout. Under mcjax it means the host-local vLLM
# of the platform (`tunix_vllm_engine`): tpu-inference on TPU, which is what
# Tunix runs under that name, and PyTorch vLLM on GPU and CPU.
TUNIX_VLLM_ENGINE = "vllm"

# Tunix's rollout_engine names -> why mcjax cannot take each as it means in
# Tunix, and the mcjax engine to name instead (None: the name is honoured).
TUNIX_ENGINES = {
    VANILLA_ENGINE: None,
    TUNIX_VLLM_ENGINE: None,
    "sglang_jax": "mcjax has no host-local SGLang-JAX engine; set"
    f" rollout_engine={VANILLA_ENGINE} (the native engine, Tunix's sampler).",
}

# `rollout_engine="mcjax:<name>"` names the registered mcjax engine <name>
# even where the bare name means another engine in Tunix ('vllm'); a
# rollout_engine string is all that recipes such as MaxText's train_rl pass.
MCJAX_ENGINE_PREFIX = "mcjax:"


def rollout_engine(engine: str, engine_names: Sequence[str]) -> Problem | None:
  """A `rollout_engine` name means what it means in Tunix, or is refused.

  'vanilla' (Tunix's own sampler) is the native engine, which runs Tunix's
  sampler; 'vllm' is the platform's host-local vLLM (`tunix_vllm_engine`);
  'sglang_jax' is refused with the mcjax engine to name instead. A
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
    if TUNIX_ENGINES[engine] is None:
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


def tunix_vllm_engine(platform: str | None = None) -> str:
  """The mcjax engine Tunix's rollout_engine='vllm' means on `platform`
  ("tpu", "gpu", "cpu"; None: this machine's, `platforms.detect_machine`):
  'vllm_tpu' (host-local tpu-inference) on TPU, else 'vllm' (PyTorch)."""
  if platform is None:
    from tunix_mcjax import platforms  # pylint: disable=g-import-not-at-top

    accelerator = platforms.detect_machine().accelerator()
    platform = accelerator[0] if accelerator else "cpu"
  return "vllm_tpu" if platform == "tpu" else "vllm"


def mcjax_engine_name(engine: str, platform: str | None = None) -> str:
  """The registered engine a `rollout_engine` name (valid by
  `rollout_engine`) selects: 'vanilla' -> 'native', 'vllm' -> the
  platform's host-local vLLM (`tunix_vllm_engine`), 'mcjax:<name>' ->
  <name>, other names as given."""
  if engine == VANILLA_ENGINE:
    return "native"
  if engine == TUNIX_VLLM_ENGINE:
    return tunix_vllm_engine(platform)
  if engine.startswith(MCJAX_ENGINE_PREFIX):
    return engine[len(MCJAX_ENGINE_PREFIX):]
  return engine


def registered_engine(name: str) -> str:
  """The registered engine an mcjax engine name (the example's --engine)
  selects: 'vanilla' -> 'native', other names as given (unlike Tunix's
  rollout_engine strings, `mcjax_engine_name`)."""
  return "native" if name == VANILLA_ENGINE else name


def selected_engine(engine: str | None, config: Mapping[str, Any],
                    platform: str | None = None) -> str:
  """The registered engine a CLI job runs: --engine (`engine`), else the
  one its Tunix config's rollout_engine names (on `platform`)."""
  if engine is not None:
    return engine
  return mcjax_engine_name(config.get("rollout_engine") or VANILLA_ENGINE,
                           platform)


# Engines a MaxText trainer publishes into (through the MaxText -> Tunix
# Qwen3 mapping, `maxtext.models.qwen3_param_mapping`), with the modules each
# needs importable in the one Python environment of every host and the
# Makefile target that builds such an environment.
MAXTEXT_ENGINES = {
    "native": (("maxtext",), "make venv"),
    "vllm": (("maxtext", "vllm"), "make venv-maxtext-vllm"),
}


def cli_model_source(
    config: Mapping[str, Any],
    *,
    engine: str,
    mesh_shape: Sequence[int] | None,
    backend: str = "mcjax",
) -> list[Problem | None]:
  """A MaxText actor through Tunix's CLI (`model_source: maxtext`): built
  by `cli.maxtext_actor` on MaxText's FSDP mesh, with the engines its
  mapping feeds (`trainer_engine`); no LoRA.

  Args:
    config: Tunix's parsed GRPO config.
    engine: the mcjax engine the config selects (`selected_engine`).
    mesh_shape: the actor mesh's shape, if readable.
    backend: the CLI's --backend.
  """
  sections = ("model_config", "actor_model_config", "reference_model_config")
  if not any((config.get(s) or {}).get("model_source") == "maxtext"
             for s in sections):
    return []
  actor = config.get("actor_model_config") or {}
  problems = [trainer_engine("maxtext", engine, backend=backend)]
  if actor.get("lora_config"):
    problems.append(Problem(
        message="model_source='maxtext' with"
        " actor_model_config.lora_config: LoRA on a MaxText actor is not"
        " supported by mcjax; remove lora_config."))
  if mesh_shape is not None and any(n != 1 for n in list(mesh_shape)[1:]):
    problems.append(Problem(
        message=f"model_source='maxtext' with actor mesh {tuple(mesh_shape)}:"
        " a MaxText actor trains with FSDP over all its devices; make every"
        " axis but the first 1, e.g. actor_model_config.mesh.shape="
        f"({math.prod(mesh_shape)},1)."))
  return problems


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
    backend: the cluster backend; the stock one ("tunix") hands the engine
      the actor's MaxText parameters at every sync, which only the native
      engine maps (`EngineContext.source_mapping`); "mcjax" and "mcjax_da"
      publish them mapped.
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
  if engine != "native" and backend == "tunix":
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


# Engines whose host-local layout takes engine tensor parallelism
# (`engine_tp`): the native engine splits its parameters over a (dp, tp)
# mesh; the vLLM engine runs vLLM with tensor_parallel_size = tp (its
# multiprocess executor, one worker process per tp rank).
ENGINE_TP_ENGINES = ("native", "vllm")


def engine_tp(
    tp: Any,
    *,
    backend: str = "mcjax",
    engine: str = "native",
    trainer: str = "tunix",
    devices_per_host: int | None = None,
    flag: str = "--engine_tp",
) -> Problem | None:
  """Engine tensor parallelism: devices per engine replica on each host.

  Args:
    tp: the requested degree.
    backend: the cluster backend; only mcjax lays out host engines.
    engine: the registered engine name.
    trainer: "tunix" or "maxtext".
    devices_per_host: when known, `tp` must divide it (a replica never
      spans two hosts).
    flag: how messages name the setting.
  """
  if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
    return Problem(message=f"{flag} must be an integer >= 1 (devices per"
                   f" engine replica), got {tp!r}.")
  if tp == 1:
    return None
  if backend not in ("mcjax", "mcjax_da"):
    return Problem(
        message=f"{flag}={tp} lays out the host engines of --backend=mcjax"
        f" and mcjax_da's rollout hosts; --backend={backend} does not take it"
        " (the stock backend runs one engine over every device): use"
        f" --backend=mcjax or {flag}=1.")
  if engine not in ENGINE_TP_ENGINES:
    return Problem(
        message=f"{flag}={tp} with --engine={engine}: that engine has no"
        " tensor-parallel layout here; use --engine=native or vllm, or"
        f" {flag}=1.")
  if trainer != "tunix" and engine != "vllm":
    # vLLM's staging copy is replicated at any tp (vLLM splits it itself).
    return Problem(
        message=f"{flag}={tp} with --trainer={trainer}: the engine model"
        " behind a MaxText trainer is published replicated (native engine"
        f" tp not built there); use --trainer=tunix, --engine=vllm or"
        f" {flag}=1.")
  if devices_per_host is not None and devices_per_host % tp:
    choices = [d for d in range(1, devices_per_host + 1)
               if devices_per_host % d == 0]
    return Problem(
        message=f"{flag}={tp} must divide the devices per host"
        f" ({devices_per_host}) so that an engine replica stays on one host;"
        f" use one of {choices}.")
  return None
