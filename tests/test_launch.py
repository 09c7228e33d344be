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

"""Tests of the local launcher with real multi-process JAX on CPU."""

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import textwrap
import time

import launch_utils
import pytest

from tunix_mcjax import launch
from tunix_mcjax import platforms
from tunix_mcjax import runtime

_SUPPORT = pathlib.Path(__file__).resolve().parent / "support"
# The hosts' programs: `launch_host.py NAME ...` (see its docstring).
_HOST = _SUPPORT / "launch_host.py"
# Programs that relaunch themselves as local hosts (new interpreters, or
# forked with host_main).
_RELAUNCHING = _SUPPORT / "relaunching.py"
_FORKING = _SUPPORT / "forking_hosts.py"
# Fails if importing the modules named imports any of the packages named.
_LIGHT_IMPORTS = _SUPPORT / "light_imports.py"


def _host_command(tmp_path: pathlib.Path, name: str) -> list[str]:
  """The command of host program `name`; its hosts record their pids in
  tmp_path/pids first."""
  pid_dir = tmp_path / "pids"
  pid_dir.mkdir(exist_ok=True)
  return [sys.executable, str(_HOST), name, str(pid_dir)]


@pytest.mark.multihost
@pytest.mark.parametrize("num_hosts,devices_per_host", [(2, 2), (3, 2)])
def test_healthy_job(tmp_path, num_hosts, devices_per_host):
  command = _host_command(tmp_path, "healthy")
  result = launch_utils.run_launched(
      command, num_hosts, devices_per_host, timeout=90
  )
  launch_utils.assert_ok(result)
  total = num_hosts * devices_per_host
  for host in range(num_hosts):
    # A piece of gloo's own output ("[Gloo] Rank ") may precede the report
    # on its line (seen once): the report starts at "REPORT ".
    reports = [
        line[line.index("REPORT ") + len("REPORT "):]
        for line in launch_utils.host_lines(result.stdout, host)
        if "REPORT " in line
    ]
    assert len(reports) == 1, launch_utils.describe(result)
    report, _ = json.JSONDecoder().raw_decode(reports[0])
    assert report["info"] == [
        host,
        num_hosts,
        devices_per_host,
        total,
        "launcher",
    ]
    assert report["device_count"] == total
    assert report["gathered"] == list(range(num_hosts))
    assert launch_utils.host_lines(result.stderr, host) == [
        f"to stderr from {host}"
    ]
    if host == 0:
      # The coordinator must listen on loopback only, never on all interfaces.
      # (JAX may use an IPv6 socket bound to ::ffff:127.0.0.1, shown here as
      # 127.0.0.1; without a bind address it would be :: or 0.0.0.0.)
      assert report["listen"], report
      assert set(report["listen"]) == {"127.0.0.1"}, report
  launch_utils.assert_no_survivors(launch_utils.read_pids(tmp_path / "pids"))


@pytest.mark.multihost
@pytest.mark.parametrize(
    "mode,message,status",
    [
        ("exit", "host 1 exited with status 3", 3),
        ("sigkill", "host 1 was killed by SIGKILL", 128 + signal.SIGKILL),
    ],
)
def test_failed_host_stops_the_job(tmp_path, mode, message, status):
  command = _host_command(tmp_path, "failing") + [mode]
  start = time.monotonic()
  result = launch_utils.run_launched(command, 2, 2, timeout=120, grace=2)
  elapsed = time.monotonic() - start
  assert result.returncode == status, launch_utils.describe(result)
  assert (
      f"error: job failed: {message}" in result.stderr
  ), launch_utils.describe(result)
  # Host 0 ignored SIGTERM, so it took the SIGKILL escalation.
  assert "host 0 was killed by SIGKILL" in result.stderr
  assert elapsed < 30, f"took {elapsed:.1f} s"
  assert launch_utils.host_lines(result.stdout, 1) == ["failing now"]
  pids = launch_utils.read_pids(tmp_path / "pids")
  assert len(pids) == 3, pids  # two hosts and host 0's grandchild
  launch_utils.assert_no_survivors(pids)


