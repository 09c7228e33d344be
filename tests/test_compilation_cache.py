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

"""tunix_mcjax.compilation_cache and --compilation_cache_dir.

The cache is JAX's own; what is tested here is that our switch turns it on
for a job and every process it starts, that programs really come back from
it in a second process (for multi-process programs only on process 0 on
CPU: see the test), and that a bad directory never stops a job.
"""

import fcntl
import os
import pathlib
import shutil
import subprocess
import sys
import threading
import time

import pytest

from tunix_mcjax import compilation_cache

import example_runs
import launch_utils
import suite_stats

# A program run twice in fresh interpreters: prints whether the cache is on,
# the result and the persistent-cache hits JAX reported.
_PROGRAM = (pathlib.Path(__file__).resolve().parent / "support" /
            "cache_configure.py")


def _run(*args, env_cache: str | None = None):
  env = {k: v for k, v in os.environ.items()
         if k not in compilation_cache.ENV_VARS}
  env["JAX_PLATFORMS"] = "cpu"
  if env_cache is not None:
    env.update(compilation_cache.environment(env_cache))
  proc = subprocess.run([sys.executable, str(_PROGRAM), *map(str, args)],
                        env=env, capture_output=True, text=True, timeout=120,
                        cwd=launch_utils.REPO_ROOT)
  assert proc.returncode == 0, proc.stderr[-3000:]
  on, value, hits = proc.stdout.split()
  return on == "True", float(value), int(hits), proc.stderr


def test_off_unless_a_directory_is_given():
  environ = {}
  assert not compilation_cache.configure(None, environ=environ)
  assert not compilation_cache.configure("", environ=environ)
  assert environ == {}


def test_environment_names_every_jax_option():
  env = compilation_cache.environment("/some/dir")
  assert env == {"JAX_COMPILATION_CACHE_DIR": "/some/dir",
                 "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                 "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}
  assert compilation_cache.inherited({**env, "OTHER": "1"}) == env
  assert compilation_cache.inherited({"OTHER": "1"}) == {}


def test_an_unusable_directory_is_a_warning_naming_it(tmp_path, capsys):
  not_a_dir = tmp_path / "a_file"
  not_a_dir.write_text("")
  environ = {}
  bad = str(not_a_dir / "cache")
  assert compilation_cache.problem(bad) is not None
  assert not compilation_cache.configure(bad, environ=environ, program="job")
  err = capsys.readouterr().err
  assert err.startswith(f"job: warning: compilation cache directory {bad} is"
                        " not usable"), err
  assert "compiling without a cache" in err
  assert environ == {}  # Children do not get it either.
  assert compilation_cache.problem(str(tmp_path / "new" / "dir")) is None
  assert (tmp_path / "new" / "dir").is_dir()
  assert not list((tmp_path / "new" / "dir").iterdir())  # Probe removed.


def test_a_second_process_loads_the_program_from_the_cache(tmp_path):
  cache = tmp_path / "cache"
  on, cold_value, cold_hits, _ = _run(cache)
  assert on and cold_hits == 0
  entries = sorted(p.name for p in cache.iterdir())
  assert entries  # Written by the first process...
  on, warm_value, warm_hits, _ = _run(cache)
  assert on and warm_value == cold_value
  assert warm_hits >= 1  # ...and read by the second,
  assert sorted(p.name for p in cache.iterdir()) == entries  # none missed.
  # The environment alone (what hosts and actors inherit) does the same.
  _, env_value, env_hits, _ = _run(env_cache=str(cache))
  assert env_value == cold_value and env_hits == warm_hits


def test_a_corrupted_cache_is_a_warning_naming_it(tmp_path):
  cache = tmp_path / "cache"
  _, value, _, _ = _run(cache)
  for entry in cache.iterdir():
    entry.write_bytes(b"not an executable")
  on, again, hits, stderr = _run(cache)
  assert on and again == value and hits == 0
  assert "Error reading persistent compilation cache entry" in stderr
  assert f"compilation cache directory {cache}" in stderr, stderr


