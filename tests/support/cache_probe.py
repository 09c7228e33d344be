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

"""A host program for tests/test_compilation_cache.py.

Under the launcher (its environment carries the cache directory), compiles a
global program (a sum over every host's devices) and a host-local one (on the
host's first device), and prints per host how many of each JAX's persistent
cache served (`RESULT {...}`).
"""

import json
import logging
import os

from tunix_mcjax import runtime


def main() -> None:
  info = runtime.initialize()
  # pylint: disable=g-import-not-at-top
  import jax
  from jax import monitoring
  import jax.numpy as jnp
  import numpy as np
  # pylint: enable=g-import-not-at-top

  # JAX's own messages when a host compiles a program for the others, or
  # waits for one (jax_share_binary_between_hosts; the suite keeps it off),
  # and the cache keys it looks up.
  shared = []
  keys = []

  class _Compiler(logging.Handler):

    def emit(self, record):
      message = record.getMessage()
      if "sharing module" in message or "Waiting for module" in message:
        shared.append(message.split()[0])
      elif "with key '" in message:
        keys.append(message.rsplit("with key '", 1)[1].rstrip("'"))

  compiler_log = logging.getLogger("jax._src.compiler")
  compiler_log.setLevel(logging.DEBUG)
  compiler_log.addHandler(_Compiler())

  hits = []
  monitoring.register_event_listener(
      lambda event, **kw: hits.append(1)
      if event == "/jax/compilation_cache/cache_hits" else None)

  mesh = jax.sharding.Mesh(np.array(jax.devices()), ("d",))
  sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("d"))
  local = np.arange(info.local_device_count, dtype=np.float32)
  x = jax.make_array_from_process_local_data(sharding, local)
  before, keys_before = len(hits), len(keys)
  total = jax.jit(lambda v: jnp.sum(v * 3.0))(x)
  global_hits = len(hits) - before
  global_key = keys[keys_before] if len(keys) > keys_before else None
  # "Process" (compiled and shared) or "Waiting" (got it from another).
  global_shared = sorted(set(shared))

  before = len(hits)
  y = jax.device_put(np.ones(3, np.float32), jax.local_devices()[0])
  local_value = jax.jit(lambda v: v * 7.0 + 1.0)(y)
  local_hits = len(hits) - before
  print("RESULT " + json.dumps({
      "host": info.process_index,
      "global_hits": global_hits,
      "global_shared": global_shared,
      "global_key": global_key,
      "local_hits": local_hits,
      "total": float(total),
      "local": [float(v) for v in np.asarray(local_value)],
      "local_on": [d.id for d in local_value.devices()],
      "local_device": jax.local_devices()[0].id,
      "cache_dir": os.environ.get("JAX_COMPILATION_CACHE_DIR"),
  }), flush=True)


if __name__ == "__main__":
  main()
