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

"""Runs a command in a network namespace and a temp dir of its own.

  python scripts/own_netns.py --check   # exit 0 if it can, else says why
  python scripts/own_netns.py CMD...    # CMD's exit status

`make test` runs the main group's second shard and the fault modules this
way beside the first shard: their jobs' ports, Ray heads and sockets cannot
meet another group's, and a check for leftover processes or temp files
(which looks at its own namespace and `tempfile.gettempdir()`) sees only
its own group's. The
namespace has loopback only (up); the temp dir (TMPDIR) is removed after
CMD ends. Needs root (or CAP_SYS_ADMIN), `unshare` and `ip`.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile

# Short: Ray's socket paths under TMPDIR must stay under 107 bytes.
_TMP_PREFIX = "mcjax-ns."
_INNER = 'ip link set lo up && exec "$@"'


def unavailable_reason() -> str | None:
  """Why a namespace cannot be made here, or None if it can."""
  for tool in ("unshare", "ip"):
    if shutil.which(tool) is None:
      return f"no `{tool}` on PATH"
  try:
    proc = subprocess.run(
        ["unshare", "--net", "--", "sh", "-c", _INNER, "sh", "true"],
        capture_output=True, text=True, timeout=30, check=False)
  except (OSError, subprocess.TimeoutExpired) as e:
    return f"unshare --net failed: {e}"
  if proc.returncode != 0:
    return ("unshare --net failed (root or CAP_SYS_ADMIN needed): "
            + (proc.stderr.strip().splitlines() or ["no message"])[-1])
  return None


def run(cmd: list[str]) -> int:
  """CMD's exit status, run in a fresh namespace with its own TMPDIR."""
  tmp = tempfile.mkdtemp(prefix=_TMP_PREFIX)
  env = dict(os.environ, TMPDIR=tmp)
  try:
    proc = subprocess.Popen(
        ["unshare", "--net", "--", "sh", "-c", _INNER, "sh", *cmd], env=env)
    while True:
      try:
        return proc.wait()
      except KeyboardInterrupt:
        # Ctrl-C reached CMD too (same process group): wait for its
        # teardown.
        continue
  finally:
    shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str]) -> int:
  if argv[1:] == ["--check"]:
    why = unavailable_reason()
    if why:
      print(f"own_netns: {why}", file=sys.stderr)
      return 1
    return 0
  if len(argv) < 2 or argv[1].startswith("--"):
    print(__doc__, file=sys.stderr)
    return 2
  return run(argv[1:])


if __name__ == "__main__":
  signal.signal(signal.SIGINT, signal.default_int_handler)
  sys.exit(main(sys.argv))
