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

"""One compile under tunix_mcjax.compilation_cache.configure
(tests/test_compilation_cache.py; run by path in a fresh interpreter, twice
per cache, so that the second run can be served from it):

  cache_configure.py [DIR]

configure(DIR) (None without it), then one jitted program; prints whether
the cache is on, the result's sum and how many persistent-cache hits JAX
reported.
"""

import sys

from tunix_mcjax import compilation_cache


def main(argv: list[str]) -> None:
  on = compilation_cache.configure(argv[1] if len(argv) > 1 else None)
  # After configure: the cache settings must be in place before JAX starts.
  # pylint: disable=g-import-not-at-top
  import jax
  from jax import monitoring
  import jax.numpy as jnp
  # pylint: enable=g-import-not-at-top

  hits = []
  monitoring.register_event_listener(
      lambda e, **kw: hits.append(e) if e.endswith("/cache_hits") else None)
  value = jax.jit(lambda x: jnp.sin(x) * 2 + 1)(jnp.arange(4.0))
  print(on, round(float(value.sum()), 4), len(hits))


if __name__ == "__main__":
  main(sys.argv)
