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

"""What a process of a detected cluster listens on (`runtime`'s "cluster").

Left to itself, `jax.distributed.initialize` on a cluster binds the
coordinator (process 0) to every interface ([::]:port), and gloo (CPU
collectives, every process) to whatever this machine's hostname resolves
to. Here both use the job's cluster address instead:

* the coordinator binds the address it advertises (the coordinator
  address JAX detects: SLURM's first node, a TPU pod's worker 0, or
  JAX_COORDINATOR_ADDRESS), resolved on process 0 to an address of this
  host. Where that is not possible (the name resolves only to loopback,
  say 127.0.1.1, or to no address of this host, e.g. a Kubernetes service
  IP), JAX's default stays, with a warning; JAX_COORDINATOR_BIND_ADDRESS,
  if set, is left to JAX.
* gloo binds the address this host reaches the coordinator from (the
  source address the kernel picks for a route to it; no packet is sent).

Importing this module does not import jax.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
from typing import Any

from absl import logging



class CoordinatorAddressError(RuntimeError):
  """This process cannot run the coordinator service at the given address
  (`runtime.CoordinatorAddressError`)."""


def initialize(*, initialization_timeout_s: int, cpu_collectives: str,
               optional: dict[str, Any]) -> None:
  """`jax.distributed.initialize` for a detected cluster, bound as above.

  Args:
    initialization_timeout_s: `RuntimeConfig.initialization_timeout_s`.
    cpu_collectives: `RuntimeConfig.cpu_collectives`.
    optional: keyword arguments only some jax versions accept.
  """
  import jax  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.compat import jax_runtime  # pylint: disable=g-import-not-at-top

  address, count, index = jax_runtime.detect_distributed_params(
      os.environ.get("JAX_COORDINATOR_ADDRESS") or None,
      _env_int("JAX_NUM_PROCESSES"), _env_int("JAX_PROCESS_ID"),
      initialization_timeout_s)
  kwargs: dict[str, Any] = {}
  if None not in (address, count, index):
    kwargs = dict(coordinator_address=address, num_processes=count,
                  process_id=index)
    if index == 0 and not os.environ.get("JAX_COORDINATOR_BIND_ADDRESS"):
      bind = coordinator_bind_address(address)
      if bind is not None:
        kwargs["coordinator_bind_address"] = bind
  jax.distributed.initialize(
      initialization_timeout=initialization_timeout_s,
      **kwargs, **optional)
  if cpu_collectives == "gloo" and address is not None:
    local = address_towards(address)
    if local is not None and jax_runtime.pin_gloo_address(local):
      logging.info("gloo (CPU collectives) binds %s", local)


def _env_int(name: str) -> int | None:
  raw = os.environ.get(name)
  return int(raw) if raw else None


def _split(address: str) -> tuple[str, int]:
  host, _, port = address.rpartition(":")
  return host.strip("[]"), int(port)


def _join(ip: str, port: int) -> str:
  return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def _is_loopback(ip: str) -> bool:
  return ipaddress.ip_address(ip.split("%")[0]).is_loopback


def coordinator_bind_address(address: str) -> str | None:
  """"ip:port" of this host that `address` names, for process 0 to bind;
  None to keep JAX's default (every interface), with a warning why.

  Raises:
    CoordinatorAddressError: the port is in use here.
  """
  host, port = _split(address)
  try:
    ips = list(dict.fromkeys(
        info[4][0] for info in socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM)))
  except socket.gaierror as e:
    return _keep_default(address, f"{host!r} does not resolve here ({e})")
  if all(_is_loopback(ip) for ip in ips):
    try:
      ipaddress.ip_address(host)
      literal = True
    except ValueError:
      literal = host == "localhost"
    if literal:  # The job asked for loopback: every process on this machine.
      return _join(ips[0], port)
    return _keep_default(
        address, f"{host!r} resolves only to loopback here ({ips[0]}), which"
        " other hosts cannot reach; map it to this host's cluster address"
        " (e.g. in /etc/hosts or DNS)")
  for ip in ips:
    if _is_loopback(ip):
      continue
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
      sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
      try:
        sock.bind((ip, port))
      except OSError as e:
        if e.errno == errno.EADDRINUSE:
          raise CoordinatorAddressError(
              f"coordinator port {port} on {ip} is already in use (another"
              " job, or a previous run still shutting down); process 0 (this"
              " one) runs the coordinator there. Pick another port"
              " (JAX_COORDINATOR_PORT), or stop what holds it.") from e
        continue
    return _join(ip, port)
  return _keep_default(
      address, f"{host!r} resolves to {', '.join(ips)}, none of them an"
      " address of this host (a service address?)")


def _keep_default(address: str, why: str) -> None:
  logging.warning(
      "tunix_mcjax: the JAX coordinator binds every interface of this host,"
      " not just %s: %s. Set JAX_COORDINATOR_BIND_ADDRESS to choose.",
      address, why)
  return None


def address_towards(address: str) -> str | None:
  """The address of this host that packets to `address` leave from (the
  kernel's route choice, asked with an unconnected UDP socket: nothing is
  sent); None if the name does not resolve or no route leads there."""
  host, port = _split(address)
  try:
    family, _, _, _, sockaddr = socket.getaddrinfo(
        host, port, type=socket.SOCK_DGRAM)[0]
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
      sock.connect(sockaddr)
      return sock.getsockname()[0]
  except OSError as e:
    logging.warning("tunix_mcjax: no route to the coordinator %s (%s); gloo"
                    " binds what this hostname resolves to.", address, e)
    return None
