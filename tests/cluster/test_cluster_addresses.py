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

"""What a cluster process binds (tunix_mcjax/cluster_addresses.py), without
starting JAX; the namespaced runs in test_netns_cluster.py show it on
listening sockets."""

from __future__ import annotations

import socket

from absl import logging
import pytest

from tunix_mcjax import cluster_addresses
from tunix_mcjax import runtime
from tunix_mcjax.compat import jax_runtime


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _resolving(monkeypatch, *ips: str) -> None:
  def fake(host, port, *args, **kwargs):
    del host, args, kwargs
    return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port))
            for ip in ips]
  monkeypatch.setattr(socket, "getaddrinfo", fake)


@pytest.fixture(name="warnings")
def warnings_fixture(monkeypatch):
  seen = []
  monkeypatch.setattr(logging, "warning",
                      lambda msg, *args: seen.append(msg % args))
  return seen


def test_an_explicit_loopback_coordinator_binds_loopback(warnings):
  port = _free_port()
  assert (cluster_addresses.coordinator_bind_address(f"127.0.0.1:{port}")
          == f"127.0.0.1:{port}")
  assert (cluster_addresses.coordinator_bind_address(f"localhost:{port}")
          in (f"127.0.0.1:{port}", f"[::1]:{port}"))
  assert not warnings


def test_a_name_that_resolves_to_loopback_keeps_jax_default(monkeypatch,
                                                            warnings):
  # Debian's /etc/hosts maps the hostname to 127.0.1.1: binding it would
  # shut out every other host, so JAX's default stays, with a warning.
  _resolving(monkeypatch, "127.0.1.1")
  assert cluster_addresses.coordinator_bind_address("node0:1234") is None
  assert "resolves only to loopback" in warnings[0]
  assert "JAX_COORDINATOR_BIND_ADDRESS" in warnings[0]


def test_an_address_of_another_host_keeps_jax_default(monkeypatch, warnings):
  _resolving(monkeypatch, "192.0.2.7")  # TEST-NET-1: never this host's.
  assert cluster_addresses.coordinator_bind_address("svc:1234") is None
  assert "none of them an address of this host" in warnings[0]


def test_an_unknown_name_keeps_jax_default(warnings):
  assert cluster_addresses.coordinator_bind_address(
      "no-such-host.invalid:1234") is None
  assert "does not resolve" in warnings[0]


def test_a_port_in_use_is_one_clear_error(monkeypatch):
  with socket.socket() as held:
    held.bind(("127.0.0.1", 0))
    held.listen()
    port = held.getsockname()[1]
    # A non-loopback name resolving to an address of this host that is in
    # use: 127.0.0.1 stands in (the check is the same).
    _resolving(monkeypatch, "127.0.0.1")
    monkeypatch.setattr(cluster_addresses, "_is_loopback", lambda ip: False)
    with pytest.raises(runtime.CoordinatorAddressError, match="in use"):
      cluster_addresses.coordinator_bind_address(f"node0:{port}")


def test_ipv6_addresses_are_bracketed():
  assert cluster_addresses._join("::1", 5) == "[::1]:5"  # pylint: disable=protected-access
  assert cluster_addresses._split("[::1]:5") == ("::1", 5)  # pylint: disable=protected-access


def test_gloo_address_is_the_route_to_the_coordinator():
  assert cluster_addresses.address_towards("127.0.0.1:1234") == "127.0.0.1"


def test_detection_passes_given_values_through():
  # No scheduler here: what is given comes back, nothing is invented.
  assert jax_runtime.detect_distributed_params(
      "10.0.0.1:1234", 2, 1, 5) == ("10.0.0.1:1234", 2, 1)
