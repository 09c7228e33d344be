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

"""What a host says when a collective loses its peer (the messages are
gloo's own, as a survivor of a SIGKILLed host saw them in jaxlib 0.12).

The whole path, hosts without a launcher and one of them killed, is
tests/test_faults.py::test_without_a_launcher_a_killed_host_ends_the_others_naming_it.
"""

from __future__ import annotations

import pytest

from tunix_mcjax import host_failure

_GLOO_RESET = (
    "UNKNOWN: Gloo AllGather failed: [external/xla++third_party_ext+gloo/"
    "gloo/transport/tcp/pair.cc:538] Read error [10.213.0.3]:52417:"
    " Connection reset by peer")


def test_a_reset_connection_names_the_peer_address():
  assert host_failure.lost_peer(ValueError(_GLOO_RESET)) == (
      "the host at 10.213.0.3:52417")


def test_a_lost_peer_without_an_address_is_another_host():
  assert host_failure.lost_peer(RuntimeError(
      "NCCL error: remote process exited or there was a network error")) == (
          "another host")


@pytest.mark.parametrize("error", [
    ValueError("shapes (2,) and (3,) do not match"),
    RuntimeError("RESOURCE_EXHAUSTED: out of memory"),
])
def test_other_errors_are_not_taken_for_a_lost_peer(error):
  assert host_failure.lost_peer(error) is None


def test_outside_a_multi_process_job_there_is_no_host_index():
  assert host_failure.host_index() is None
