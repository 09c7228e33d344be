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

"""Another job's side of tests/test_job_files.py and the bad-input tests
(run by path, in a process of its own):

  job_files_holder.py hold PROGRAM CKPT METRICS   claims both ('' for none),
      prints "held" and keeps them until killed;
  job_files_holder.py fork CKPT                   claims, forks a child that
      outlives the claim, releases, claims again; prints "free" if the fork
      held nothing (forking the pytest process, with JAX's threads, could
      deadlock the child).
"""

import os
import signal
import sys
import time

from tunix_mcjax import job_files


def hold(program: str, ckpt: str, metrics: str) -> None:
  job_files.claim(program=program, checkpoint_dir=ckpt or None,
                  metrics_out=metrics or None)
  print("held", flush=True)
  time.sleep(600)


def fork(ckpt: str) -> None:
  claim = job_files.claim(program="a", checkpoint_dir=ckpt)
  read, write = os.pipe()
  pid = os.fork()
  if pid == 0:  # A forked host that outlives the claim.
    os.close(read)
    os.write(write, b"1" if not job_files._HELD else b"0")  # pylint: disable=protected-access
    time.sleep(30)
    os._exit(0)  # pylint: disable=protected-access
  os.close(write)
  try:
    if os.read(read, 1) != b"1":
      sys.exit("the fork kept the claim's files")
    claim.release()
    # Free although the fork still runs: a new claim (another open file,
    # which flock sets against the first) succeeds.
    job_files.claim(program="b", checkpoint_dir=ckpt).release()
    print("free", flush=True)
  finally:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


if __name__ == "__main__":
  if sys.argv[1] == "hold":
    hold(*sys.argv[2:5])
  else:
    fork(sys.argv[2])
