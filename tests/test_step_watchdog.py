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

"""The step watchdog on its own thread, with real time and short limits.

A whole job whose host is stopped is in tests/test_faults.py.
"""

from __future__ import annotations

import threading
import time

import pytest

from tunix_mcjax import step_watchdog
from tunix_mcjax.telemetry import clock as clock_lib


class _Expiries:
  """Collects the watchdog's messages (its `on_expiry`)."""

  def __init__(self):
    self.messages: list[str] = []
    self.fired = threading.Event()

  def __call__(self, message: str) -> None:
    self.messages.append(message)
    self.fired.set()


def _watchdog(expiries: _Expiries, timeout_s: float = 0.3,
              phase=lambda: None) -> step_watchdog.StepWatchdog:
  return step_watchdog.StepWatchdog(
      timeout_s=timeout_s, host="host 1 (node-a)", current_phase=phase,
      on_expiry=expiries, poll_s=0.02)


def test_it_waits_for_the_first_step_to_end():
  # The first step compiles: however long it takes, nothing fires.
  expiries = _Expiries()
  dog = _watchdog(expiries)
  try:
    assert not expiries.fired.wait(1.0)
  finally:
    dog.close()


def test_a_step_that_does_not_end_in_time_stops_the_host_naming_it():
  expiries = _Expiries()
  since = time.monotonic()
  dog = _watchdog(expiries, phase=lambda: ("train (cross-host)", since))
  try:
    dog.step_ended(4)
    assert expiries.fired.wait(5.0)
    time.sleep(0.2)  # It fires once, then its thread ends.
  finally:
    dog.close()
  assert len(expiries.messages) == 1
  message = expiries.messages[0]
  assert message.startswith("[mcjax] error: host 1 (node-a): step 5 has not"
                            " ended"), message
  assert "after step 4 did (--step_timeout_s 0.3)" in message
  assert "in its 'train (cross-host)' phase" in message
  assert "raise --step_timeout_s" in message


def test_steps_that_end_in_time_keep_it_quiet():
  expiries = _Expiries()
  dog = _watchdog(expiries, timeout_s=0.4)
  try:
    for step in range(1, 16):  # 1.5 s of steps of 0.1 s.
      dog.step_ended(step)
      time.sleep(0.1)
    assert not expiries.messages
  finally:
    dog.close()
  # Closed: no step end comes, and nothing fires.
  assert not expiries.fired.wait(0.8)


def test_between_steps_is_said_when_no_phase_runs():
  expiries = _Expiries()
  dog = _watchdog(expiries)
  try:
    dog.step_ended(1)
    assert expiries.fired.wait(5.0)
  finally:
    dog.close()
  assert "it is between steps" in expiries.messages[0]


def test_off_starts_no_thread():
  before = {t.name for t in threading.enumerate()}
  dog = step_watchdog.StepWatchdog(timeout_s=None, host="host 0 (x)")
  dog.step_ended(1)
  assert "step-watchdog" not in {t.name for t in threading.enumerate()} - before
  dog.close()


@pytest.mark.parametrize("bad", [0, -1.0])
def test_a_limit_not_above_0_is_refused(bad):
  with pytest.raises(ValueError, match="--step_timeout_s must be > 0"):
    step_watchdog.check_timeout(bad)
  with pytest.raises(ValueError, match="--step_timeout_s must be > 0"):
    step_watchdog.StepWatchdog(timeout_s=bad, host="h")


def test_the_step_clock_names_the_innermost_running_phase():
  clock = clock_lib.StepClock()
  assert clock.current is None
  with clock.phase("train", cross_host="train"):
    name, since = clock.current
    assert name == "train (cross-host)"
    assert since <= time.monotonic()
    with clock.phase("logps"):
      assert clock.current[0] == "logps"
    assert clock.current[0] == "train (cross-host)"
  assert clock.current is None


@pytest.mark.parametrize("value,backend,message", [
    (0, "mcjax", "integer >= 1"),
    (2.5, "mcjax_da", "integer >= 1"),
    (True, "mcjax", "integer >= 1"),
    (30, "tunix", "--backend=tunix does not take it"),
])
def test_a_heartbeat_limit_that_cannot_apply_is_refused(value, backend,
                                                       message):
  with pytest.raises(ValueError, match=message):
    step_watchdog.check_heartbeat(value, backend)


def test_a_heartbeat_limit_reaches_jax_distributed():
  from tunix_mcjax import runtime  # pylint: disable=g-import-not-at-top

  step_watchdog.check_heartbeat(None, "tunix")
  step_watchdog.check_heartbeat(30, "mcjax")
  config = runtime.RuntimeConfig.from_env(
      {runtime.ENV_COORDINATOR: "127.0.0.1:1234", runtime.ENV_NUM_HOSTS: "2",
       runtime.ENV_HOST_ID: "1"}, heartbeat_timeout_s=30)
  assert config.heartbeat_timeout_s == 30
  # What runtime.initialize passes to jax.distributed.initialize.
  kwargs = runtime._optional_distributed_kwargs(config)  # pylint: disable=protected-access
  assert kwargs == {"heartbeat_timeout_seconds": 30}

