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

"""Differences between the JAX versions tunix_mcjax runs on.

The package runs in two environments: `.venv` (the newest JAX) and
`.venv-vllm` (Python 3.11, hence an older JAX, plus PyTorch and vLLM's CPU
build); their pins are in the lock files. Every version-dependent choice
lives here; nothing else in the package compares versions.

The JAX APIs used elsewhere (`jax.set_mesh`, `with mesh:`,
`jax.make_array_from_process_local_data`, `jax.make_mesh(axis_types=...)`,
`jax.shard_map`, `jax.jit(keep_unused=, donate_argnums=)`,
`NamedSharding.is_equivalent_to`, `nnx.Variable.get_value`,
`nnx.to_pure_dict`) behave the same in both. `jax.dlpack.to_dlpack`
(capsules) is gone in both: arrays leave JAX through the `__dlpack__`
protocol only (`torch_from_jax`).
"""

from __future__ import annotations

from typing import Any


def torch_from_jax(torch: Any, x: Any) -> Any:
  """A single-device jax.Array as a torch tensor sharing its memory.

  Both supported JAX versions export only through the `__dlpack__` protocol
  (jax.dlpack.to_dlpack capsules were removed); torch.from_dlpack accepts
  the array itself. bfloat16 and CPU/GPU arrays are supported.

  Args:
    torch: the torch module (imported by the caller, which owns the
      optional dependency).
    x: a jax.Array on exactly one device.

  Returns:
    A torch tensor aliasing `x`'s buffer (keep `x` alive while using it).
  """
  if len(getattr(x, "devices", lambda: ())()) != 1:
    raise ValueError("torch_from_jax needs a single-device array; take one"
                     " shard first (x.addressable_shards[i].data).")
  return torch.from_dlpack(x)
