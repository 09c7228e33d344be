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

"""N machines on one: network namespaces, one per host (tests/cluster/).

Each host is a network namespace of its own with one address on a private
/24 (10.213.<net>.0/24, only inside these namespaces), loopback, and no
route out; its processes run under `unshare --uts` with the host's own
hostname. The hosts' veth links end on a bridge inside a further namespace
this fixture creates: nothing in the root namespace is touched, and only
the hosts' addresses and loopback can be reached. Names resolve through
/etc/netns/<ns>/hosts (`ip netns exec` bind-mounts it over /etc/hosts),
written here and removed at teardown with the namespaces and every process
started. Namespace names carry a per-run tag, so two runs never collide.

Needs root, `ip` and `unshare`; `Cluster.create` raises `Unavailable` (the
tests skip with its reason) where namespaces cannot be made.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence

NETNS_ETC = pathlib.Path("/etc/netns")
# /proc/net/{tcp,udp}[6] socket states: TCP LISTEN, UDP bound (unconnected).
_TCP_LISTEN = "0A"
_UDP_UNCONNECTED = "07"


class Unavailable(RuntimeError):
  """Network namespaces cannot be made here (the reason is the message)."""


@dataclasses.dataclass(frozen=True)
class Host:
  """One machine: its namespace, hostname and cluster address."""

  index: int
  netns: str
  hostname: str
  address: str


@dataclasses.dataclass(frozen=True)
class Listener:
  """A socket bound for incoming traffic, seen in a host's namespace."""

  host: str  # Hostname.
  proto: str  # "tcp", "tcp6", "udp" or "udp6".
  address: str
  port: int
  pid: int | None  # The process that holds it, where found.

  def __str__(self):
    return (f"{self.host}: {self.proto} {self.address}:{self.port}"
            f" (pid {self.pid})")


def _run(*cmd: str) -> str:
  proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30,
                        check=False)
  if proc.returncode != 0:
    raise subprocess.CalledProcessError(proc.returncode, cmd, proc.stdout,
                                        proc.stderr)
  return proc.stdout


def unavailable_reason() -> str | None:
  """Why namespaces cannot be made here, or None if they may be."""
  if os.geteuid() != 0:
    return "network namespaces need root (euid is not 0)"
  for tool in ("ip", "unshare"):
    if shutil.which(tool) is None:
      return f"`{tool}` is not on PATH"
  return None


