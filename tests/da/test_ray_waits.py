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

"""The DA driver's watch on the Ray head and its deadline
(tunix_mcjax.da.ray_waits).

A real listening socket on loopback stands for the GCS; the clock is the
test's, so "for 15 s" takes no time. The whole path (a Ray head killed under
a running job) is tests/cluster/test_netns_faults.py; a whole job that runs
out of its --timeout is tests/test_faults.py.
"""

import socket

import pytest

from tunix_mcjax.da import ray_waits


class _Clock:

  def __init__(self):
    self.now = 100.0

  def __call__(self) -> float:
    return self.now


def _listener() -> socket.socket:
  server = socket.socket()
  server.bind(("127.0.0.1", 0))
  server.listen()
  return server


def test_a_head_that_answers_is_never_lost():
  clock = _Clock()
  with _listener() as server:
    watch = ray_waits.HeadWatch(f"127.0.0.1:{server.getsockname()[1]}",
                                lost_after_s=15, probe_every_s=0,
                                clock=clock)
    for _ in range(5):
      watch.check()
      clock.now += 60
    assert not watch.lost
    assert not watch.confirm_lost()


def test_a_silent_head_is_lost_after_lost_after_s_and_named():
  clock = _Clock()
  server = _listener()
  address = f"127.0.0.1:{server.getsockname()[1]}"
  watch = ray_waits.HeadWatch(address, lost_after_s=15, probe_every_s=0,
                              clock=clock)
  watch.check()
  server.close()  # The GCS is gone: connections are refused.
  watch.check()  # Silent since now.
  clock.now += 14
  watch.check()  # Not yet.
  assert not watch.lost
  clock.now += 1
  with pytest.raises(ray_waits.RayHeadLost) as e:
    watch.check()
  assert watch.lost
  message = str(e.value)
  assert "\n" not in message
  assert f"GCS at {address}" in message and "for 15 s" in message
  assert "resume from the last checkpoint" in message
  # Once lost, lost for good.
  with pytest.raises(ray_waits.RayHeadLost):
    watch.check()


def test_a_head_that_answers_again_starts_the_count_afresh():
  clock = _Clock()
  server = _listener()
  port = server.getsockname()[1]
  watch = ray_waits.HeadWatch(f"127.0.0.1:{port}", lost_after_s=15,
                              probe_every_s=0, clock=clock)
  server.close()
  watch.check()
  clock.now += 10
  with socket.socket() as again:  # A GCS restarted on the same port.
    again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    again.bind(("127.0.0.1", port))
    again.listen()
    watch.check()
  clock.now += 10
  watch.check()  # Silent again, for 0 s only.
  assert not watch.lost


def test_probes_are_spaced():
  clock = _Clock()
  server = _listener()
  watch = ray_waits.HeadWatch(f"127.0.0.1:{server.getsockname()[1]}",
                              lost_after_s=1, probe_every_s=5, clock=clock)
  watch.check()
  server.close()
  clock.now += 4
  watch.check()  # Within probe_every_s: not probed, so not silent yet.
  clock.now += 1
  watch.check()  # Probed: silent since now.
  clock.now += 5
  with pytest.raises(ray_waits.RayHeadLost):
    watch.check()


def test_confirm_lost_is_one_probe():
  server = _listener()
  watch = ray_waits.HeadWatch(f"127.0.0.1:{server.getsockname()[1]}")
  assert not watch.confirm_lost()
  server.close()
  assert watch.confirm_lost()
  assert watch.lost


@pytest.mark.parametrize("address", ["", "host", "host:", ":80", "h:p"])
def test_a_malformed_address_is_refused(address):
  with pytest.raises(ValueError, match="host:port"):
    ray_waits.HeadWatch(address)


def test_ipv6_addresses_split():
  assert ray_waits.split_address("[::1]:6379") == ("::1", 6379)
  assert ray_waits.split_address("10.0.0.1:6379") == ("10.0.0.1", 6379)


def test_each_wait_gets_what_is_left_of_the_jobs_time_limit():
  clock = _Clock()
  deadline = ray_waits.Deadline(500, clock=clock)
  assert deadline.left() == 500
  clock.now += 420  # Placement and the rollout hosts' start took 420 s.
  assert deadline.left() == 80
  clock.now += 100
  assert deadline.left() == 0


def test_a_wait_past_the_limit_names_what_it_waited_for_and_who():
  clock = _Clock()
  deadline = ray_waits.Deadline(500, clock=clock)
  clock.now += 500
  # Past the limit the wait ends before asking Ray anything: no refs needed.
  with pytest.raises(RuntimeError) as raised:
    ray_waits.wait_all(["ref 0", "ref 1"], deadline=deadline,
                       what="the trainer hosts to finish the job",
                       names=["trainer host 0", "trainer host 1"], watch=None)
  assert str(raised.value) == (
      "Timed out waiting for the trainer hosts to finish the job: the job's"
      " time limit of 500 s (--timeout) passed; ['trainer host 0', 'trainer"
      " host 1'] did not finish.")


@pytest.mark.parametrize("total_s", [0, -1, True, "500", None])
def test_a_limit_that_is_not_a_positive_number_is_refused(total_s):
  with pytest.raises(ValueError, match="time limit must be a number > 0"):
    ray_waits.Deadline(total_s)
