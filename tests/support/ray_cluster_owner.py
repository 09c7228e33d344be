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

"""An "existing" Ray cluster for the DA tests: a loopback-only Ray head
(`ray_local.RaySession`) in a process of its own, that jobs join with
`--ray_address` (run by path: `python ray_cluster_owner.py NUM_CPUS`).

Prints one JSON line (address, temp dir, auth variables). Then, for every
line on stdin (a JSON list `[actor_names, namespace]`, sent after a job
ended), waits until the job's actors and placement groups gave back every
CPU and prints what the job left (free CPUs, group resources, named actors
still there, in its namespace and in any, and the pid of a task that needed
the whole cluster). Stops Ray and exits when stdin closes.
"""

import json
import os
import sys
import time

import ray

from tunix_mcjax.da import ray_local


def _report(num_cpus: int, names: list[str], namespace: str) -> dict:
  # Resources come back a moment after the job's actors are gone.
  deadline = time.monotonic() + 30
  while time.monotonic() < deadline and (
      ray.available_resources().get("CPU") != num_cpus
      or any("_group_" in k for k in ray.cluster_resources())):
    time.sleep(0.2)
  left = []
  for name in names:
    try:
      ray.get_actor(name, namespace=namespace)
      left.append(name)
    except ValueError:
      pass

  @ray.remote(num_cpus=num_cpus)
  def whole_cluster():
    return os.getpid()

  return {
      "free_cpus": ray.available_resources().get("CPU"),
      "group_resources": [k for k in ray.cluster_resources()
                          if "_group_" in k],
      "named_actors_left": left,
      "named_actors_anywhere": sorted(
          f"{a['namespace']}/{a['name']}"
          for a in ray.util.list_named_actors(all_namespaces=True)),
      "task_pid": ray.get(whole_cluster.remote(), timeout=120),
  }


def main() -> None:
  num_cpus = int(sys.argv[1])
  config = ray_local.RaySessionConfig(num_cpus=num_cpus,
                                      namespace="cluster_owner",
                                      start_timeout_s=240)
  with ray_local.RaySession(config) as session:
    print(json.dumps({
        "address": ray.get_runtime_context().gcs_address,
        "temp_dir": session.temp_dir,
        "auth_env": {k: os.environ[k] for k in ("RAY_AUTH_MODE",
                                                "RAY_AUTH_TOKEN")
                     if k in os.environ},
    }), flush=True)
    for line in sys.stdin:
      names, namespace = json.loads(line)
      print(json.dumps(_report(num_cpus, names, namespace)), flush=True)


if __name__ == "__main__":
  main()
