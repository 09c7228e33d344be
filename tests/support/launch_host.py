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

"""Host programs of tests/test_launch.py (run by path, under the launcher):

  launch_host.py healthy PID_DIR        a real collective; prints a REPORT
      line (runtime info, gathered host ids, where host 0's coordinator
      listens) and a line to stderr;
  launch_host.py failing PID_DIR MODE   host 0 ignores SIGTERM and leaves a
      grandchild; host 1 then fails (MODE exit: status 3, sigkill: SIGKILL);
  launch_host.py hang PID_DIR           host 0 enters a collective host 1
      never joins;
  launch_host.py sleep PID_DIR          sleeps (no JAX);
  launch_host.py marker PATH            writes PATH (shows it ever ran);
  launch_host.py env OUT_DIR            writes the launcher's variables it
      got to OUT_DIR/<host id> (no JAX);
  launch_host.py hello                  prints "hello <host>"; host 1 exits
      with status 5.

The PID_DIR programs record their pid there first (`<pid>.pid`), before
JAX starts, so that the orphan check covers hosts that die early.
"""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import launch_utils

_LAUNCHER_VARS = ("JAX_PLATFORMS", "TUNIX_MCJAX_LOCAL_DEVICE_IDS",
                  "TUNIX_MCJAX_DEVICES_PER_HOST", "TUNIX_MCJAX_HOST_ID")


def _listening_addresses(port: int) -> list[str]:
  """Where `port` listens, from the kernel's socket tables."""
  import ipaddress  # pylint: disable=g-import-not-at-top

  addresses = []
  for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
      rows = pathlib.Path(table).read_text().splitlines()[1:]
    except FileNotFoundError:
      continue
    for row in rows:
      local, state = row.split()[1], row.split()[3]
      address, hex_port = local.split(":")
      if state == "0A" and int(hex_port, 16) == port:  # 0A = LISTEN
        # The kernel prints each 32-bit word in host (little-endian) order.
        raw = b"".join(bytes.fromhex(address[i:i + 8])[::-1]
                       for i in range(0, len(address), 8))
        ip = ipaddress.ip_address(raw)
        if ip.version == 6 and ip.ipv4_mapped:
          ip = ip.ipv4_mapped
        addresses.append(str(ip))
  return addresses


def healthy(host: int) -> None:
  # pylint: disable=g-import-not-at-top
  import jax
  from jax.experimental import multihost_utils
  import numpy as np
  from tunix_mcjax import runtime
  # pylint: enable=g-import-not-at-top

  info = runtime.initialize()
  # A real cross-host collective: only works if the hosts are connected.
  gathered = multihost_utils.process_allgather(np.array([info.process_index]))
  report = {
      "info": [info.process_index, info.process_count,
               info.local_device_count, info.global_device_count,
               info.source],
      "device_count": jax.device_count(),
      "gathered": np.asarray(gathered).ravel().tolist(),
  }
  if host == 0:
    # Where does the coordinator listen?
    port = int(os.environ["TUNIX_MCJAX_COORDINATOR"].rsplit(":", 1)[1])
    report["listen"] = _listening_addresses(port)
  # One write of a whole line: gloo's C++ threads print to the same stdout
  # in pieces, and must not land inside it.
  sys.stdout.flush()
  os.write(1, ("REPORT " + json.dumps(report) + "\n").encode())
  print(f"to stderr from {host}", file=sys.stderr)


def failing(host: int, pid_dir: pathlib.Path, mode: str) -> None:
  from tunix_mcjax import runtime  # pylint: disable=g-import-not-at-top

  runtime.initialize()
  if host == 0:
    # Leaves a grandchild in its process group, and ignores SIGTERM so the
    # launcher must escalate to SIGKILL.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen(["sleep", "600"])
    launch_utils.write_pid(pid_dir, child.pid)
    (pid_dir / "ready").write_text("")
    time.sleep(600)
  else:
    while not (pid_dir / "ready").exists():
      time.sleep(0.05)
    print("failing now", flush=True)
    if mode == "exit":
      os._exit(3)  # pylint: disable=protected-access
    os.kill(os.getpid(), signal.SIGKILL)


def hang(host: int) -> None:
  # pylint: disable=g-import-not-at-top
  from jax.experimental import multihost_utils
  import numpy as np
  from tunix_mcjax import runtime
  # pylint: enable=g-import-not-at-top

  runtime.initialize()
  if host == 0:
    print("entering collective", flush=True)
    multihost_utils.process_allgather(np.arange(4))
    print("left collective", flush=True)
  else:
    print("sleeping", flush=True)
    time.sleep(600)


def main(argv: list[str]) -> None:
  what = argv[1]
  if what == "marker":
    pathlib.Path(argv[2]).write_text("x")
    return
  if what == "env":
    with open(pathlib.Path(argv[2]) / os.environ["TUNIX_MCJAX_HOST_ID"],
              "w") as f:
      json.dump({k: os.environ.get(k) for k in _LAUNCHER_VARS}, f)
    return
  host = int(os.environ["TUNIX_MCJAX_HOST_ID"])
  if what == "hello":
    print("hello", host)
    sys.exit(0 if host == 0 else 5)
  pid_dir = pathlib.Path(argv[2])
  launch_utils.write_pid(pid_dir)
  if what == "healthy":
    healthy(host)
  elif what == "failing":
    failing(host, pid_dir, argv[3])
  elif what == "hang":
    hang(host)
  elif what == "sleep":
    time.sleep(600)
  else:
    sys.exit(f"unknown program {what!r}")


if __name__ == "__main__":
  main(sys.argv)
