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

"""Helpers for tests that run code as several simulated hosts.

Typical use:

  result = launch_utils.run_launched(script, num_hosts=2, devices_per_host=2)
  launch_utils.assert_ok(result)
  assert launch_utils.host_lines(result.stdout, 1) == [...]

A host script can record its pid with `write_pid(directory)` (or the same
two lines inline) so a test can check afterwards, with
`assert_no_survivors(read_pids(directory))`, that nothing outlived the job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import zygote

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]

# Slack on top of the launcher's own --timeout and --grace before the test
# gives up on the launcher itself: it covers interpreter start-up and reaping.
_SLACK_S = 30

# Marker names of the test being run, set by tests/conftest.py (None outside
# pytest): the helpers below refuse to launch hosts for a test that does not
# carry the markers `make test-fast` selects on.
current_test_markers: frozenset[str] | None = None


def require_markers(*names: str) -> None:
  """Fails the running test unless it is marked with every one of `names`."""
  if current_test_markers is None:
    return
  missing = [name for name in names if name not in current_test_markers]
  assert not missing, (
      f"this test launches hosts: mark it (or its module) with"
      f" {', '.join(f'@pytest.mark.{m}' for m in missing)}; see the markers"
      " in pyproject.toml."
  )


def launcher_env(extra_env: Mapping[str, str] | None = None) -> dict[str, str]:
  """The launcher's environment: ours, with the repo importable."""
  env = dict(os.environ)
  path = env.get("PYTHONPATH", "")
  env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + path if path else "")
  # Hosts must not inherit a cluster the test machine happens to be in.
  env.pop("JAX_COORDINATOR_ADDRESS", None)
  env.update(extra_env or {})
  return env


def launcher_command(
    command: str | os.PathLike[str] | Sequence[str],
    *,
    num_hosts: int,
    devices_per_host: int,
    timeout: float | None = None,
    grace: float | None = None,
) -> list[str]:
  """`python -m tunix_mcjax.launch ... -- command`.

  Args:
    command: A script path (run with this test's interpreter) or a full
      argument list.
    num_hosts: --num_hosts.
    devices_per_host: --devices_per_host.
    timeout: --timeout, if given.
    grace: --grace, if given.

  Returns:
    The argument list.
  """
  if isinstance(command, (str, os.PathLike)):
    command = [sys.executable, os.fspath(command)]
  args = [
      sys.executable,
      "-m",
      "tunix_mcjax.launch",
      "--num_hosts",
      str(num_hosts),
      "--devices_per_host",
      str(devices_per_host),
  ]
  if timeout is not None:
    args += ["--timeout", str(timeout)]
  if grace is not None:
    args += ["--grace", str(grace)]
  return args + ["--", *map(str, command)]


