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

"""Runs commands beside another; their output follows the other's.

  python scripts/run_beside.py LOG BESIDE_1... [:: BESIDE_2... ...] ::: MAIN...

`make test` builds `.venv-maxtext-vllm` and runs tests/cluster (namespaced
machines that mostly wait out the limits under test) beside the main group
this way. MAIN writes to the terminal as it goes; the BESIDE commands run
one after the other (each whatever the one before returned), their output
going to LOG, which is printed once everything has ended. Exit status:
MAIN's if non-zero, else the first non-zero BESIDE's; pytest's "collected
no tests" (5) counts as a failure. Every child stays in this process group
with SIGINT at its default, so Ctrl-C reaches them and each runs its
teardown (a shell's `&` would start them with SIGINT ignored); no BESIDE
command starts after a Ctrl-C.
"""

import pathlib
import subprocess
import sys
import threading

_MAIN = ":::"
_NEXT = "::"


def _status(name: str, code: int) -> int:
  if code == 5:
    print(f"error: {name}: pytest collected no tests", file=sys.stderr)
    return 1
  return code


def _wait(proc: subprocess.Popen, interrupted: threading.Event) -> int:
  """`proc`'s exit status; Ctrl-C reached it too, so wait for its
  teardown rather than kill it."""
  while True:
    try:
      return proc.wait()
    except KeyboardInterrupt:
      interrupted.set()


def _split(args: list[str]) -> list[list[str]]:
  commands = [[]]
  for arg in args:
    if arg == _NEXT:
      commands.append([])
    else:
      commands[-1].append(arg)
  return commands


def main(argv: list[str]) -> int:
  if len(argv) < 4 or _MAIN not in argv[2:]:
    print(__doc__, file=sys.stderr)
    return 2
  log = pathlib.Path(argv[1])
  cut = argv.index(_MAIN, 2)
  beside, main_cmd = _split(argv[2:cut]), argv[cut + 1:]
  if not all(beside) or not main_cmd:
    print(__doc__, file=sys.stderr)
    return 2
  log.parent.mkdir(parents=True, exist_ok=True)
  names = [" ".join(c) for c in beside]
  print(f">> beside this run, one after the other: {'; '.join(names)}"
        f" (output: {log}, shown at the end)", flush=True)
  interrupted = threading.Event()
  codes: list[int] = []
  with open(log, "w") as out:

    def run_beside() -> None:
      for cmd in beside:
        if interrupted.is_set():
          return
        out.write(f">> {' '.join(cmd)}\n")
        out.flush()
        codes.append(_wait(
            subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT),
            interrupted))

    thread = threading.Thread(target=run_beside, daemon=True)
    thread.start()
    main_code = _wait(subprocess.Popen(main_cmd), interrupted)
    while thread.is_alive():
      try:
        thread.join()
      except KeyboardInterrupt:
        interrupted.set()
  print("\n>> ran beside the above:", flush=True)
  sys.stdout.write(log.read_text())
  sys.stdout.flush()
  for name, code in [("main", main_code), *zip(names, codes)]:
    status = _status(name, code)
    if status:
      return status
  # Only a Ctrl-C leaves commands unstarted.
  return 1 if len(codes) < len(beside) else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
