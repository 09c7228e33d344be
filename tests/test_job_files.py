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

"""`job_files.claim`: one job per checkpoint directory and metrics file."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tunix_mcjax import job_files

# Another job: claims both paths, says so, and holds them until killed.
_HOLDER = textwrap.dedent("""
    import sys, time
    from tunix_mcjax import job_files
    job_files.claim(program="holder", checkpoint_dir=sys.argv[1],
                    metrics_out=sys.argv[2])
    print("held", flush=True)
    time.sleep(600)
""")


def _holder(ckpt, metrics) -> subprocess.Popen:
  proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(ckpt),
                           str(metrics)], stdout=subprocess.PIPE, text=True)
  assert proc.stdout.readline() == "held\n"
  return proc


def test_a_second_job_is_refused_until_the_first_dies(tmp_path):
  ckpt, metrics = tmp_path / "ckpt", tmp_path / "m.jsonl"
  holder = _holder(ckpt, metrics)
  try:
    metrics.write_text('{"step": 1}\n')  # The first job's records.
    with pytest.raises(job_files.InUseError) as e:
      job_files.claim(program="second", checkpoint_dir=str(ckpt),
                      metrics_out=str(metrics))
    assert (f"--checkpoint_dir={str(ckpt)!r} is in use by another job"
            f" (holder, pid {holder.pid} on ") in str(e.value), e.value
    with pytest.raises(job_files.InUseError, match="being written by another"):
      job_files.claim(program="second", metrics_out=str(metrics))
    assert metrics.read_text() == '{"step": 1}\n'  # Untouched.
  finally:
    holder.send_signal(signal.SIGKILL)
    holder.wait()
  # The kernel released the dead job's locks: nothing stale to clean up.
  claim = job_files.claim(program="second", checkpoint_dir=str(ckpt),
                          metrics_out=str(metrics))
  try:
    assert metrics.read_text() == ""  # A fresh record of this job.
    assert '"program": "second"' in (ckpt / job_files.LOCK_NAME).read_text()
  finally:
    claim.release()


def test_a_claim_holds_until_released(tmp_path):
  first = job_files.claim(program="a", checkpoint_dir=str(tmp_path))
  del first  # The module keeps it: dropping the object frees nothing.
  with pytest.raises(job_files.InUseError, match=r"\(a, pid "):
    job_files.claim(program="b", checkpoint_dir=str(tmp_path),
                    flag_names=("checkpoint_root_directory", "--metrics_out"))
  for held in list(job_files._HELD):
    held.release()
  job_files.claim(program="b", checkpoint_dir=str(tmp_path)).release()


def test_a_refused_claim_keeps_none_of_its_locks(tmp_path):
  ckpt, metrics = tmp_path / "ckpt", tmp_path / "m.jsonl"
  holder = _holder(tmp_path / "other", metrics)
  try:
    with pytest.raises(job_files.InUseError):
      job_files.claim(program="b", checkpoint_dir=str(ckpt),
                      metrics_out=str(metrics))
    # The directory it locked before the refusal is free again.
    job_files.claim(program="c", checkpoint_dir=str(ckpt)).release()
  finally:
    holder.kill()
    holder.wait()


def test_remote_directories_are_not_locked(tmp_path):
  claim = job_files.claim(program="a", checkpoint_dir="gs://bucket/run")
  assert claim.files == []
  claim.release()
  assert not os.path.exists("gs:")


# In a process of its own: forking the test process (threads, JAX) could
# deadlock the child.
_FORKS = textwrap.dedent("""
    import os, signal, sys, time
    from tunix_mcjax import job_files
    claim = job_files.claim(program="a", checkpoint_dir=sys.argv[1])
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # A forked host that outlives the claim.
      os.close(read)
      os.write(write, b"1" if not job_files._HELD else b"0")
      time.sleep(30)
      os._exit(0)
    os.close(write)
    try:
      assert os.read(read, 1) == b"1", "the fork kept the claim's files"
      claim.release()
      # Free although the fork still runs: a new claim (another open file,
      # which flock sets against the first) succeeds.
      job_files.claim(program="b", checkpoint_dir=sys.argv[1]).release()
      print("free", flush=True)
    finally:
      os.kill(pid, signal.SIGKILL)
      os.waitpid(pid, 0)
""")


def test_the_claim_ends_with_the_claiming_process_not_its_forks(tmp_path):
  proc = subprocess.run([sys.executable, "-c", _FORKS, str(tmp_path)],
                        capture_output=True, text=True, timeout=60)
  assert proc.returncode == 0 and proc.stdout == "free\n", proc.stderr
