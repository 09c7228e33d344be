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

"""Reward functions scored in a process pool vs in-process, time limits and
dead workers."""

import inspect
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time

import launch_utils
import pytest

from tunix_mcjax import rewards_pool
from tunix_mcjax.recipes import tasks
from tunix_mcjax.recipes import validation


def raises_on_boom(prompts, completions, **kwargs):
  """Module level, so the pool can pickle it; raises on one completion."""
  del prompts, kwargs
  out = []
  for c in completions:
    if c == "boom":
      raise ZeroDivisionError("boom row")
    out.append(float(len(c)))
  return out


def worker_pid(prompts, completions, **kwargs):
  del prompts, kwargs
  return [float(os.getpid())] * len(completions)


ROWS = 11  # Uneven over 3 workers: chunks of 4, 4, 3.
PROMPTS = [f"q{i}" for i in range(ROWS)]
COMPLETIONS = [f"Work... #### {i * 7}" if i % 3 else f"\\boxed{{{i}}} no"
               for i in range(ROWS)]
ANSWERS = [f"... #### {i * 7}" for i in range(ROWS)]


@pytest.fixture(scope="module")
def pool():
  fns = [tasks.gsm8k_answer_reward, tasks.gsm8k_format_reward,
         raises_on_boom, worker_pid]
  with rewards_pool.RewardPool(fns, num_workers=3) as p:
    yield p


def test_pooled_rewards_equal_in_process(pool):
  answer, fmt = pool.fns[0], pool.fns[1]
  # Name and signature kept: Tunix reads both.
  assert answer.__name__ == "gsm8k_answer_reward"
  assert inspect.signature(answer) == inspect.signature(
      tasks.gsm8k_answer_reward)
  kwargs = dict(answer=ANSWERS, mode="train")
  want = tasks.gsm8k_answer_reward(PROMPTS, COMPLETIONS, **kwargs)
  assert 0 < sum(want) < ROWS  # Both outcomes occur.
  assert answer(PROMPTS, COMPLETIONS, **kwargs) == want
  assert fmt(PROMPTS, COMPLETIONS, mode="eval") == (
      tasks.gsm8k_format_reward(PROMPTS, COMPLETIONS))
  assert answer([], [], answer=[]) == []


def test_rows_are_scored_in_workers_by_chunk(pool):
  pids = pool.fns[3](PROMPTS, COMPLETIONS)
  assert len(pids) == ROWS and os.getpid() not in pids
  # Contiguous chunks of 4, 4 and 3 rows, each in one worker (which worker
  # takes which chunk is the executor's choice).
  assert len(set(pids[:4])) == len(set(pids[4:8])) == len(
      set(pids[8:])) == 1


def test_a_raising_reward_names_itself_and_its_row(pool):
  rows = list(COMPLETIONS)
  rows[6] = "boom"  # In the second chunk.
  with pytest.raises(rewards_pool.RewardWorkerError) as e:
    pool.fns[2](PROMPTS, rows)
  msg = str(e.value)
  assert "'raises_on_boom'" in msg and "ZeroDivisionError: boom row" in msg
  assert "row 6 of the batch" in msg and "'boom'" in msg
  # The pool still works afterwards.
  assert pool.fns[2](PROMPTS[:2], ["a", "bb"]) == [1.0, 2.0]


def test_unpicklable_reward_is_refused_by_name():
  def local_reward(prompts, completions, **kwargs):
    return [0.0] * len(completions)

  with pytest.raises(ValueError, match="'local_reward' cannot be pickled"):
    rewards_pool.RewardPool([tasks.gsm8k_format_reward, local_reward],
                            num_workers=1)
  with pytest.raises(ValueError, match="'<lambda>' cannot be pickled"):
    rewards_pool.RewardPool(lambda p, c: [0.0] * len(c), num_workers=1)


# --- Time limits and dead workers ---------------------------------------------


def sleeps_on_slow(prompts, completions, **kwargs):
  """Hangs (far past any limit below) on a completion "slow"."""
  del prompts, kwargs
  if "slow" in completions:
    time.sleep(300)
  return [1.0] * len(completions)


def exits_on_exit(prompts, completions, **kwargs):
  """Ends its process without a Python error on a completion "exit"."""
  del prompts, kwargs
  if "exit" in completions:
    os._exit(7)  # pylint: disable=protected-access
  return [2.0] * len(completions)


