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

"""Runs one command beside another; the second's output follows the first's.

  python scripts/run_beside.py LOG BESIDE_CMD... ::: MAIN_CMD...

`make test` runs tests/cluster (namespaced machines that mostly wait out the
limits under test) beside the main group this way. MAIN_CMD writes to the
terminal as it goes; BESIDE_CMD's output goes to LOG and is printed once
both have ended. Exit status: MAIN_CMD's if non-zero, else BESIDE_CMD's;
pytest's "collected no tests" (5) counts as a failure. Both children stay
in this process group with SIGINT at its default, so Ctrl-C reaches both
and each runs its teardown (a shell's `&` would start the second with
SIGINT ignored).
"""

import pathlib
import subprocess
import sys

_SEPARATOR = ":::"


def _status(name: str, code: int) -> int:
  if code == 5:
    print(f"error: {name}: pytest collected no tests", file=sys.stderr)
    return 1
  return code


def _wait(proc: subprocess.Popen) -> int:
  """`proc`'s exit status; Ctrl-C reached it too, so wait for its
  teardown rather than kill it."""
  while True:
    try:
      return proc.wait()
    except KeyboardInterrupt:
      continue


def main(argv: list[str]) -> int:
  if len(argv) < 4 or _SEPARATOR not in argv[2:]:
    print(__doc__, file=sys.stderr)
    return 2
  log = pathlib.Path(argv[1])
  cut = argv.index(_SEPARATOR, 2)
  beside_cmd, main_cmd = argv[2:cut], argv[cut + 1:]
  if not beside_cmd or not main_cmd:
    print(__doc__, file=sys.stderr)
    return 2
  log.parent.mkdir(parents=True, exist_ok=True)
  print(f">> beside this run: {' '.join(beside_cmd)} (output: {log}, shown"
        " at the end)", flush=True)
  with open(log, "w") as out:
    beside = subprocess.Popen(beside_cmd, stdout=out, stderr=subprocess.STDOUT)
    main_code = _wait(subprocess.Popen(main_cmd))
    beside_code = _wait(beside)
  print(f"\n>> {' '.join(beside_cmd)} (ran beside the above):", flush=True)
  sys.stdout.write(log.read_text())
  sys.stdout.flush()
  return (_status("main", main_code)
          or _status(" ".join(beside_cmd[:3]), beside_code))


if __name__ == "__main__":
  sys.exit(main(sys.argv))
