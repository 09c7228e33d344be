# Copyright 2026 The tunix_mcjax Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""Host<->device transfers in a step: the deliberate ones, and a guard.

On an accelerator every implicit transfer between host and device is a
round trip the step waits for. `--transfer_guard=disallow` runs the mcjax
backend's calls of every step after the first (the first compiles and
places the weights) under `jax.transfer_guard`, so an implicit transfer
there raises, naming the array. The transfers a step needs are made inside
`deliberate(WHAT)`, WHAT one of `DELIBERATE` (listed in docs/design.md).

The guard covers the backend (generation, log-probs, the train step,
publication, metrics); Tunix's learner between those calls is stock code
and runs as Tunix wrote it (it pads completions and builds masks with
numpy, and converts them with `jnp.array`).

On CPU a device-to-host copy is free and JAX's guard does not see
`np.asarray` of a CPU array: tests here catch host-to-device transfers;
device-to-host ones need an accelerator (or reading the code).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

# Importing this module does not import jax (job configs check the level).
GUARD_LEVELS = ("allow", "log", "disallow")

# What a step moves between host and device on purpose, and why.
DELIBERATE = {
    "prompts": "the prompts' tokens into the engine (Tunix's sampler"
               " tokenizes text on the host)",
    "row_ids": "each row's id, for its sampling key (placement-invariant"
               " sampling)",
    "host_rows": "this host's rows of a batch into the global array the"
                 " train step and the reference read",
    "step_record": "the step record's scalars (loss, rewards, timings) to"
                   " the host that writes them",
    "tunix_eval": "Tunix's evaluation pass inside the train call (its"
                  " PeftTrainer sums eval losses from a Python 0): not"
                  " guarded",
    "torch_engine": "a PyTorch engine (vLLM): its log-probs come back from"
                    " the host, and weights reach it through the host"
                    " unless DLPack hands them over on the device",
    # The disaggregated mode's trainer hosts (mcjax_da, da/).
    "da_rows": "mcjax_da: the completion ids to the host, checked row by"
               " row against the tokens the rollout hosts sent through Ray",
    "da_importance": "mcjax_da, max_staleness >= 1: the proximal log-probs"
                     " and completion mask to the host, for the importance"
                     " weights against the sampler log-probs from Ray",
    "da_publish": "mcjax_da: the published weights to the host, for one put"
                  " into Ray's object store",
}


@contextlib.contextmanager
def deliberate(what: str) -> Iterator[None]:
  """A transfer the step needs (`DELIBERATE[what]`): allowed under the
  guard."""
  import jax  # pylint: disable=g-import-not-at-top

  if what not in DELIBERATE:
    raise ValueError(f"{what!r} is not a deliberate transfer; one of"
                     f" {sorted(DELIBERATE)}.")
  with jax.transfer_guard("allow"):
    yield


def check_level(level: str) -> None:
  if level not in GUARD_LEVELS:
    raise ValueError(f"--transfer_guard={level!r} must be one of"
                     f" {GUARD_LEVELS}.")


def step_scope(level: str,
               finished_steps: int) -> contextlib.AbstractContextManager:
  """The guard over a backend call, once `finished_steps` >= 1."""
  import jax  # pylint: disable=g-import-not-at-top

  if level == "allow" or finished_steps < 1:
    return contextlib.nullcontext()
  return jax.transfer_guard(level)
