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

"""One GPU's memory split between the JAX trainer and a vLLM engine.

With the 'vllm' engine a host's trainer (JAX) and engine (PyTorch vLLM)
share its GPU in one process. JAX preallocates 75% of the device when its
backend starts, and vLLM takes its `gpu_memory_utilization` of the whole
device when the engine starts: by default the two do not fit. The split is
one number, vLLM's share (Tunix's `rollout_vllm_hbm_utilization`, the
example's `--engine_memory_fraction`); JAX gets the rest less `RESERVE`,
through XLA_PYTHON_CLIENT_MEM_FRACTION set before its backend starts. A
fraction the user set in the environment is kept and checked; with
XLA_PYTHON_CLIENT_PREALLOCATE=false JAX allocates on demand and only vLLM's
share is fixed. Checked before any host starts; said in the start line.
Imports no JAX.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
import dataclasses
import os

JAX_FRACTION_ENV = "XLA_PYTHON_CLIENT_MEM_FRACTION"
JAX_PREALLOCATE_ENV = "XLA_PYTHON_CLIENT_PREALLOCATE"
# Left to neither: CUDA contexts (JAX's and PyTorch's), cuBLAS workspaces,
# NCCL buffers and fragmentation.
RESERVE = 0.05
# The least a trainer's preallocation may be.
_MIN_JAX = 0.05


@dataclasses.dataclass(frozen=True, kw_only=True)
class MemorySplit:
  """Shares of one GPU.

  Attributes:
    engine: vLLM's gpu_memory_utilization.
    jax: JAX's XLA_PYTHON_CLIENT_MEM_FRACTION; None: JAX allocates on demand
      (XLA_PYTHON_CLIENT_PREALLOCATE=false).
    jax_from_user: whether the environment already set JAX's share.
  """

  engine: float
  jax: float | None
  jax_from_user: bool = False

  def describe(self) -> str:
    """The start line's words for it."""
    jax = ("on demand (XLA_PYTHON_CLIENT_PREALLOCATE=false)"
           if self.jax is None else
           f"{self.jax:.2f}" + (f" ({JAX_FRACTION_ENV} as set)"
                                 if self.jax_from_user else ""))
    return f"GPU memory: vLLM {self.engine:.2f}, JAX {jax}"

  def environment(self) -> dict[str, str]:
    """What a host's environment needs before JAX's backend starts (also
    what the user set: Ray actors do not inherit the driver's)."""
    if self.jax is None:
      return {JAX_PREALLOCATE_ENV: "false"}
    return {JAX_FRACTION_ENV: f"{self.jax:g}" if self.jax_from_user
            else f"{self.jax:.2f}"}


def _preallocates(environ: Mapping[str, str]) -> bool:
  return environ.get(JAX_PREALLOCATE_ENV, "true").lower() not in (
      "false", "0")


def split(engine_fraction: float, *, flag: str = "--engine_memory_fraction",
          environ: Mapping[str, str] | None = None) -> MemorySplit:
  """vLLM's `engine_fraction` of the GPU and JAX's share beside it.

  Raises:
    ValueError: the fraction is outside (0, 1), or the two do not fit (one
      line naming both values and what to change).
  """
  environ = os.environ if environ is None else environ
  if not 0.0 < engine_fraction < 1.0:
    raise ValueError(
        f"{flag}={engine_fraction:g} must be vLLM's share of the GPU, in"
        " (0, 1).")
  room = round(1.0 - RESERVE - engine_fraction, 4)
  if not _preallocates(environ):
    return MemorySplit(engine=engine_fraction, jax=None)
  raw = environ.get(JAX_FRACTION_ENV)
  if raw:
    try:
      jax = float(raw)
    except ValueError:
      raise ValueError(f"{JAX_FRACTION_ENV}={raw!r} must be a number in"
                       " (0, 1).") from None
    if not 0.0 < jax < 1.0 or jax > room:
      raise ValueError(
          f"{JAX_FRACTION_ENV}={raw} (JAX) and {flag}={engine_fraction:g}"
          f" (vLLM) do not fit one GPU: together at most {1 - RESERVE:g}"
          f" ({RESERVE:g} stays free for CUDA contexts); lower one of them,"
          f" or unset {JAX_FRACTION_ENV} to give JAX the rest"
          f" ({max(room, 0):.2f}).")
    return MemorySplit(engine=engine_fraction, jax=jax, jax_from_user=True)
  if room < _MIN_JAX:
    raise ValueError(
        f"{flag}={engine_fraction:g} leaves JAX {max(room, 0):.2f} of the"
        f" GPU ({RESERVE:g} stays free for CUDA contexts); give vLLM at most"
        f" {1 - RESERVE - _MIN_JAX:.2f}.")
  return MemorySplit(engine=engine_fraction, jax=room)


def apply(memory: MemorySplit,
          environ: MutableMapping[str, str] | None = None) -> None:
  """Sets JAX's share in `environ` (default: this process's), which JAX
  reads when its backend starts: call before that."""
  environ = os.environ if environ is None else environ
  for name, value in memory.environment().items():
    environ.setdefault(name, value)
