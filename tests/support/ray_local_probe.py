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

"""Local Ray heads for tests/da/test_ray_local.py (run by path, in a child
process: SIGTERM ends the process it hits, and Ray's processes are bound to
the thread that started them):

  ray_local_probe.py session        opens a RaySession (2 CPUs), runs an
      actor that imports JAX with 2 fake CPU devices, prints one JSON line
      (session temp dir, timings, what the actor saw, the namespace) and
      waits for SIGTERM;
  ray_local_probe.py start_timeout  starts a session that cannot be up
      within its 0.3 s timeout; prints ELAPSED, TEMP_DIR and MESSAGE lines
      and exits 0 if it timed out, prints STARTED and exits 1 if not.
"""

import json
import os
import sys
import time

from absl import logging
import ray

from tunix_mcjax.da import ray_local


def session() -> None:
  logging.set_verbosity(logging.INFO)
  config = ray_local.RaySessionConfig(num_cpus=2, start_timeout_s=240)
  with ray_local.RaySession(config) as ray_session:
    env = {"JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}

    @ray.remote(num_cpus=1, runtime_env={"env_vars": env})
    class Probe:

      def info(self):
        import jax  # pylint: disable=g-import-not-at-top

        return {"pid": os.getpid(), "device_count": jax.device_count(),
                "platform": jax.devices()[0].platform,
                "xla_flags": os.environ.get("XLA_FLAGS")}

    t0 = time.perf_counter()
    probe = Probe.remote()
    info = ray.get(probe.info.remote(), timeout=240)
    print(json.dumps({
        "temp_dir": ray_session.temp_dir, "start_s": ray_session.start_s,
        "actor_s": time.perf_counter() - t0, "actor": info,
        "namespace": ray.get_runtime_context().namespace,
        "auth_token_file": os.path.exists(
            os.path.expanduser("~/.ray/auth_token")),
    }), flush=True)
    while True:
      time.sleep(1)


def start_timeout() -> None:
  ray_session = ray_local.RaySession(
      ray_local.RaySessionConfig(start_timeout_s=0.3))
  t0 = time.perf_counter()
  try:
    ray_session.start()
  except ray_local.RayStartTimeout as e:
    print("ELAPSED", time.perf_counter() - t0)
    print("TEMP_DIR", ray_session.temp_dir)
    print("MESSAGE", e)
    sys.exit(0)
  print("STARTED")
  sys.exit(1)


def main(argv: list[str]) -> None:
  if argv[1] == "session":
    session()
  elif argv[1] == "start_timeout":
    start_timeout()
  else:
    sys.exit(f"unknown probe {argv[1]!r}")


if __name__ == "__main__":
  main(sys.argv)
