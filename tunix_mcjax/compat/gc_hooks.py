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

"""The `gc` module attribute of the Tunix modules that collect garbage.

Tunix calls `gc.collect()` on the step path (`RLCluster` around rollouts,
logps and model moves, `sft.utils.show_hbm_usage`, the weight-transfer
helper `generate.utils.transfer_state_with_mappings`). Optimization O2
(`host_optimizations.GcPolicy`) rebinds the module attribute `gc` of those
modules to a stand-in whose `collect()` only counts, and restores it when it
stops. Upstream: a switch for these collections.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
import gc
import importlib
import types

# Tunix modules whose code calls gc.collect() through the module attribute.
TUNIX_GC_MODULES = (
    "tunix.rl.rl_cluster",
    "tunix.sft.utils",
    "tunix.generate.utils",
)


def hook_gc(
    replacement: types.ModuleType, module_names: Iterable[str]
) -> tuple[list[types.ModuleType], list[str]]:
  """Rebinds `gc` to `replacement` in each module that uses the real one.

  Args:
    replacement: the stand-in `gc` module.
    module_names: the modules to hook (e.g. `TUNIX_GC_MODULES`).

  Returns:
    (the hooked modules, the names of those that could not be hooked: not
    importable, or without a module attribute `gc` bound to the real one).
  """
  hooked, unhooked = [], []
  for name in module_names:
    try:
      module = importlib.import_module(name)
    except ImportError:
      unhooked.append(name)
      continue
    if getattr(module, "gc", None) is gc:
      module.gc = replacement
      hooked.append(module)
    else:
      unhooked.append(name)
  return hooked, unhooked


def unhook_gc(
    replacement: types.ModuleType, modules: Sequence[types.ModuleType]
) -> None:
  """Gives `modules` the real `gc` back where `replacement` is still bound."""
  for module in modules:
    if getattr(module, "gc", None) is replacement:
      module.gc = gc
