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

"""Tests of tunix_mcjax.da.ray_local: a local Ray head on loopback only
(and, without Ray, the launcher's placement options).

One Ray start for the module: a child process opens a RaySession, runs an
actor that imports JAX with fake CPU devices, reports, and waits; the test
inspects every listening socket of the child's process tree, then stops the
child with SIGTERM and checks that no Ray process of the session outlives it.
A second child checks the start timeout (Ray is interrupted long before it
is up). Children, not this process: SIGTERM ends the process it hits, and
Ray's processes are bound to the thread that started them.
"""

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tunix_mcjax.da import launcher
from tunix_mcjax.da import ray_local

import sockets

_REPO = pathlib.Path(__file__).resolve().parents[2]

# Local Ray heads in a child process: `session` (prints one JSON line, then
# waits for SIGTERM) and `start_timeout` (a session that cannot be up within
# its timeout).
_PROBE = _REPO / "tests" / "support" / "ray_local_probe.py"


def _python_env() -> dict[str, str]:
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join(
      filter(None, [str(_REPO), env.get("PYTHONPATH")]))
  return env


_is_loopback = sockets.is_loopback
_tree = sockets.tree
_listeners = sockets.listeners


def _marked(temp_dir: str) -> list[int]:
  """Live processes carrying the session's variable, and their descendants."""
  pids = set()
  for proc in psutil.process_iter():
    try:
      if (proc.status() != psutil.STATUS_ZOMBIE
          and proc.environ().get(ray_local.SESSION_ENV) == temp_dir):
        pids.add(proc.pid)
        pids.update(p.pid for p in proc.children(recursive=True)
                    if p.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
      continue
  return sorted(pids)


def _mentioning(text: str) -> list[int]:
  pids = []
  for proc in psutil.process_iter(["cmdline", "status"]):
    if proc.info["status"] == psutil.STATUS_ZOMBIE:
      continue
    if any(text in part for part in proc.info["cmdline"] or ()):
      pids.append(proc.pid)
  return pids


@pytest.fixture(scope="module")
def probe_run(tmp_path_factory):
  """One local Ray head in a child: its report, sockets, and what SIGTERM left."""
  tmp = tmp_path_factory.mktemp("ray_local")
  stderr_path = tmp / "stderr.txt"
  with open(stderr_path, "w") as stderr:
    child = subprocess.Popen(
        [sys.executable, str(_PROBE), "session"], stdout=subprocess.PIPE,
        stderr=stderr,
        env=_python_env(), text=True)
  report = None
  try:
    line = child.stdout.readline()
    if not line:
      child.wait(timeout=30)
      pytest.fail(f"probe exited ({child.returncode}) without a report:\n"
                  f"{stderr_path.read_text()[-4000:]}")
    report = json.loads(line)
    time.sleep(1.0)  # Lets agents that start lazily open their ports.
    procs = _tree(child.pid)
    run = {
        "report": report,
        "tree": [(p.pid, p.name()) for p in procs],
        "cmdlines": [" ".join(p.cmdline()) for p in procs if p.is_running()],
        "listeners": _listeners(procs),
        "marked_before": _marked(report["temp_dir"]),
        "found_before": ray_local.session_pids(report["temp_dir"]),
    }
    t0 = time.perf_counter()
    child.send_signal(signal.SIGTERM)
    run["returncode"] = child.wait(timeout=90)
    run["stop_s"] = time.perf_counter() - t0
    run["tree_after"] = [p.pid for p in procs if p.is_running()
                         and p.status() != psutil.STATUS_ZOMBIE]
    run["marked_after"] = _marked(report["temp_dir"])
    run["found_after"] = ray_local.session_pids(report["temp_dir"])
    run["mentioning_after"] = _mentioning(report["temp_dir"])
    run["stderr"] = stderr_path.read_text()
    print(f"ray_local: start {report['start_s']:.1f} s, first actor"
          f" {report['actor_s']:.1f} s, SIGTERM to exit {run['stop_s']:.1f} s;"
          f" listening: {run['listeners']}")
    return run
  finally:
    if child.poll() is None:
      child.kill()
      child.wait()
    if report is not None:
      # Kept by the session: it ended by SIGTERM, an exception.
      shutil.rmtree(report["temp_dir"], ignore_errors=True)


@pytest.mark.multihost
def test_every_listening_socket_is_loopback(probe_run):
  listeners = probe_run["listeners"]
  names = {name for _, name, _, _ in listeners}
  # The check saw Ray's servers, not an empty list.
  assert {"gcs_server", "raylet"} <= names, listeners
  assert probe_run["report"]["actor"]["pid"] in {
      pid for pid, _, _, _ in listeners}, listeners
  outside = [l for l in listeners if not _is_loopback(l[2])]
  assert not outside, f"listening beyond loopback: {outside}"


@pytest.mark.multihost
def test_every_ray_process_is_found_by_the_session_variable(probe_run):
  tree = {pid for pid, _ in probe_run["tree"]}
  child = probe_run["tree"][0][0]
  # Everything in the tree but the driver (it set the variable after exec),
  # by the module's own search and by psutil's.
  names = dict(probe_run["tree"])
  assert set(probe_run["found_before"]) == tree - {child}, names
  assert set(probe_run["marked_before"]) == tree - {child}, names


@pytest.mark.multihost
def test_no_idle_worker_is_prestarted(probe_run):
  # Every actor has a runtime env of its own (its devices), which no worker
  # Ray prestarts has: the session turns prestarting off. The check sees
  # Ray's processes (its agents, the actor's worker), so not an empty list.
  workers = [c for c in probe_run["cmdlines"] if c.startswith("ray::")]
  assert workers and not [c for c in workers if c.startswith("ray::IDLE")], (
      probe_run["cmdlines"])


@pytest.mark.multihost
def test_actor_gets_its_env_vars(probe_run):
  actor = probe_run["report"]["actor"]
  assert actor["device_count"] == 2
  assert actor["platform"] == "cpu"
  assert probe_run["report"]["namespace"] == ray_local.RaySessionConfig(
  ).namespace


@pytest.mark.multihost
def test_sigterm_stops_every_ray_process(probe_run):
  assert probe_run["returncode"] != 0  # SIGTERM ends it with an error.
  assert probe_run["tree_after"] == []
  assert probe_run["marked_after"] == []
  assert probe_run["found_after"] == []
  assert probe_run["mentioning_after"] == []
  # Ray's C++ handler prints the signal's stack first, then hands it on to
  # Ray's Python one (sys.exit(15)), which closes the session.
  ended = (probe_run["returncode"], probe_run["stderr"][-3000:])
  assert "Ray stopped in" in probe_run["stderr"], ended
  assert "killing them" not in probe_run["stderr"], ended  # Stopped cleanly.


@pytest.mark.multihost
def test_start_timeout_names_what_to_check():
  result = subprocess.run(
      [sys.executable, str(_PROBE), "start_timeout"], capture_output=True,
      text=True,
      env=_python_env(), timeout=120)
  assert result.returncode == 0, result.stdout + result.stderr[-4000:]
  lines = dict(l.split(" ", 1) for l in result.stdout.splitlines()
               if l.split(" ", 1)[0] in ("ELAPSED", "TEMP_DIR", "MESSAGE"))
  assert float(lines["ELAPSED"]) < 30, result.stdout
  assert "did not come up within 0.3 s" in lines["MESSAGE"]
  assert "gcs_server.out" in lines["MESSAGE"]
  assert lines["TEMP_DIR"] in lines["MESSAGE"]
  assert _marked(lines["TEMP_DIR"]) == []
  assert _mentioning(lines["TEMP_DIR"]) == []
  shutil.rmtree(lines["TEMP_DIR"], ignore_errors=True)  # Kept for its logs.


# --- configuration (no Ray started) -------------------------------------------


def test_defaults_start_a_local_head():
  config = ray_local.RaySessionConfig()
  assert config.local and config.namespace == "tunix_mcjax_da"


@pytest.mark.parametrize("kwargs, match", [
    ({"address": "local"}, "address=None"),
    ({"address": ""}, "cluster address"),
    ({"address": "auto", "num_cpus": 2}, "local head only"),
    ({"address": "ray://h:10001", "temp_root": "/tmp/r"}, "local head only"),
    ({"num_cpus": 0}, "num_cpus"),
    ({"num_cpus": True}, "num_cpus"),
    ({"object_store_memory": 1024}, "75"),
    ({"start_timeout_s": 0}, "start_timeout_s"),
    ({"stop_timeout_s": -1.0}, "stop_timeout_s"),
    ({"namespace": ""}, "namespace"),
    ({"temp_root": "tmp/ray"}, "absolute"),
    ({"temp_root": "/tmp/" + "x" * 40}, "107 bytes"),
    ({"env_vars": {"A": 1}}, "str to str"),
    ({"log_to_driver": "yes"}, "log_to_driver"),
])
def test_config_refuses(kwargs, match):
  with pytest.raises(ValueError, match=match):
    ray_local.RaySessionConfig(**kwargs)


def test_a_start_deadline_swallowed_once_is_raised_again():
  # Where the alarm lands in code that ignores exceptions (logging's at-fork
  # hook while ray.init starts a process: seen once in a suite run), the
  # deadline comes again instead of being lost.
  session = ray_local.RaySession(ray_local.RaySessionConfig(
      address="ray://head:10001", start_timeout_s=0.2))
  swallowed = []

  class _Ray:

    @staticmethod
    def init(**kwargs):
      del kwargs
      try:
        time.sleep(5)
      except ray_local._Deadline:  # pylint: disable=protected-access
        swallowed.append(True)
      time.sleep(5)

  t0 = time.monotonic()
  with pytest.raises(ray_local._Deadline):  # pylint: disable=protected-access
    session._init_with_deadline(_Ray, {})  # pylint: disable=protected-access
  assert swallowed and time.monotonic() - t0 < 2


def test_cluster_address_is_accepted():
  config = ray_local.RaySessionConfig(address="ray://head:10001")
  assert not config.local


def test_close_before_start_is_a_no_op():
  session = ray_local.RaySession()
  session.close()
  assert session.stop_s is None


def test_session_pids_finds_a_marked_process(tmp_path):
  marker = str(tmp_path)
  env = dict(os.environ, **{ray_local.SESSION_ENV: marker})
  proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                          env=env)
  try:
    assert ray_local.session_pids(marker) == [proc.pid]
    assert ray_local.session_pids(marker + "x") == []
  finally:
    proc.kill()
    proc.wait()
  assert ray_local.session_pids(marker) == []


