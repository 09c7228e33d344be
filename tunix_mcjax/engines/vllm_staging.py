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

"""The staging layout of the vllm engine and the way into PyTorch.

Published parameters arrive in Tunix's names and shapes, in the engine
dtype, replicated on the host's engine mesh (`VllmEngine.publication_target`).
`Staging` checks a publication against that layout, naming the first
parameter that does not fit, and turns each parameter into a torch tensor:
the local copy on vLLM's device through DLPack (zero copy) or a host copy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
import warnings

import jax
import numpy as np

from tunix_mcjax import compat
from tunix_mcjax import transfers
from tunix_mcjax import tree_paths

ParamPath = tree_paths.ParamPath


def numpy_to_torch(torch: Any, x: np.ndarray) -> Any:
  """A torch tensor over `x`'s memory (bfloat16 included)."""
  x = np.ascontiguousarray(x)
  with warnings.catch_warnings():
    # Arrays read from JAX are read-only; vLLM only copies from these
    # tensors into its own storage, so PyTorch's warning does not apply.
    warnings.filterwarnings("ignore", message=".*not writable.*")
    if x.dtype.name == "bfloat16":
      # NumPy has no native bfloat16 (ml_dtypes); reinterpret the bits.
      return torch.from_numpy(x.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(x)


class Staging:
  """The layout published parameters must have, and their torch views.

  Attributes:
    expected: parameter path -> its shape and the engine dtype.
    dtype: the engine dtype (a NumPy dtype).
    sharding: the staging sharding (replicated on the engine mesh).
    nbytes: bytes of a complete publication.
  """

  def __init__(self, expected: Mapping[ParamPath, jax.ShapeDtypeStruct], *,
               dtype: np.dtype, sharding: jax.sharding.NamedSharding,
               device: Any, transfer: str, torch: Any):
    """Describes the layout.

    Args:
      expected: see the attributes.
      dtype: see the attributes.
      sharding: see the attributes.
      device: the device whose copy of a replicated parameter vLLM reads.
      transfer: "dlpack" (zero copy) or "host" (a copy through NumPy).
      torch: the torch module (imported with vLLM).
    """
    self.expected = dict(expected)
    self.dtype = dtype
    self.sharding = sharding
    self.torch = torch
    self._device = device
    self._transfer = transfer
    self.nbytes = self.bytes_of(self.expected)

  def bytes_of(self, paths: Iterable[ParamPath]) -> int:
    """Bytes of the parameters `paths` in the engine dtype."""
    return int(sum(np.prod(self.expected[p].shape) for p in paths)
               * self.dtype.itemsize)

  def check(self, flat: Mapping[ParamPath, Any], *, allow_reshard: bool,
            subset: bool) -> None:
    """Raises ValueError naming a parameter that does not fit.

    Args:
      flat: parameter path -> array.
      allow_reshard: any fully addressable layout and dtype is accepted
        (converted on the way into torch).
      subset: `flat` may hold only some of the parameters.
    """
    unexpected = sorted(tree_paths.dotted(p) for p in flat
                        if p not in self.expected)
    if unexpected:
      raise ValueError(
          f"update_params got parameter {unexpected[0]!r}, which the engine"
          f" does not have ({len(unexpected)} unexpected: {unexpected[:5]})."
      )
    missing = sorted(tree_paths.dotted(p) for p in self.expected
                     if p not in flat)
    if missing and not subset:
      raise ValueError(
          f"update_params is missing parameter {missing[0]!r}"
          f" ({len(missing)} missing: {missing[:5]}); pass filter_types to"
          " update a subset."
      )
    for path, x in flat.items():
      name = tree_paths.dotted(path)
      want = self.expected[path]
      if not isinstance(x, jax.Array):
        raise ValueError(f"Parameter {name!r} is a {type(x).__name__}, not a"
                         " jax.Array.")
      if tuple(x.shape) != want.shape:
        raise ValueError(
            f"Parameter {name!r} has shape {tuple(x.shape)}; the engine"
            f" expects {want.shape}."
        )
      if allow_reshard:
        if not x.is_fully_addressable:
          raise ValueError(
              f"Parameter {name!r} is a multi-host global array; publish it"
              " into publication_target() first."
          )
        continue
      if x.dtype != want.dtype:
        raise ValueError(
            f"Parameter {name!r} has dtype {x.dtype}; the engine expects"
            f" {want.dtype} (publish into publication_target())."
        )
      if not x.sharding.is_equivalent_to(self.sharding, x.ndim):
        raise ValueError(
            f"Parameter {name!r} has sharding {x.sharding}; the engine"
            f" expects {self.sharding} (see publication_target())."
        )

  def to_torch(self, x: jax.Array) -> Any:
    """One parameter as a torch tensor in the engine dtype (no copy if can)."""
    torch = self.torch
    single = None
    if x.sharding.is_fully_replicated:
      for s in x.addressable_shards:
        if s.device == self._device:
          single = s.data
          break
      if single is None:
        single = x.addressable_shards[0].data
    if single is not None and x.dtype == self.dtype:
      if self._transfer == "dlpack":
        return compat.torch_from_jax(torch, single)
      with transfers.deliberate("torch_engine"):
        return numpy_to_torch(torch, np.array(single))
    # Sharded or in another dtype ('tunix' backend or first install): one
    # host gather. Tunix's sync_weights runs under a transfer guard meant
    # for JAX engines; a PyTorch engine's weights must leave JAX here.
    with transfers.deliberate("torch_engine"):
      host = np.asarray(x).astype(self.dtype, copy=False)
    return numpy_to_torch(torch, host)
