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

"""Which TCP sockets a process tree listens on (tests of loopback binding)."""

from __future__ import annotations

import ipaddress

import psutil


def is_loopback(address: str) -> bool:
  """127.0.0.0/8, ::1, or an IPv4-mapped loopback address."""
  ip = ipaddress.ip_address(address.split("%")[0])
  if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
    ip = ip.ipv4_mapped
  return ip.is_loopback


def tree(pid: int) -> list[psutil.Process]:
  """The process and all its descendants."""
  root = psutil.Process(pid)
  return [root, *root.children(recursive=True)]


def listeners(procs: list[psutil.Process]) -> list[tuple[int, str, str, int]]:
  """(pid, process name, address, port) of each listening TCP socket."""
  found = []
  for proc in procs:
    try:
      name = proc.name()
      for conn in proc.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN:
          found.append((proc.pid, name, conn.laddr.ip, conn.laddr.port))
    except psutil.NoSuchProcess:
      continue
  return found
