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

"""A host process whose reward pool's worker is mid-call when the host is
killed (tests/test_rewards_pool.py; run by path with TUNIX_MCJAX_HOST_ID=1).

Prints the pool's worker pid, then calls a reward that hangs on host 1, so
that the test can SIGKILL this process and check the worker ends with it.
"""

import sys

import reward_fault_job

from tunix_mcjax import rewards_pool


def main(argv: list[str]) -> None:
  del argv
  pool = rewards_pool.RewardPool([reward_fault_job.hangs_on_host_1],
                                 num_workers=1, timeout_s=300)
  print(pool.pids[0], flush=True)
  pool.fns[0](["q"], ["c"])  # Hangs (host 1).


if __name__ == "__main__":
  main(sys.argv)
