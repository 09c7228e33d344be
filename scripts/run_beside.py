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

  python scripts/run_beside.py LOG BESIDE_1... [:: BESIDE_2... ...]
      [--also=LOG2 BESIDE_3... [:: ...]] ... ::: MAIN...

`make test` builds `.venv-maxtext-vllm` and runs tests/cluster (namespaced
machines that mostly wait out the limits under test) beside the main group
this way, and the main group's second shard in a second chain. MAIN writes
to the terminal as it goes; each chain's BESIDE commands run one after the
other (each whatever the one before returned), the chains at the same
time, each chain's output going to its LOG, which is printed once
everything has ended. Exit status: MAIN's if non-zero, else the first
non-zero BESIDE's (chain by chain); pytest's "collected no tests" (5)
counts as a failure. Every child stays in this process group
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
_ALSO = "--also="


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


def _chains(args: list[str], log: str) -> list[tuple[pathlib.Path,
                                                     list[list[str]]]]:
  """(LOG, commands) per chain; a chain starts at `--also=LOG`."""
  chains: list[tuple[str, list[str]]] = [(log, [])]
  for arg in args:
    if arg.startswith(_ALSO):
      chains.append((arg[len(_ALSO):], []))
    else:
      chains[-1][1].append(arg)
  return [(pathlib.Path(l), _split(a)) for l, a in chains]


def main(argv: list[str]) -> int:
  if len(argv) < 4 or _MAIN not in argv[2:]:
    print(__doc__, file=sys.stderr)
    return 2
  cut = argv.index(_MAIN, 2)
  chains, main_cmd = _chains(argv[2:cut], argv[1]), argv[cut + 1:]
  if (not main_cmd or not all(l.name for l, _ in chains)
      or not all(c for _, cmds in chains for c in cmds)):
    print(__doc__, file=sys.stderr)
    return 2
  for log, cmds in chains:
    log.parent.mkdir(parents=True, exist_ok=True)
    names = "; ".join(" ".join(c) for c in cmds)
    print(f">> beside this run, one after the other: {names}"
          f" (output: {log}, shown at the end)", flush=True)
  interrupted = threading.Event()
  codes: list[list[int]] = [[] for _ in chains]

  def run_chain(log: pathlib.Path, cmds: list[list[str]],
                out_codes: list[int]) -> None:
    with open(log, "w") as out:
      for cmd in cmds:
        if interrupted.is_set():
          return
        out.write(f">> {' '.join(cmd)}\n")
        out.flush()
        out_codes.append(_wait(
            subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT),
            interrupted))

  threads = [threading.Thread(target=run_chain, args=(l, c, k), daemon=True)
             for (l, c), k in zip(chains, codes)]
  for thread in threads:
    thread.start()
  main_code = _wait(subprocess.Popen(main_cmd), interrupted)
  for thread in threads:
    while thread.is_alive():
      try:
        thread.join()
      except KeyboardInterrupt:
        interrupted.set()
  results = [("main", main_code)]
  for (log, cmds), chain_codes in zip(chains, codes):
    print("\n>> ran beside the above:", flush=True)
    sys.stdout.write(log.read_text())
    sys.stdout.flush()
    results += zip((" ".join(c) for c in cmds), chain_codes)
  for name, code in results:
    status = _status(name, code)
    if status:
      return status
  # Only a Ctrl-C leaves commands unstarted.
  return 1 if sum(map(len, codes)) < sum(len(c) for _, c in chains) else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