@pytest.mark.multihost
def test_collective_hang_is_stopped_by_timeout(tmp_path):
  command = _host_command(tmp_path, "hang")
  start = time.monotonic()
  result = launch_utils.run_launched(command, 2, 1, timeout=12, grace=2)
  elapsed = time.monotonic() - start
  assert result.returncode == launch.EXIT_TIMEOUT, launch_utils.describe(result)
  assert "timeout: host(s) 0, 1 still running after 12 s;" in result.stderr
  assert (
      "still running after 12 s; a collective joined by only some hosts"
      " hangs forever"
      in result.stderr
  )
  # Both hosts really got past start-up: host 0 is stuck in the collective.
  assert launch_utils.host_lines(result.stdout, 0) == ["entering collective"]
  assert launch_utils.host_lines(result.stdout, 1) == ["sleeping"]
  assert elapsed < 12 + 2 + 10, f"took {elapsed:.1f} s"
  pids = launch_utils.read_pids(tmp_path / "pids")
  assert len(pids) == 2, pids
  launch_utils.assert_no_survivors(pids)


def _start_sleepers(tmp_path: pathlib.Path, num_hosts: int):
  """Starts a launcher whose hosts sleep; returns it once all hosts run."""
  command = _host_command(tmp_path, "sleep")
  proc = subprocess.Popen(
      launch_utils.launcher_command(
          command, num_hosts=num_hosts, devices_per_host=1, grace=2
      ),
      env=launch_utils.launcher_env(),
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
      start_new_session=True,
  )
  deadline = time.monotonic() + 30
  while len(launch_utils.read_pids(tmp_path / "pids")) < num_hosts:
    if time.monotonic() > deadline or proc.poll() is not None:
      os.killpg(proc.pid, signal.SIGKILL)
      pytest.fail(f"hosts did not start: {proc.communicate()}")
    time.sleep(0.05)
  return proc


@pytest.mark.multihost
@pytest.mark.parametrize(
    "sig,status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)]
)
def test_signal_to_launcher_stops_hosts(tmp_path, sig, status):
  proc = _start_sleepers(tmp_path, num_hosts=2)
  proc.send_signal(sig)
  _, stderr = proc.communicate(timeout=30)
  assert proc.returncode == status, stderr
  assert f"received {sig.name}; stopping all hosts" in stderr
  launch_utils.assert_no_survivors(launch_utils.read_pids(tmp_path / "pids"))


@pytest.mark.multihost
def test_hosts_die_with_a_killed_launcher(tmp_path):
  proc = _start_sleepers(tmp_path, num_hosts=2)
  proc.kill()  # SIGKILL: the launcher gets no chance to clean up.
  proc.communicate(timeout=30)
  launch_utils.assert_no_survivors(
      launch_utils.read_pids(tmp_path / "pids"), wait_s=5
  )


def _marker_command(tmp_path: pathlib.Path) -> tuple[list[str], pathlib.Path]:
  """A command that leaves a marker file if it ever runs."""
  marker = tmp_path / "started"
  return [sys.executable, str(_HOST), "marker", str(marker)], marker


@pytest.mark.parametrize(
    "options,message",
    [
        (
            ["--num_hosts", "0", "--devices_per_host", "2"],
            "num_hosts must be an integer >= 1",
        ),
        (
            ["--num_hosts", "2", "--devices_per_host", "0"],
            "devices_per_host must be an integer >= 1",
        ),
        (
            ["--num_hosts", "2", "--devices_per_host", "1", "--timeout", "0"],
            "timeout must be > 0",
        ),
    ],
)
def test_bad_numbers_fail_before_start(tmp_path, options, message):
  command, marker = _marker_command(tmp_path)
  result = _run_cli([*options, "--", *command])
  assert result.returncode == launch.EXIT_USAGE, launch_utils.describe(result)
  assert message in result.stderr
  assert not marker.exists()


def _run_cli(args: list[str]) -> subprocess.CompletedProcess[str]:
  return subprocess.run(
      [sys.executable, "-m", "tunix_mcjax.launch", *args],
      env=launch_utils.launcher_env(),
      capture_output=True,
      text=True,
      timeout=60,
      check=False,
  )


@pytest.mark.parametrize(
    "command,message",
    [
        (["no-such-command-tunix-mcjax"], "command not found"),
        (["/no/such/dir/python3"], "command not found"),
        ([], "no command given"),
    ],
)
def test_bad_command_fails_before_start(command, message):
  result = _run_cli(
      ["--num_hosts", "2", "--devices_per_host", "1", "--", *command]
  )
  assert result.returncode == launch.EXIT_USAGE, launch_utils.describe(result)
  assert message in result.stderr


def test_missing_separator_is_a_usage_error():
  result = _run_cli(
      ["--num_hosts", "2", "--devices_per_host", "1", sys.executable, "x.py"]
  )
  assert result.returncode == launch.EXIT_USAGE
  assert "put the command after '--'" in result.stderr