def test_loopback_cluster_addresses_are_recognized(monkeypatch):
  # A cluster reached on loopback is connected to on loopback.
  assert ray_local._on_loopback("127.0.0.1:6379")  # pylint: disable=protected-access
  assert ray_local._on_loopback("ray://localhost:10001")  # pylint: disable=protected-access
  assert not ray_local._on_loopback("10.0.0.2:6379")  # pylint: disable=protected-access
  monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6380")
  assert ray_local._on_loopback("auto")  # pylint: disable=protected-access
  monkeypatch.delenv("RAY_ADDRESS")
  assert not ray_local._on_loopback("auto")  # pylint: disable=protected-access


# --- placement (no Ray started) -----------------------------------------------


def test_placement_takes_one_bundle_per_actor():
  placement = launcher.Placement(
      bundle=launcher.parse_bundle(["CPU=8", "GPU=1", "TPU=4", "memory=1e9"]))
  assert placement.strategy == "SPREAD"
  assert placement.actor_resources() == {
      "num_cpus": 8, "num_gpus": 1, "memory": 1000000000,
      "resources": {"TPU": 4}}
  assert placement.local_cpus(3) == 24
  # The default: one CPU per host; a local head offers one per host.
  assert launcher.Placement().actor_resources() == {"num_cpus": 1}
  assert launcher.Placement().local_cpus(3) == 3


@pytest.mark.parametrize("kwargs, match", [
    ({"strategy": "spread"}, "strategy"),
    ({"bundle": {}}, "at least one"),
    ({"bundle": {"CPU": 0}}, "at least one"),
    ({"bundle": {"CPU": -1}}, ">= 0"),
    ({"timeout_s": 0}, "timeout_s"),
])
def test_placement_refuses(kwargs, match):
  with pytest.raises(ValueError, match=match):
    launcher.Placement(**kwargs)


@pytest.mark.parametrize("items", [["CPU"], ["=1"], ["CPU=x"]])
def test_parse_bundle_refuses(items):
  with pytest.raises(ValueError, match="NAME=AMOUNT"):
    launcher.parse_bundle(items)
