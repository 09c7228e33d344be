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
import pathlib
import signal
import subprocess
import sys

import pytest

from tunix_mcjax import job_files

# Another job (or a forking one), in a process of its own.
_HOLDER = pathlib.Path(__file__).resolve().parent / "support" / (
    "job_files_holder.py")


def _holder(ckpt, metrics) -> subprocess.Popen:
  proc = subprocess.Popen([sys.executable, str(_HOLDER), "hold", "holder",
                           str(ckpt), str(metrics)], stdout=subprocess.PIPE,
                          text=True)
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


def test_the_claim_ends_with_the_claiming_process_not_its_forks(tmp_path):
  proc = subprocess.run([sys.executable, str(_HOLDER), "fork", str(tmp_path)],
                        capture_output=True, text=True, timeout=60)
  assert proc.returncode == 0 and proc.stdout == "free\n", proc.stderr