def test_old_python_fails_before_start(tmp_path):
  marker = tmp_path / "started"
  fake = tmp_path / "python"
  # Answers the version probe like Python 3.8; anything else would start a
  # host, which the marker would reveal.
  fake.write_text(textwrap.dedent(f"""\
      #!/bin/sh
      if [ "$1" = "-c" ]; then echo "(3, 8)"; exit 0; fi
      touch {marker}
      """))
  fake.chmod(0o755)
  result = _run_cli([
      "--num_hosts",
      "2",
      "--devices_per_host",
      "1",
      "--",
      str(fake),
      "train.py",
  ])
  assert result.returncode == launch.EXIT_USAGE, launch_utils.describe(result)
  assert "is Python 3.8, but tunix_mcjax needs Python >= 3.11" in result.stderr
  assert not marker.exists()


def test_real_old_python_fails_before_start():
  old = pathlib.Path("/root/.pyenv/versions/3.8.18/bin/python")
  if not os.access(old, os.X_OK):
    pytest.skip(f"{old} is not installed")
  result = _run_cli([
      "--num_hosts",
      "1",
      "--devices_per_host",
      "1",
      "--",
      str(old),
      "-c",
      "pass",
  ])
  assert result.returncode == launch.EXIT_USAGE, launch_utils.describe(result)
  assert "is Python 3.8" in result.stderr


def test_launch_api_rejects_bad_input_without_starting():
  with pytest.raises(launch.LaunchError, match="num_hosts must be"):
    launch.launch(
        [sys.executable, "-c", "pass"], num_hosts=0, devices_per_host=1
    )


def test_host_env_replaces_device_count_flag():
  env = launch.host_env(
      {
          "XLA_FLAGS": "--xla_foo=1 --xla_force_host_platform_device_count=8",
          "KEEP": "yes",
      },
      coordinator="127.0.0.1:1234",
      num_hosts=3,
      host_id=2,
      devices_per_host=4,
  )
  assert env["XLA_FLAGS"] == (
      "--xla_foo=1 --xla_force_host_platform_device_count=4"
  )
  assert env[runtime.ENV_COORDINATOR] == "127.0.0.1:1234"
  assert env[runtime.ENV_NUM_HOSTS] == "3"
  assert env[runtime.ENV_HOST_ID] == "2"
  assert env[runtime.ENV_DEVICES_PER_HOST] == "4"
  assert env["JAX_PLATFORMS"] == "cpu"
  assert env["PYTHONUNBUFFERED"] == "1"
  assert env["KEEP"] == "yes"


def test_host_env_of_gpu_processes_forces_no_platform():
  plan = platforms.plan_local_hosts(platforms.Machine(gpus=4), num_hosts=2,
                                    devices_per_host=None)
  env = launch.host_env(
      # What an enclosing simulated job would have left.
      {"XLA_FLAGS": "--xla_foo=1", runtime.ENV_DEVICES_PER_HOST: "4"},
      coordinator="127.0.0.1:1234", num_hosts=2, host_id=1,
      devices_per_host=None, plan=plan)
  assert "JAX_PLATFORMS" not in env
  assert runtime.ENV_DEVICES_PER_HOST not in env
  assert env["XLA_FLAGS"] == "--xla_foo=1"  # No fake device count.
  assert env[platforms.ENV_LOCAL_DEVICE_IDS] == "2,3"
  assert runtime.RuntimeConfig.from_env(env).local_device_ids == (2, 3)


@pytest.mark.multihost
def test_launch_gives_each_gpu_process_its_devices(tmp_path, capsys,
                                                  monkeypatch):
  """A real launch of a GPU plan (the hosts print what they got; no JAX, so
  it runs on a machine without GPUs): the start line, new interpreters, and
  each process's environment."""
  monkeypatch.delenv("JAX_PLATFORMS", raising=False)  # The user's, if set.
  plan = platforms.plan_local_hosts(platforms.Machine(gpus=4), num_hosts=2,
                                    devices_per_host=None)
  status = launch.launch([sys.executable, str(_HOST), "env", str(tmp_path)],
                         plan=plan,
                         timeout_s=60, host_main=lambda: 0)
  captured = capsys.readouterr()
  assert status == 0, captured
  assert "[launch] 2 processes x 2 GPUs (4 GPUs found), coordinator" in (
      captured.err)
  assert "(new interpreters: hosts on GPUs)" in captured.err
  got = [json.loads((tmp_path / str(h)).read_text()) for h in range(2)]
  assert got == [
      {"JAX_PLATFORMS": None, "TUNIX_MCJAX_LOCAL_DEVICE_IDS": ids,
       "TUNIX_MCJAX_DEVICES_PER_HOST": None, "TUNIX_MCJAX_HOST_ID": str(h)}
      for h, ids in enumerate(("0,1", "2,3"))]


