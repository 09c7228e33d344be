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


"""Gives the engine tests four CPU devices in a single process.

Set through jax.config rather than XLA_FLAGS/JAX_PLATFORMS: environment
variables would leak into the subprocesses other tests launch. It must run
before JAX initializes a backend; if another test module initialized JAX
first, the tests' `devices` fixture fails with a message saying so.
"""

import jax

try:
  jax.config.update("jax_platforms", "cpu")
  jax.config.update("jax_num_cpu_devices", 4)
except RuntimeError:
  pass  # JAX already initialized; the `devices` fixture explains.
