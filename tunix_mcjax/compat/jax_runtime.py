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

"""The private JAX names `tunix_mcjax.runtime` reads before start-up.

JAX keeps its cluster auto-detection and its backend state in `jax._src`:
`runtime` asks which cluster `jax.distributed.initialize` would detect (to
refuse a local simulation on a real cluster) and whether a backend has
started (the CPU device count and the distributed service are fixed then).
Each reach is one function here that answers "unknown" (None, or no hint)
when a JAX version has moved the name, and one row of
`touch_points.TOUCH_POINTS`. Upstream: a public detection API in
`jax.distributed` and a public "backend started" query.

Importing this module imports no JAX (runtime's import stays JAX-free).
"""

from __future__ import annotations

from collections.abc import Callable


def cluster_detectors() -> list[tuple[str, Callable[[], bool]]] | None:
  """(name, probe) of each cluster detector JAX would try, in its order.

  JAX's registered `ClusterEnv` subclasses and their `is_env_present`;
  opt-in ones (mpi4py) are left out, since they claim any machine that
  merely has their package. None where this JAX has no such registry
  (detection then says "no cluster").
  """
  try:
    from jax._src import clusters  # pylint: disable=g-import-not-at-top

    types = list(clusters.ClusterEnv._cluster_types)  # pylint: disable=protected-access
  except (ImportError, AttributeError):
    return None
  return [(cls.__name__, cls.is_env_present) for cls in types
          if not getattr(cls, "opt_in_only_method", False)]


def running_in_cloud_tpu_vm() -> bool:
  """Whether JAX believes this machine is a Cloud TPU VM (False if unknown)."""
  try:
    from jax._src import cloud_tpu_init  # pylint: disable=g-import-not-at-top
  except ImportError:
    return False
  return bool(getattr(cloud_tpu_init, "running_in_cloud_tpu_vm", False))


def backends_are_initialized() -> bool | None:
  """Whether this process has started a JAX backend; None if JAX cannot say."""
  try:
    from jax._src import xla_bridge  # pylint: disable=g-import-not-at-top

    return bool(xla_bridge.backends_are_initialized())
  except (ImportError, AttributeError):
    return None


def detect_distributed_params(
    coordinator_address: str | None, num_processes: int | None,
    process_id: int | None, timeout_s: int,
) -> tuple[str | None, int | None, int | None]:
  """The coordinator, process count and id `jax.distributed.initialize`
  would use: the given ones, the rest from the cluster JAX detects.

  Asked once, before start-up, so that process 0 can bind the coordinator
  to the address it advertises; the values are then passed to JAX
  explicitly (a TPU VM's metadata query is not made twice). Where this JAX
  has no such detector API the unset values stay None (JAX then detects
  them itself).
  """
  try:
    from jax._src import clusters  # pylint: disable=g-import-not-at-top

    detect = clusters.ClusterEnv.auto_detect_unset_distributed_params
  except (ImportError, AttributeError):
    return coordinator_address, num_processes, process_id
  # local_device_ids is passed as set ([]) so that JAX's own call decides it.
  address, count, index, _ = detect(coordinator_address, num_processes,
                                    process_id, [], None, timeout_s)
  return address, count, index


def pin_gloo_address(address: str) -> bool:
  """Makes JAX's CPU backend start gloo on `address` (an IP of this host).

  JAX creates gloo's TCP device without a hostname, and gloo then binds
  the address this machine's hostname resolves to (gethostname(),
  getaddrinfo(); gloo/transport/tcp/device.cc): 127.0.1.1 on a Debian-style
  /etc/hosts, whatever DNS says elsewhere. jaxlib's
  `make_gloo_tcp_collectives` takes a `hostname` (or `interface`) but JAX
  passes neither and has no option for it, so the CPU backend's factory is
  registered again with collectives made for `address`. Call it after
  `jax.distributed.initialize` and before the first device query. Returns
  False (nothing changed) where this JAX lacks one of the names.
  """
  try:
    from jax._src import distributed  # pylint: disable=g-import-not-at-top
    from jax._src import xla_bridge  # pylint: disable=g-import-not-at-top
    from jax._src.lib import _jax  # pylint: disable=g-import-not-at-top

    make_gloo = _jax.make_gloo_tcp_collectives
    make_cpu_client = xla_bridge.make_cpu_client
    register = xla_bridge.register_backend_factory
    state = distributed.global_state
  except (ImportError, AttributeError):
    return False

  def factory():
    if state.client is None:  # Not a distributed job: JAX's own choice.
      return make_cpu_client()
    return make_cpu_client(collectives=make_gloo(
        distributed_client=state.client, hostname=address))

  # As JAX registers its own CPU factory (xla_bridge.py).
  register("cpu", factory, priority=0, fail_quietly=False)
  return True
