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

"""What keeps hosts from being forked, one state after another
(tests/test_host_fork.py; run by path, JAX_PLATFORMS=cpu).

Prints `host_fork.fork_blocker` for: nothing in the way, a JAX option that
differs in the hosts' environment, the opt-out variable, a running thread,
and JAX's started backend; one line each.
"""

import os
import threading

import jax

from tunix_mcjax import host_fork


def main() -> None:
  env = dict(os.environ)
  print(host_fork.fork_blocker([env]))
  print(host_fork.fork_blocker([{**env, "JAX_ENABLE_X64": "1"}]))
  os.environ[host_fork.ENV_HOST_START] = "spawn"
  print(host_fork.fork_blocker([env]))
  del os.environ[host_fork.ENV_HOST_START]
  stop = threading.Event()
  thread = threading.Thread(target=stop.wait, name="waiter")
  thread.start()
  print(host_fork.fork_blocker([env]))
  stop.set()
  thread.join()
  jax.devices()
  print(host_fork.fork_blocker([env]))


if __name__ == "__main__":
  main()