HOST = "host 3 (testbox)"
TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def limited_pool():
  with rewards_pool.RewardPool([sleeps_on_slow, exits_on_exit],
                               num_workers=2, timeout_s=TIMEOUT_S,
                               host=HOST) as p:
    yield p


def _alive(pid):
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  # A zombie is dead too (reaped by the pool, so this is rare).
  with open(f"/proc/{pid}/stat") as f:
    return f.read().split(") ")[-1][0] != "Z"


def test_a_hung_reward_in_the_pool_is_killed_naming_function_row_and_host(
    limited_pool):
  rows = ["a", "b", "c", "slow", "d"]  # Chunks 0..2 and 3..4.
  before = limited_pool.pids
  t0 = time.monotonic()
  with pytest.raises(rewards_pool.RewardTimeoutError) as e:
    limited_pool.fns[0](PROMPTS[:5], rows)
  elapsed = time.monotonic() - t0
  assert TIMEOUT_S <= elapsed < TIMEOUT_S + 15, elapsed
  msg = str(e.value)
  assert msg.startswith(
      f"reward function 'sleeps_on_slow' timed out after {TIMEOUT_S:g} s"
      " (--reward_timeout_s) scoring rows 3..4 of the 5 in this call (the"
      " first: prompt 'q3', completion 'slow') on host 3 (testbox); its"
      f" reward worker {before[1]} was killed and replaced"), msg
  assert "\n" not in msg
  # The hung worker is gone, the other kept; the pool scores again.
  after = limited_pool.pids
  assert after[0] == before[0] and after[1] != before[1]
  assert not _alive(before[1])
  assert limited_pool.fns[0](PROMPTS[:3], ["a", "b", "c"]) == [1.0] * 3


def test_a_worker_that_exits_is_reported_as_a_dead_worker(limited_pool):
  before = limited_pool.pids
  with pytest.raises(rewards_pool.RewardWorkerDiedError) as e:
    limited_pool.fns[1](PROMPTS[:3], ["a", "exit", "c"])
  assert str(e.value).startswith(
      f"reward worker {before[0]} died (exit status 7) while scoring"
      " 'exits_on_exit' on rows 0..1 of the 3 in this call (the first:"
      " prompt 'q0', completion 'a') on host 3 (testbox); "), str(e.value)
  # Checked as the jobs check rewards: the same message, not blamed on a
  # row (which would rescore row by row and kill worker after worker).
  (checked,) = validation.checked_reward_fns(limited_pool.fns[1])
  with pytest.raises(validation.InputError) as e:
    checked(PROMPTS[:3], ["a", "exit", "c"])
  assert "died (exit status 7) while scoring 'exits_on_exit'" in str(e.value)
  assert "dataset row" not in str(e.value)
  assert limited_pool.fns[1](PROMPTS[:2], ["a", "b"]) == [2.0, 2.0]


def test_a_worker_killed_while_scoring_is_reported_as_a_dead_worker(
    limited_pool):
  rows = ["a", "slow"]  # One row per worker; worker 1 hangs.
  victim = limited_pool.pids[1]
  killer = threading.Timer(0.5, os.kill, (victim, signal.SIGKILL))
  killer.start()
  t0 = time.monotonic()
  try:
    with pytest.raises(rewards_pool.RewardWorkerDiedError) as e:
      limited_pool.fns[0](PROMPTS[:2], rows)
  finally:
    killer.cancel()
  assert time.monotonic() - t0 < TIMEOUT_S  # Not waited out as a timeout.
  assert str(e.value).startswith(
      f"reward worker {victim} died (killed by SIGKILL) while scoring"
      " 'sleeps_on_slow' on row 1 of the 2 in this call (prompt 'q1',"
      " completion 'slow') on host 3 (testbox); "), str(e.value)
  assert limited_pool.fns[0](PROMPTS[:2], ["a", "b"]) == [1.0, 1.0]


def test_a_pool_timeout_must_be_positive():
  with pytest.raises(ValueError, match=(
      r"^--reward_timeout_s must be > 0 seconds \(the most one reward call"
      r" may take\), got 0\.$")):
    rewards_pool.RewardPool([sleeps_on_slow], num_workers=1, timeout_s=0)


# --- In the host process: the watchdog thread ---------------------------------