def test_a_process_reads_what_another_compiled_while_it_waited(tmp_path):
  # The suite's hook (sitehook/_tunix_mcjax_cache_hook.py): a process that
  # misses takes the key's lock beside the cache dir before it compiles, so
  # two processes of a run that need a program at the same time (the rollout
  # hosts of a DA job) compile it once. Here the test is the other process:
  # it holds the key's lock, writes the entry, then lets the program go.
  learn = tmp_path / "learn"
  _, value, _, _ = _run(learn)
  [entry] = [p for p in learn.iterdir() if p.name.startswith("jit__lambda")]
  key = entry.name.removesuffix("-cache")
  cache = tmp_path / "cache"
  locks = tmp_path / "cache.locks"
  cache.mkdir()
  locks.mkdir()
  env = {k: v for k, v in os.environ.items()
         if k not in compilation_cache.ENV_VARS}
  env.update(compilation_cache.environment(str(cache)), JAX_PLATFORMS="cpu")
  env[suite_stats.SHARE_CPU_CACHE_ENV] = "1"
  env["PYTHONPATH"] = os.pathsep.join(
      [str(suite_stats.SITEHOOK_DIR), env.get("PYTHONPATH", "")])
  lock = os.open(locks / key, os.O_RDWR | os.O_CREAT)
  fcntl.flock(lock, fcntl.LOCK_EX)
  proc = subprocess.Popen([sys.executable, str(_PROGRAM)], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, cwd=launch_utils.REPO_ROOT)
  try:
    # It opens the key's lock only after its own cache read missed.
    deadline = time.monotonic() + 60
    while not _has_open(proc.pid, locks / key):
      assert proc.poll() is None and time.monotonic() < deadline, (
          proc.communicate())
      time.sleep(0.05)
    time.sleep(0.3)
    assert proc.poll() is None  # Waiting for the lock.
    shutil.copy(entry, cache / entry.name)
  finally:
    os.close(lock)
  out, err = proc.communicate(timeout=60)
  assert proc.returncode == 0, err[-3000:]
  _, run_value, hits = out.split()
  # With the cache dir passed in the environment, configure() is not
  # called: the result and one hit, the program it did not compile.
  assert float(run_value) == value and int(hits) == 1, (out, err[-2000:])


@pytest.mark.multihost
def test_hosts_that_waited_for_another_process_run_what_it_compiled(
    tmp_path):
  # The hook's lock in a 2-host job: both hosts miss the global program
  # while another process (here the test) holds its key's lock, then both
  # run the entry that process wrote. With JAX's binary sharing on as
  # well, host 0 handed host 1 a re-serialization of the executable it
  # had read, which XLA:CPU makes without the kernels: host 1 failed with
  # "Function ... not found" (the hook's docstring).
  probe = launch_utils.REPO_ROOT / "tests" / "support" / "cache_probe.py"

  def job(cache):
    res = launch_utils.run_launched(
        probe, num_hosts=2, devices_per_host=2,
        extra_env={**compilation_cache.environment(str(cache)),
                   suite_stats.SHARE_CPU_CACHE_ENV: "1"})
    launch_utils.assert_ok(res)
    return launch_utils.host_results(res, 2)

  key = job(tmp_path / "learn")[0]["global_key"]
  entry = tmp_path / "learn" / f"{key}-cache"
  assert entry.is_file(), sorted(p.name for p in entry.parent.iterdir())
  cache = tmp_path / "cache"
  locks = tmp_path / "cache.locks"
  cache.mkdir()
  locks.mkdir()
  lock = os.open(locks / key, os.O_RDWR | os.O_CREAT)
  fcntl.flock(lock, fcntl.LOCK_EX)
  done = {}

  def run_job():
    try:
      done["hosts"] = job(cache)
    except BaseException as e:  # pylint: disable=broad-exception-caught
      done["error"] = e  # Raised below, in the test's own thread.

  thread = threading.Thread(target=run_job)
  thread.start()
  try:
    deadline = time.monotonic() + 90
    while len(_pids_with_open(locks / key) - {os.getpid()}) < 2:
      assert thread.is_alive() and time.monotonic() < deadline, (
          done.get("error",
                   "the hosts did not both wait for the global program's lock"))
      time.sleep(0.05)
    shutil.copy(entry, cache / entry.name)
  finally:
    os.close(lock)
    thread.join(timeout=180)
  if "error" in done:
    raise done["error"]
  hosts = done["hosts"]
  for host in (0, 1):
    assert hosts[host]["global_key"] == key, hosts
    assert hosts[host]["global_hits"] == 1, hosts
    assert hosts[host]["total"] == 6.0, hosts


def _pids_with_open(path: pathlib.Path) -> set[int]:
  return {int(pid) for pid in os.listdir("/proc")
          if pid.isdigit() and _has_open(int(pid), path)}


def _has_open(pid: int, path: pathlib.Path) -> bool:
  try:
    fds = os.listdir(f"/proc/{pid}/fd")
  except OSError:
    return False
  for fd in fds:
    try:
      if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
        return True
    except OSError:  # Closed meanwhile, or not ours to read.
      pass
  return False