class Cluster:
  """`hosts` machines joined by a bridge; see the module docstring.

  Use `with Cluster.create(n) as cluster:`; `close()` (also on an error
  while creating) stops every process started through `start` and removes
  every namespace and /etc/netns directory made.
  """

  def __init__(self, num_hosts: int, *, hosts_file: str = "cluster"):
    self.tag = f"mcx{os.getpid() % 100000}{secrets.token_hex(2)}"
    self.net = secrets.randbelow(250) + 1
    self.bridge_ns = f"{self.tag}-br"
    self.hosts = [
        Host(index=i, netns=f"{self.tag}-h{i}", hostname=f"node{i}",
             address=f"10.213.{self.net}.{i + 1}")
        for i in range(num_hosts)
    ]
    self._hosts_file = hosts_file
    self._made_ns: list[str] = []
    self._made_etc: list[pathlib.Path] = []
    self._made_netns_etc = False
    self._procs: list[subprocess.Popen] = []

  @classmethod
  def create(cls, num_hosts: int, *, hosts_file: str = "cluster") -> Cluster:
    """Makes the namespaces, links and hosts files.

    Args:
      num_hosts: machines.
      hosts_file: "cluster": every hostname resolves to its host's cluster
        address (as DNS on a cluster); "loopback_self": a host's own name
        resolves to 127.0.1.1 (the Debian default) and the others' names
        are unknown, so only explicit addresses reach another host.

    Raises:
      Unavailable: not root, no `ip`/`unshare`, or the kernel refused.
    """
    reason = unavailable_reason()
    if reason:
      raise Unavailable(reason)
    cluster = cls(num_hosts, hosts_file=hosts_file)
    try:
      cluster._build()
    except subprocess.CalledProcessError as e:
      cluster.close()
      raise Unavailable(
          f"cannot make network namespaces here: `{' '.join(e.cmd)}` said"
          f" {e.stderr.strip() or e.returncode}") from e
    except BaseException:
      cluster.close()
      raise
    return cluster

  def __enter__(self) -> Cluster:
    return self

  def __exit__(self, *exc) -> None:
    self.close()

  def _add_ns(self, name: str) -> None:
    _run("ip", "netns", "add", name)
    self._made_ns.append(name)
    _run("ip", "-n", name, "link", "set", "lo", "up")

  def _build(self) -> None:
    self._add_ns(self.bridge_ns)
    _run("ip", "-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
    _run("ip", "-n", self.bridge_ns, "link", "set", "br0", "up")
    for host in self.hosts:
      self._add_ns(host.netns)
      veth = f"v{host.index}"
      # Both ends are made inside namespaces: the root namespace never
      # holds either.
      _run("ip", "-n", self.bridge_ns, "link", "add", veth, "type", "veth",
           "peer", "name", "eth0", "netns", host.netns)
      _run("ip", "-n", self.bridge_ns, "link", "set", veth, "master", "br0",
           "up")
      _run("ip", "-n", host.netns, "addr", "add", f"{host.address}/24",
           "dev", "eth0")
      _run("ip", "-n", host.netns, "link", "set", "eth0", "up")
      self._write_etc(host)

  def _write_etc(self, host: Host) -> None:
    if not NETNS_ETC.exists():
      self._made_netns_etc = True
    etc = NETNS_ETC / host.netns
    # parents: another run may remove an empty /etc/netns at any moment.
    etc.mkdir(mode=0o755, parents=True)
    self._made_etc.append(etc)
    lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost"]
    if self._hosts_file == "cluster":
      lines += [f"{h.address} {h.hostname}" for h in self.hosts]
    elif self._hosts_file == "loopback_self":
      lines.append(f"127.0.1.1 {host.hostname}")
    else:
      raise ValueError(f"hosts_file={self._hosts_file!r}")
    (etc / "hosts").write_text("\n".join(lines) + "\n")
    # No name server but loopback's: a lookup of any other name fails here
    # instead of leaving the machine.
    (etc / "resolv.conf").write_text("nameserver 127.0.0.1\n")

  def start(self, host: Host, argv: Sequence[str], *,
            env: Mapping[str, str], stdout, stderr=subprocess.STDOUT,
            cwd: str | os.PathLike[str] | None = None) -> subprocess.Popen:
    """Starts `argv` on `host`: its namespace, its hostname, `env` only."""
    cmd = ["ip", "netns", "exec", host.netns, "unshare", "--uts", "sh", "-c",
           'hostname "$0" && exec "$@"', host.hostname, *argv]
    proc = subprocess.Popen(cmd, env=dict(env), stdout=stdout, stderr=stderr,
                            cwd=cwd, start_new_session=True)
    self._procs.append(proc)
    return proc

  def set_link(self, host: Host, *, up: bool) -> None:
    """Sets `host`'s link (eth0, inside its namespace) up or down: down
    cuts it off from every other host, as a pulled cable."""
    _run("ip", "-n", host.netns, "link", "set", "eth0",
         "up" if up else "down")

  def listeners(self) -> list[Listener]:
    """Every listening TCP and bound UDP socket in every host's namespace.

    Read from /proc/<pid>/net of a process started on that host (each
    namespace holds only that host's processes); a host with no process
    running is skipped.
    """
    found = []
    for host in self.hosts:
      pids = [p.pid for p in self._procs
              if p.poll() is None and _netns_of(p.pid) == _ns_id(host)]
      if not pids:
        continue
      owners = _socket_owners(pids)
      for proto in ("tcp", "tcp6", "udp", "udp6"):
        try:
          text = pathlib.Path(f"/proc/{pids[0]}/net/{proto}").read_text()
        except OSError:
          continue
        for line in text.splitlines()[1:]:
          fields = line.split()
          local, state, inode = fields[1], fields[3], fields[9]
          if state != (_TCP_LISTEN if proto.startswith("tcp")
                       else _UDP_UNCONNECTED):
            continue
          address, port = _decode(local)
          found.append(Listener(host.hostname, proto, address, port,
                                owners.get(inode)))
    return found

  def close(self) -> None:
    """Stops every process started here, removes namespaces and files."""
    for proc in self._procs:
      if proc.poll() is None:
        try:
          os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
          pass
    for proc in self._procs:
      try:
        proc.wait(timeout=30)
      except subprocess.TimeoutExpired:
        pass
    for name in reversed(self._made_ns):
      # A process that escaped the group would keep the namespace alive;
      # kill what is left in it first.
      for pid in _netns_pids(name):
        try:
          os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
          pass
      subprocess.run(["ip", "netns", "del", name], capture_output=True,
                     check=False)
    self._made_ns.clear()
    for etc in self._made_etc:
      shutil.rmtree(etc, ignore_errors=True)
    self._made_etc.clear()
    if self._made_netns_etc:
      try:
        NETNS_ETC.rmdir()  # Only if empty: another run may be using it.
      except OSError:
        pass

  def pids(self, host: Host) -> list[int]:
    """Every process running in `host`'s namespace now."""
    return _netns_pids(host.netns)

  def leftovers(self) -> list[str]:
    """What of this cluster still exists (for the teardown test)."""
    names = _run("ip", "netns", "list")
    left = [line.split()[0] for line in names.splitlines()
            if line.startswith(self.tag)]
    left += [str(p) for p in NETNS_ETC.glob(f"{self.tag}*")]
    left += [f"pid {p.pid}" for p in self._procs if p.poll() is None]
    return left


def _ns_id(host: Host) -> int | None:
  try:
    return os.stat(f"/run/netns/{host.netns}").st_ino
  except OSError:
    return None


def _netns_of(pid: int) -> int | None:
  try:
    return os.stat(f"/proc/{pid}/ns/net").st_ino
  except OSError:
    return None


def _netns_pids(name: str) -> list[int]:
  proc = subprocess.run(["ip", "netns", "pids", name], capture_output=True,
                        text=True, check=False)
  return [int(p) for p in proc.stdout.split() if p.isdigit()]


def _socket_owners(pids: Sequence[int]) -> dict[str, int]:
  """Socket inode -> pid, over `pids` and their descendants' open files."""
  owners = {}
  for pid in _with_descendants(pids):
    try:
      fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
      continue
    for fd in fds:
      try:
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
      except OSError:
        continue
      if target.startswith("socket:["):
        owners[target[8:-1]] = pid
  return owners


def _with_descendants(pids: Sequence[int]) -> list[int]:
  children: dict[int, list[int]] = {}
  for entry in os.listdir("/proc"):
    if not entry.isdigit():
      continue
    try:
      stat = pathlib.Path(f"/proc/{entry}/stat").read_text()
    except OSError:
      continue
    ppid = int(stat.rpartition(")")[2].split()[1])
    children.setdefault(ppid, []).append(int(entry))
  out, todo = [], list(pids)
  while todo:
    pid = todo.pop()
    out.append(pid)
    todo.extend(children.get(pid, []))
  return out


def _decode(local: str) -> tuple[str, int]:
  """'0100007F:1F90' -> ('127.0.0.1', 8080); IPv6 likewise."""
  import ipaddress  # pylint: disable=g-import-not-at-top

  hex_addr, hex_port = local.split(":")
  raw = bytes.fromhex(hex_addr)
  # The kernel prints each 32-bit word in host (little-endian) order.
  raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
  ip = ipaddress.ip_address(raw)
  if getattr(ip, "ipv4_mapped", None) is not None:
    ip = ip.ipv4_mapped  # An IPv6 socket bound to one IPv4 address.
  return str(ip), int(hex_port, 16)


def wait_all(procs: Sequence[subprocess.Popen], *, timeout: float,
             poll=None, every: float = 0.5) -> list[int | None]:
  """Waits for `procs` (calling `poll()` meanwhile); None for one still
  running at `timeout`. Stops waiting early when one fails."""
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    if poll is not None:
      poll()
    codes = [p.poll() for p in procs]
    if all(c is not None for c in codes) or any(c not in (None, 0)
                                                for c in codes):
      return codes
    time.sleep(every)
  return [p.poll() for p in procs]


def without_other_jobs(env: Mapping[str, str]) -> dict[str, str]:
  """`env` less anything that names another job or a scheduler (each route
  sets its own), or a proxy (gRPC would send the coordinator's traffic to
  it)."""
  return {name: value for name, value in env.items()
          if not name.startswith(
              ("TUNIX_MCJAX_", "SLURM", "JAX_COORDINATOR", "JAX_NUM_PROCESSES",
               "JAX_PROCESS_ID", "OMPI_", "PMIX_", "KUBERNETES_", "TPU_",
               "CLOUD_TPU_"))
          and "_proxy" not in name.lower()}

