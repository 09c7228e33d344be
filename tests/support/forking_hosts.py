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

"""A program whose hosts are forked from it (tests/test_launch.py).

`forking_hosts.py OUT MODE`: prints {"launcher": pid}, then relaunches as 2
hosts x 2 devices with `host_main`, so the hosts are forked children. Each
host appends a JSON line to OUT (its pids, session, devices, a gathered
collective), prints a line, and registers an atexit line. MODE fail: host 1
raises; exit: host 1 exits with status 3; ok: both return.
"""

import atexit
import json
import os
import sys

import jax  # Imported, its backend not started: what hosts inherit.

from tunix_mcjax import launch
from tunix_mcjax import runtime


def main() -> None:
  out, mode = sys.argv[1], sys.argv[2]

  def host_main():
    # pylint: disable=g-import-not-at-top
    from jax.experimental import multihost_utils
    import numpy as np
    # pylint: enable=g-import-not-at-top

    info = runtime.initialize()
    host = info.process_index
    atexit.register(lambda: open(out, "a").write(f"atexit {host}\n"))
    gathered = multihost_utils.process_allgather(np.array([host]))
    with open(out, "a") as f:
      f.write(json.dumps({
          "host": host, "pid": os.getpid(), "ppid": os.getppid(),
          "sid": os.getsid(0), "devices": jax.local_device_count(),
          "platform": jax.default_backend(),
          "gathered": np.asarray(gathered).ravel().tolist()}) + "\n")
    print(f"line from host {host}")
    if mode == "fail" and host == 1:
      raise RuntimeError("host 1 gives up")
    if mode == "exit" and host == 1:
      sys.exit(3)

  print(json.dumps({"launcher": os.getpid()}), flush=True)
  sys.exit(launch.relaunch_as_local_hosts(
      sys.argv[1:], num_hosts=2, devices_per_host=2, timeout_s=90,
      host_main=host_main))


if __name__ == "__main__":
  main()