def _two_host_probe_runs(cache, share: bool):
  env = {**compilation_cache.environment(str(cache)),
         suite_stats.SHARE_CPU_CACHE_ENV: "1" if share else "0"}
  probe = launch_utils.REPO_ROOT / "tests" / "support" / "cache_probe.py"
  runs = []
  for _ in range(2):
    res = launch_utils.run_launched(probe, num_hosts=2, devices_per_host=2,
                                    extra_env=env)
    launch_utils.assert_ok(res)
    runs.append(launch_utils.host_results(res, 2))
  cold, warm = runs
  for host in (0, 1):
    assert warm[host]["cache_dir"] == str(cache)
    # Each host contributes arange(2): 3 * (0 + 1) * 2 hosts.
    assert warm[host]["total"] == cold[host]["total"] == 6.0
    assert warm[host]["local"] == cold[host]["local"] == [8.0] * 3
    # On the host's own device, read from the cache or not.
    for run in (cold, warm):
      assert run[host]["local_on"] == [run[host]["local_device"]], run
  # With the hook one key for every host's program, the global one and the
  # host-local ones (their devices' relative layout, as JAX's keys on GPU
  # leave out the device assignment): compiled by one host, read by the
  # other, even in a cold run (the host that misses second waits for the
  # first one's entry). Without it each host compiles its own.
  for program in ("global_hits", "local_hits"):
    assert sorted(cold[h][program] for h in (0, 1)) == (
        [0, 1] if share else [0, 0]), cold
  # JAX's binary sharing stays off (the hook's docstring says why).
  for run in (cold, warm):
    assert run[0]["global_shared"] == run[1]["global_shared"] == [], run
  return warm


@pytest.mark.multihost
def test_multi_process_programs_hit_on_process_0_only(tmp_path):
  warm = _two_host_probe_runs(tmp_path / "cache", share=False)
  # Host 0 (process 0, the only one JAX writes entries from) gets both its
  # programs back, the one over both hosts' devices too.
  assert warm[0]["global_hits"] == warm[0]["local_hits"] == 1, warm
  # On CPU every key holds the process's own topology fingerprint, so the
  # other hosts never find an entry, not even for the global program (on
  # TPU and GPU the topology is the job's, and every host reads process
  # 0's entries): docs/testing.md.
  assert warm[1]["global_hits"] == warm[1]["local_hits"] == 0, warm


@pytest.mark.multihost
def test_the_suites_cache_serves_every_simulated_host(tmp_path):
  # tests/support/sitehook/_tunix_mcjax_cache_hook.py, on in every suite
  # process while the suite's cache is: host 1 reads the global program
  # host 0 wrote, and either host the host-local one the other wrote, with
  # the same results as compiled, on its own device (checked in the helper).
  warm = _two_host_probe_runs(tmp_path / "cache", share=True)
  for host in (0, 1):
    assert warm[host]["global_hits"] == warm[host]["local_hits"] == 1, warm


@pytest.mark.multihost
@pytest.mark.e2e
def test_the_example_flag_fills_and_reuses_the_directory(tmp_path):
  cache = tmp_path / "cache"
  flags = ("--steps=1", "--batch_size=2", "--num_generations=2",
           "--max_new_tokens=3", "--backend=mcjax", "--num_hosts=1",
           "--devices_per_host=2", f"--compilation_cache_dir={cache}")
  env = {k: v for k, v in launch_utils.launcher_env().items()
         if k not in compilation_cache.ENV_VARS}

  def run(out):
    proc = subprocess.run(
        [sys.executable, str(example_runs.EXAMPLE), *flags,
         f"--metrics_out={out}/metrics.jsonl", "--timeout=300"],
        env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return sorted(p.name for p in cache.iterdir())

  first = run(tmp_path / "a")
  assert len(first) > 5, first  # Every program of the job, one host.
  # One host is process 0, which writes every miss: an unchanged directory
  # means every program of the second run came from the cache.
  assert run(tmp_path / "b") == first


def test_the_cli_warns_about_an_unusable_directory(tmp_path):
  not_a_dir = tmp_path / "a_file"
  not_a_dir.write_text("")
  bad = not_a_dir / "cache"
  proc = subprocess.run(
      [sys.executable, "-m", "tunix_mcjax.cli.grpo_main",
       f"--compilation_cache_dir={bad}", "--backend=mcjax",
       "--max_staleness=1"],
      env=launch_utils.launcher_env(), capture_output=True, text=True,
      timeout=120, cwd=launch_utils.REPO_ROOT)
  assert proc.returncode == 2  # The bad flag after it, not the cache.
  assert "apply to --backend=mcjax_da only" in proc.stderr
  assert (f"grpo_main: warning: compilation cache directory {bad} is not"
          " usable") in proc.stderr, proc.stderr[-3000:]
