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

"""The suite's fork server (tests/support/zygote.py), against `subprocess`:
a program it forks sees what a new interpreter would, and ends alike."""

import contextlib
import os
import pathlib
import signal
import subprocess
import sys
import time

import psutil
import pytest

import launch_utils
import zygote

# Prints what a program can see of how it was started, then exits with the
# status its first argument names ("message": sys.exit with a string).
_PROGRAM = """\
import json, os, sys
preloaded = "tunix.rl.rl_cluster" in sys.modules
import tempfile
json.dump({"argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0],
           "name": __name__, "marker": os.environ.get("ZYGOTE_TEST"),
           "tmp": tempfile.gettempdir(), "stdin": sys.stdin.read()},
          sys.stdout)
print()
print("to stderr", file=sys.stderr)
print("preloaded" if preloaded else "new interpreter", file=sys.stderr)
code = sys.argv[1]
sys.exit(code if code == "message" else int(code))
"""


@pytest.fixture(name="program")
def program_fixture(tmp_path):
  path = tmp_path / "scripts" / "show.py"
  path.parent.mkdir()
  path.write_text(_PROGRAM)
  (tmp_path / "cwd").mkdir()
  (tmp_path / "tmp").mkdir()
  return path


def _env(tmp_path: pathlib.Path, **extra: str) -> dict[str, str]:
  return launch_utils.launcher_env(
      {"ZYGOTE_TEST": "yes", "TMPDIR": str(tmp_path / "tmp"), **extra})


def _both(cmd, **kwargs):
  """The same command through the zygote and through subprocess."""
  return (zygote.run(cmd, **kwargs), subprocess.run(cmd, **kwargs))


@pytest.mark.parametrize("code", ["0", "3", "message"])
def test_a_forked_program_sees_what_a_new_interpreter_sees(program, tmp_path,
                                                           code):
  """argv, cwd, sys.path[0], __main__, environment, temp dir, stdin,
  stdout, stderr and exit status; only the preloaded modules differ."""
  forked, new = _both([sys.executable, str(program), code],
                      env=_env(tmp_path), cwd=tmp_path / "cwd",
                      input="from stdin", capture_output=True, text=True,
                      timeout=120)
  assert forked.returncode == new.returncode == (
      1 if code == "message" else int(code))
  assert forked.stdout == new.stdout
  assert '"tmp": "%s"' % (tmp_path / "tmp") in forked.stdout
  assert forked.stderr.replace("preloaded", "X") == new.stderr.replace(
      "new interpreter", "X")
  assert forked.stderr.endswith("preloaded\n" + (
      "message\n" if code == "message" else "")), forked.stderr


def test_a_module_runs_as_with_dash_m(tmp_path):
  """`python -m module`: argv[0] is the module's file, the package
  imports, cwd leads sys.path."""
  cmd = [sys.executable, "-m", "tunix_mcjax.launch", "--help"]
  forked, new = _both(cmd, env=_env(tmp_path), cwd=tmp_path,
                      capture_output=True, text=True, timeout=120)
  assert forked.returncode == new.returncode == 0
  assert forked.stdout == new.stdout and "--num_hosts" in forked.stdout


def test_the_program_is_a_fork_with_its_own_pid(program, tmp_path):
  """Not a child of the test: a child of the server, whose pid the test
  gets (so its descendants are the job's)."""
  sleeper = tmp_path / "sleep.py"
  sleeper.write_text("import os, time\nprint(os.getpid(), flush=True)\n"
                     "time.sleep(60)\n")
  proc = zygote.popen([sys.executable, str(sleeper)], env=_env(tmp_path),
                      stdout=subprocess.PIPE, text=True,
                      start_new_session=True)
  try:
    assert isinstance(proc, zygote.Popen)
    assert int(proc.stdout.readline()) == proc.pid
    assert psutil.Process(proc.pid).ppid() != os.getpid()
    assert os.getpgid(proc.pid) == proc.pid  # its own session
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
  finally:
    proc.kill()
    proc.stdout.close()