def test_free_port_is_bindable_on_loopback():
  port = launch.free_port()
  with socket.socket() as sock:
    sock.bind(("127.0.0.1", port))


@pytest.mark.multihost
def test_launch_api_forwards_output_and_status(capsys):
  status = launch.launch(
      [sys.executable, str(_HOST), "hello"],
      num_hosts=2,
      devices_per_host=1,
      timeout_s=60,
      env={"PYTHONPATH": str(launch_utils.REPO_ROOT)},
  )
  captured = capsys.readouterr()
  assert status == 5, captured
  assert "[host 0] hello 0\n" in captured.out
  assert "[host 1] hello 1\n" in captured.out
  assert "error: job failed: host 1 exited with status 5" in captured.err


def test_importing_the_launcher_imports_no_jax():
  subprocess.run([sys.executable, str(_LIGHT_IMPORTS), "jax",
                  "tunix_mcjax.launch"], check=True,
                 env=launch_utils.launcher_env())


@pytest.mark.multihost
@pytest.mark.parametrize("as_module", [False, True])
def test_relaunch_as_local_hosts(tmp_path, as_module):
  """A script or `-m` module re-runs itself as local hosts, same arguments."""
  out = tmp_path / "out.txt"
  out.write_text("from an earlier run\n")  # Removed first: one run per file.
  program = (["-m", "relaunching"] if as_module
             else [str(_RELAUNCHING)])
  env = launch_utils.launcher_env(
      {"PYTHONPATH": os.pathsep.join([str(_SUPPORT),
                                      str(launch_utils.REPO_ROOT)])})
  result = subprocess.run(
      [sys.executable, *program, str(out)], env=env, cwd=tmp_path,
      capture_output=True, text=True, timeout=120)
  assert result.returncode == 0, launch_utils.describe(result)
  assert ("[relaunching] on this machine: demo, 2 simulated hosts x 3 CPU"
          " devices" in result.stdout)
  spec = "relaunching" if as_module else None  # How each host was run.
  lines = sorted(out.read_text().splitlines())
  assert lines == [f"{h} 3 {[str(out)]} {spec}" for h in (0, 1)]


@pytest.mark.multihost
@pytest.mark.parametrize("mode,status", [("ok", 0), ("fail", 1), ("exit", 3)])
def test_hosts_forked_from_the_launching_process(tmp_path, mode, status):
  """With `host_main`, hosts are forked children that form a real JAX job:
  their own sessions, the job's variables, a working collective, exit
  statuses and atexit handlers as in a new interpreter."""
  out = tmp_path / "out.txt"
  result = subprocess.run(
      [sys.executable, str(_FORKING), str(out), mode],
      env=launch_utils.launcher_env(), cwd=tmp_path, capture_output=True,
      text=True, timeout=150)
  assert result.returncode == status, launch_utils.describe(result)
  assert "(forked from this process)" in result.stderr, result.stderr
  launcher = json.loads(result.stdout.splitlines()[0])["launcher"]
  lines = out.read_text().splitlines()
  hosts = [json.loads(l) for l in lines if l.startswith("{")]
  assert sorted(h["host"] for h in hosts) == [0, 1], lines
  for h in hosts:
    assert h["ppid"] == launcher and h["pid"] != launcher, h
    assert h["sid"] == h["pid"], h  # Its own session, as Popen's hosts.
    assert h["devices"] == 2 and h["platform"] == "cpu", h
    assert h["gathered"] == [0, 1], h
  assert "[host 1] line from host 1" in result.stdout
  if mode == "fail":
    assert "[host 1] RuntimeError: host 1 gives up" in result.stderr
    assert "host 1 exited with status 1" in result.stderr
  if mode == "exit":
    assert "host 1 exited with status 3" in result.stderr
  if mode == "ok":
    assert sorted(l for l in lines if l.startswith("atexit")) == [
        "atexit 0", "atexit 1"]



def test_exit_host_is_sys_exit_outside_a_multi_process_job():
  # In a job (jax.distributed initialized) it is os._exit, which skips
  # JAX's shutdown barrier: tests/test_rewards_pool.py runs such a job.
  with pytest.raises(SystemExit) as e:
    launch.exit_host(2)
  assert e.value.code == 2