def test_an_in_process_reward_keeps_values_name_and_errors():
  (limited,) = rewards_pool.with_timeouts(
      [tasks.gsm8k_answer_reward], timeout_s=30, host=HOST)
  assert limited.__name__ == "gsm8k_answer_reward"
  assert inspect.signature(limited) == inspect.signature(
      tasks.gsm8k_answer_reward)
  assert limited(prompts=PROMPTS, completions=COMPLETIONS,
                 answer=ANSWERS) == tasks.gsm8k_answer_reward(
                     PROMPTS, COMPLETIONS, answer=ANSWERS)
  (raising,) = rewards_pool.with_timeouts(raises_on_boom, timeout_s=30,
                                          host=HOST)
  with pytest.raises(ZeroDivisionError, match="boom row"):
    raising(["q"], ["boom"])
  assert rewards_pool.with_timeout(raises_on_boom, timeout_s=None,
                                   host=HOST) is raises_on_boom


def test_a_hung_in_process_reward_fails_once_naming_function_row_and_host():
  calls = []
  release = threading.Event()

  def hangs(prompts, completions, **kwargs):
    del prompts, kwargs
    calls.append(len(completions))
    release.wait(60)
    return [0.0] * len(completions)

  (checked,) = validation.checked_reward_fns(
      rewards_pool.with_timeouts(hangs, timeout_s=0.5, host=HOST))
  t0 = time.monotonic()
  try:
    with pytest.raises(validation.InputError) as e:
      checked(PROMPTS[:3], COMPLETIONS[:3], answer=ANSWERS[:3])
  finally:
    release.set()
  assert time.monotonic() - t0 < 10
  assert str(e.value).startswith(
      "reward function 'hangs' timed out after 0.5 s (--reward_timeout_s)"
      " scoring rows 0..2 of the 3 in this call (the first: prompt 'q0',"
      " completion '\\\\boxed{0} no') on host 3 (testbox), in the host"
      " process"), str(e.value)
  assert "--reward_workers=N" in str(e.value)
  # Called once: a timeout is not searched row by row (each would hang).
  assert calls == [3]


# --- The host process ends ----------------------------------------------------

SUPPORT = pathlib.Path(__file__).resolve().parent / "support"
# Prints its pool's worker pid, then hangs in a reward call (host 1).
_HOST = SUPPORT / "reward_pool_host.py"


def test_workers_end_when_their_host_is_sigkilled_mid_call():
  env = launch_utils.launcher_env({"TUNIX_MCJAX_HOST_ID": "1"})
  host = subprocess.Popen([sys.executable, str(_HOST)], env=env,
                          stdout=subprocess.PIPE, text=True)
  try:
    worker = int(host.stdout.readline())
    time.sleep(0.5)  # Now in the reward call.
    assert launch_utils.is_alive(worker)
  finally:
    host.kill()
    host.wait()
  launch_utils.assert_no_survivors([worker], wait_s=10)


@pytest.mark.multihost
@pytest.mark.e2e
def test_a_hung_reward_ends_the_job_with_one_line_on_its_host():
  # In-process (the default): the watchdog thread. Host 1 exits at once;
  # host 0, waiting in the step's collectives, is stopped by the launcher.
  launch_utils.require_markers("multihost", "e2e")
  t0 = time.monotonic()
  result = launch_utils.run_launched(
      [sys.executable, str(SUPPORT / "reward_fault_job.py"), "0", "5"],
      num_hosts=2, devices_per_host=1, timeout=400)
  elapsed = time.monotonic() - t0
  assert result.returncode == 2, launch_utils.describe(result)
  assert "job failed: host 1 exited with status 2" in result.stderr, (
      launch_utils.describe(result))
  errors = [l for l in launch_utils.host_lines(result.stderr, 1)
            if "error: " in l]
  assert len(errors) == 1, launch_utils.describe(result)
  assert errors[0].startswith(
      "reward_fault_job.py: error: reward function 'hangs_on_host_1' timed"
      " out after 5 s (--reward_timeout_s) scoring rows 0..1 of the 2 in this"
      " call (the first: prompt "), errors[0]
  assert f"on host 1 ({socket.gethostname()}), in the host process" in (
      errors[0])
  assert not launch_utils.host_lines(result.stderr, 0) or not any(
      "reward function" in l for l in launch_utils.host_lines(
          result.stderr, 0))
  # Exits at once: not after JAX's shutdown barrier (5 min, then SIGABRT).
  assert elapsed < 150, elapsed