def test_a_timeout_kills_the_program_and_its_children_and_shows_its_output(
    tmp_path):
  # The child holds the pipes too: killing the program alone would leave
  # the run waiting for it, and the output would be lost with the error.
  sleeper = tmp_path / "sleep.py"
  sleeper.write_text(
      "import os, subprocess, sys, time\n"
      "child = subprocess.Popen([sys.executable, '-c',"
      " 'import time; time.sleep(60)'])\n"
      "print(os.getpid(), child.pid, flush=True)\n"
      "print('last words', file=sys.stderr, flush=True)\n"
      "time.sleep(60)\n")
  start = time.monotonic()
  with pytest.raises(zygote.TimedOut) as raised:
    zygote.run([sys.executable, str(sleeper)], env=_env(tmp_path),
               capture_output=True, text=True, timeout=3)
  assert time.monotonic() - start < 30
  assert isinstance(raised.value, subprocess.TimeoutExpired)
  assert "last words" in str(raised.value), str(raised.value)
  pids = [int(pid) for pid in raised.value.output.split()]
  assert len(pids) == 2, raised.value.output
  launch_utils.assert_no_survivors(pids, wait_s=10)


def test_a_client_that_goes_away_takes_its_program_along(tmp_path):
  """A test process killed mid-run leaves no program behind: the server
  kills what a closed connection asked for."""
  client = tmp_path / "client.py"
  sleeper = tmp_path / "sleep.py"
  sleeper.write_text("import time\ntime.sleep(600)\n")
  client.write_text(
      "import sys\n"
      f"sys.path.insert(0, {str(pathlib.Path(zygote.__file__).parent)!r})\n"
      "import zygote\n"
      f"p = zygote.popen([sys.executable, {str(sleeper)!r}])\n"
      "print(p.pid, flush=True)\n"
      "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
  try:
    # The program has the client's stdout: this waits until it ends too.
    done = subprocess.run([sys.executable, str(client)], env=_env(tmp_path),
                          capture_output=True, text=True, timeout=60)
  except subprocess.TimeoutExpired as e:
    out = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout
    with contextlib.suppress(ProcessLookupError, ValueError):
      os.kill(int(out), signal.SIGKILL)
    pytest.fail(f"the program {out!r} outlived its killed client")
  assert done.returncode == -signal.SIGKILL, done.stderr
  launch_utils.assert_no_survivors([int(done.stdout)], wait_s=10)


def test_what_is_not_forked(tmp_path, monkeypatch):
  """Other programs and options it lacks go to subprocess, and so does
  everything under the opt-out."""
  script = tmp_path / "s.py"
  script.write_text("pass\n")
  for cmd, kwargs in ((["true"], {}), ([sys.executable, "-c", "pass"], {}),
                      ([sys.executable, str(script)], {"close_fds": False})):
    proc = zygote.popen(cmd, **kwargs)
    assert isinstance(proc, subprocess.Popen), cmd
    assert proc.wait() == 0
  monkeypatch.setenv(zygote.ENV_ZYGOTE, "0")
  proc = zygote.popen([sys.executable, str(script)])
  assert isinstance(proc, subprocess.Popen)
  assert proc.wait() == 0


def test_an_import_time_variable_gets_a_server_of_its_own(tmp_path):
  """JAX reads JAX_ENABLE_X64 at import: a request that sets it must not
  get a fork of a server that imported JAX without it."""
  script = tmp_path / "x64.py"
  script.write_text("import jax\nprint(jax.config.jax_enable_x64)\n")
  for value, expected in (("1", "True"), ("0", "False")):
    done = zygote.run([sys.executable, str(script)],
                      env=_env(tmp_path, JAX_ENABLE_X64=value),
                      capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == expected, done.stderr
  assert zygote.import_key(_env(tmp_path)) == zygote.import_key(
      _env(tmp_path, JAX_PLATFORMS="cpu", XLA_FLAGS="--x", SOMETHING="1"))


def test_a_server_whose_client_died_removes_its_files(tmp_path):
  """The test process killed: its server ends and leaves no temp files."""
  client = tmp_path / "client.py"
  script = tmp_path / "s.py"
  script.write_text("pass\n")
  client.write_text(
      "import os, signal, sys\n"
      f"sys.path.insert(0, {str(pathlib.Path(zygote.__file__).parent)!r})\n"
      "import zygote\n"
      f"assert zygote.popen([sys.executable, {str(script)!r}]).wait() == 0\n"
      "server = zygote._servers[zygote.import_key(os.environ)]\n"
      "print(server.process.pid, server.path, flush=True)\n"
      "os.kill(os.getpid(), signal.SIGKILL)\n")
  done = subprocess.run([sys.executable, str(client)],
                        env=_env(tmp_path), capture_output=True, text=True,
                        timeout=120)
  assert done.returncode == -signal.SIGKILL, done.stderr
  pid, path = done.stdout.split()
  launch_utils.assert_no_survivors([int(pid)], wait_s=10)
  assert not os.path.exists(os.path.dirname(path))