def run_launched(
    command: str | os.PathLike[str] | Sequence[str],
    num_hosts: int,
    devices_per_host: int,
    *,
    timeout: float = 120,
    grace: float | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
  """Runs `command` under the launcher and waits for it.

  Args:
    command: A script path (run with `sys.executable`) or an argument list.
    num_hosts: Number of simulated hosts.
    devices_per_host: Fake CPU devices per host.
    timeout: The launcher's --timeout in seconds; the launcher itself is
      killed (and the test fails) if it has not returned 30 s after that.
    grace: The launcher's --grace, if given.
    extra_env: Extra variables for the launcher and hence the hosts.

  Returns:
    The finished launcher: returncode, stdout and stderr as text.
  """
  require_markers("multihost")
  args = launcher_command(
      command,
      num_hosts=num_hosts,
      devices_per_host=devices_per_host,
      timeout=timeout,
      grace=grace,
  )
  proc = zygote.popen(
      args,
      env=launcher_env(extra_env),
      cwd=REPO_ROOT,
      stdin=subprocess.DEVNULL,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
      # Its own group, so a stuck launcher can be killed with its hosts'
      # pipes' readers; the hosts die with it (death signal).
      start_new_session=True,
  )
  wait_s = timeout + (grace if grace is not None else 5) + _SLACK_S
  try:
    stdout, stderr = proc.communicate(timeout=wait_s)
  except subprocess.TimeoutExpired:
    os.killpg(proc.pid, signal.SIGKILL)
    stdout, stderr = proc.communicate()
    raise AssertionError(
        f"launcher did not return within {wait_s:g} s\n"
        f"--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}"
    ) from None
  return subprocess.CompletedProcess(args, proc.returncode, stdout, stderr)


def describe(result: subprocess.CompletedProcess[str]) -> str:
  """The launcher's exit status and output, for assertion messages."""
  return (
      f"launcher exit status {result.returncode}\n"
      f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
  )


def assert_ok(result: subprocess.CompletedProcess[str]) -> None:
  assert result.returncode == 0, describe(result)


def host_lines(output: str, host: int) -> list[str]:
  """Lines that host `host` printed, without the `[host i] ` prefix.

  Gloo's connection notices (and the empty remainder of a Python line they
  interrupted, which the launcher splits off) are not the host's own output.
  """
  prefix = f"[host {host}] "
  lines = [
      line[len(prefix) :]
      for line in output.splitlines()
      if line.startswith(prefix)
  ]
  return [l for l in lines if l and not l.startswith("[Gloo] ")]


def write_pid(directory: str | os.PathLike[str],
              pid: int | None = None) -> None:
  """Records `pid` (default: this process's) under `directory`."""
  pid = os.getpid() if pid is None else pid
  path = pathlib.Path(directory) / f"{pid}.pid"
  # Whole or not at all: a reader polls for these files while hosts start.
  tmp = path.with_suffix(".tmp")
  tmp.write_text(str(pid))
  os.replace(tmp, path)


def read_pids(directory: str | os.PathLike[str]) -> list[int]:
  """Pids recorded under `directory` by `write_pid` (or `<pid>.pid` files)."""
  return sorted(
      int(path.read_text()) for path in pathlib.Path(directory).glob("*.pid")
  )


def is_alive(pid: int) -> bool:
  """True if `pid` runs (a zombie, dead but unreaped, does not count)."""
  try:
    stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
  except FileNotFoundError:
    return False
  except OSError:
    try:
      os.kill(pid, 0)
    except ProcessLookupError:
      return False
    return True
  # The state letter follows the parenthesised command name.
  return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def assert_no_survivors(pids: Sequence[int], wait_s: float = 2.0) -> None:
  """Fails if any of `pids` still runs after `wait_s` seconds."""
  deadline = time.monotonic() + wait_s
  alive = [pid for pid in pids if is_alive(pid)]
  while alive and time.monotonic() < deadline:
    time.sleep(0.05)
    alive = [pid for pid in alive if is_alive(pid)]
  assert not alive, f"processes outlived the launcher: {alive}"


def host_results(
    result: subprocess.CompletedProcess[str],
    num_hosts: int,
    *,
    tag: str = "RESULT ",
) -> dict[int, dict]:
  """Per-host JSON records that host scripts print as `RESULT {...}` lines.

  Each record must carry its "host" index; every host must have reported.
  """
  out = {}
  for line in result.stdout.splitlines():
    if tag in line:
      # raw_decode: the record is one write, anything after it is not ours.
      rec, _ = json.JSONDecoder().raw_decode(line.split(tag, 1)[1])
      out[rec["host"]] = rec
  assert sorted(out) == list(range(num_hosts)), describe(result)
  return out


def run_on_hosts(
    program: str | os.PathLike[str],
    *args: str,
    num_hosts: int = 2,
    devices_per_host: int = 2,
    timeout: float = 240,
) -> dict[int, dict]:
  """Runs the host program `program` (a file, typically under tests/support/)
  with `args` on every host, checks the launch succeeded and returns each
  host's `RESULT` record."""
  res = run_launched([sys.executable, os.fspath(program), *args],
                     num_hosts=num_hosts, devices_per_host=devices_per_host,
                     timeout=timeout)
  assert_ok(res)
  return host_results(res, num_hosts)


def steps_done(metrics: pathlib.Path) -> int:
  """The last step a run's --metrics_out file records (0: none yet)."""
  if not metrics.is_file():
    return 0
  # A line still being written does not count.
  steps = [json.loads(line)["step"] for line in
           metrics.read_text().splitlines() if line.strip().endswith("}")]
  return max(steps, default=0)


def in_this_network_namespace(pid: int) -> bool:
  """Whether `pid` shares this process's network namespace.

  `make test` runs the main group's second shard and the fault modules
  (tests/cluster: machines in namespaces of their own, with Ray nodes and
  jobs) beside the first shard, each group in a namespace of its own
  (scripts/own_netns.py): a check for leftover processes looks only at its
  own namespace, where a leak of its own jobs would be. A process whose
  namespace cannot be read counts as this one's.
  """
  try:
    return (os.readlink(f"/proc/{pid}/ns/net")
            == os.readlink("/proc/self/ns/net"))
  except OSError:
    return True


def vllm_shared_memory() -> set[str]:
  """The /dev/shm names a vLLM engine makes: its tp workers' all-reduce
  segments (vllm_dist_*) and message queues (Python's psm_*). Other names
  there are other programs': `make test` runs other groups beside the
  vLLM group, in namespaces of their own, but /dev/shm is the machine's."""
  return {name for name in os.listdir("/dev/shm")
          if name.startswith(("vllm_dist_", "psm_"))}


def descendants(pid: int) -> list[int]:
  """Every live process below `pid` (a launcher's hosts and their workers)."""
  children = _children_by_parent()
  out, todo = [], [pid]
  while todo:
    for child in children.get(todo.pop(), []):
      out.append(child)
      todo.append(child)
  return out


def children(pid: int) -> list[int]:
  """The live direct children of `pid` (a launcher's hosts)."""
  return _children_by_parent().get(pid, [])


def _children_by_parent() -> dict[int, list[int]]:
  children: dict[int, list[int]] = {}
  for entry in pathlib.Path("/proc").iterdir():
    if not entry.name.isdigit():
      continue
    try:
      stat = (entry / "stat").read_text()
    except OSError:
      continue
    # The command name may hold spaces; the fields after it do not.
    ppid = int(stat.rsplit(")", 1)[1].split()[1])
    children.setdefault(ppid, []).append(int(entry.name))
  return children


def run_killed_when(
    cmd: Sequence[str],
    ready: Callable[[], bool],
    *,
    log_path: pathlib.Path,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout_s: float = 600,
    poll_s: float = 0.02,
) -> None:
  """Runs `cmd` and SIGKILLs the whole job as soon as `ready()` is true.

  As a preempted job dies: SIGKILL to the command's process group; the
  launcher's hosts (each in its own session) die with it through their
  parent-death signal. Returns once every process of the job is gone, so
  nothing writes to the job's directories any more. Fails the test if the
  job ends, or `timeout_s` passes, before `ready()`.

  Args:
    cmd: The job's command (the example, or the CLI's recipe script).
    ready: Polled every `poll_s` seconds while the job runs.
    log_path: The job's stdout and stderr go here (shown on failure).
    env: The job's environment (default: `launcher_env()`).
    cwd: The job's working directory.
    timeout_s: Give up (kill, fail) after this long.
    poll_s: Polling interval.
  """
  require_markers("multihost", "e2e")
  with open(log_path, "w") as log:
    proc = zygote.popen(list(cmd), env=dict(env or launcher_env()),
                        cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                        start_new_session=True)
    deadline = time.monotonic() + timeout_s
    job: list[int] = []
    try:
      while not ready():
        assert proc.poll() is None, (
            f"the job ended (status {proc.returncode}) before it was to be"
            f" killed:\n{log_path.read_text()[-6000:]}")
        assert time.monotonic() < deadline, (
            f"the job was not ready to be killed in {timeout_s:g} s")
        time.sleep(poll_s)
    finally:
      job = descendants(proc.pid)
      os.killpg(proc.pid, signal.SIGKILL)
      proc.wait()
  assert proc.returncode == -signal.SIGKILL, proc.returncode
  assert_no_survivors(job, wait_s=10)
