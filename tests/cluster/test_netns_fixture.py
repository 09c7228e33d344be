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

"""The namespace fixture itself (tests/support/netns_cluster.py): it
cleans up after a failure, and says why where it cannot run. No JAX."""

from __future__ import annotations

import os
import subprocess

import pytest

import netns_cluster


def _cluster(n: int, **kwargs) -> netns_cluster.Cluster:
  try:
    return netns_cluster.Cluster.create(n, **kwargs)
  except netns_cluster.Unavailable as e:
    pytest.skip(str(e))


def test_hosts_are_apart_and_reach_only_each_other():
  with _cluster(2) as cluster:
    h0, h1 = cluster.hosts
    def on(host, script):
      proc = cluster.start(host, ["sh", "-c", script], env=os.environ,
                           stdout=subprocess.PIPE)
      return proc.communicate(timeout=30)[0].decode()
    assert on(h0, "hostname").strip() == "node0"
    assert on(h1, "getent hosts node0").split()[0] == h0.address
    assert f"src {h1.address}" in on(h1, f"ip route get {h0.address}")
    # No route out: only the /24 and loopback.
    routes = on(h0, "ip -4 route")
    assert routes.split()[0] == f"10.213.{cluster.net}.0/24", routes
    assert "default" not in routes
    assert "unreachable" in on(h0, "ip route get 192.0.2.1 2>&1")


def test_teardown_removes_everything_after_a_failure():
  cluster = _cluster(2)
  with pytest.raises(RuntimeError, match="a failing test"):
    with cluster:
      for host in cluster.hosts:
        cluster.start(host, ["sleep", "600"], env=os.environ, stdout=None)
      listed = netns_cluster._run("ip", "netns", "list")  # pylint: disable=protected-access
      assert all(h.netns in listed for h in cluster.hosts)
      raise RuntimeError("a failing test")
  assert cluster.leftovers() == []


def test_not_root_is_a_reason_to_skip(monkeypatch):
  monkeypatch.setattr(os, "geteuid", lambda: 1000)
  with pytest.raises(netns_cluster.Unavailable, match="need root"):
    netns_cluster.Cluster.create(2)


def test_a_refused_namespace_is_a_reason_to_skip(monkeypatch):
  def refuse(*cmd):
    raise subprocess.CalledProcessError(
        1, cmd, "", "mount --make-shared /run/netns failed: Operation not"
        " permitted")
  monkeypatch.setattr(netns_cluster, "unavailable_reason", lambda: None)
  monkeypatch.setattr(netns_cluster, "_run", refuse)
  with pytest.raises(netns_cluster.Unavailable,
                     match="Operation not permitted"):
    netns_cluster.Cluster.create(2)
