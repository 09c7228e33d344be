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

"""Checkpoints on gs:// (docs/checkpointing.md#checkpoints-on-gs), against
fake-gcs-server on loopback (`fake_gcs`), not real GCS.

Hand-made checkpoints (Tunix's saver, one process) are listed, verified
down to the array files, refused when damaged, set aside by --resume_step
and restored, all through the gs:// URI. A 2-host job of
tests/test_checkpointing.py's flags, 2 steps with a checkpoint each, saves
to gs://; the same command SIGKILLed once step 1 and its checkpoint are
done and run again resumes from gs:// to the uninterrupted run's later
steps and final parameters, bit for bit; a checkpoint of another
configuration is refused before any host starts; --resume_step 1 sets step
2 aside on gs:// and reproduces it; a copy of the 2-host checkpoint is
resumed by 1 host.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import urllib.request

import numpy as np
import pytest

import example_runs
import fake_gcs
import hand_checkpoints
import launch_utils
import zygote
from tunix_mcjax import checkpointing

_BUCKET = "bucket"
# tests/test_checkpointing.py's job, with the fewest steps that leave a
# checkpoint to resume from and a step after it.
STEPS = 2
JOB = (f"--steps={STEPS}", "--batch_size=6", "--num_generations=2",
       "--max_new_tokens=6", "--seed=3", "--learning_rate=1e-2",
       "--beta=0.04", "--checkpoint_every=1", "--devices_per_host=2",
       "--num_hosts=2")
_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
  """fake-gcs-server on 127.0.0.1 with one bucket; this process's GCS
  clients point at it while the module runs."""
  server = fake_gcs.FakeGcs(
      tmp_path_factory.mktemp("fake_gcs") / "server.log")
  server.start()
  saved = None
  try:
    server.create_bucket(_BUCKET)
    saved = server.apply()
    yield server
  finally:
    if saved is not None:
      fake_gcs.restore(saved)
    server.close()


def test_a_uri_root_keeps_its_scheme():
  # pathlib would make it the local path gs:/bucket/run.
  assert str(checkpointing.actor_directory("gs://bucket/run")) == (
      "gs://bucket/run/actor")
  assert str(checkpointing.actor_directory("/ckpt/run")) == "/ckpt/run/actor"
  assert isinstance(checkpointing.actor_directory("/ckpt/run"), pathlib.Path)


# --- hand-made checkpoints on gs:// (one process) ---------------------------


def test_hand_made_checkpoints_on_gcs_are_checked_and_set_aside(gcs):
  del gcs  # Points this process's clients at the server.
  root = f"gs://{_BUCKET}/hand"
  checkpointing.check_writable(root)
  hand_checkpoints.write(root)
  actor = checkpointing.actor_directory(root)
  assert checkpointing.orbax_steps(root) == [2, 4]
  assert checkpointing.complete_steps(root) == [2, 4]
  saved = checkpointing.check_resume(root, {})
  assert (saved.path, saved.data_position) == (f"{actor}/4", 24)
  for step in (2, 4):
    assert checkpointing.verify(actor / str(step)) is None
  # The byte-level check reads the stores through gs:// too: an array data
  # file of step 4 deleted is named.
  files = list((actor / "4" / "model_params").glob("ocdbt.process_*/d/*"))
  assert files
  largest = max(files, key=lambda p: p.stat().length)
  largest.unlink()
  with pytest.raises(checkpointing.CheckpointError) as info:
    checkpointing.check_resume(root, {})
  message = str(info.value)
  assert message.startswith(
      f"Checkpoint {actor}/4 is corrupt: {largest} is missing"), message
  assert message.endswith(
      "--resume_step 2 resumes from the previous complete checkpoint, or"
      f" delete {actor}/4."), message
  # --resume_step 2: step 4 leaves Orbax's sight, every object kept.
  assert checkpointing.check_resume(
      root, {}, step=2, sets_aside_later=True).step == 2
  moved = checkpointing.set_aside_later(root, 2)
  aside = f"gs://{_BUCKET}/hand/{checkpointing.SET_ASIDE_SUBDIR}"
  assert [str(p) for p in moved] == [f"{aside}/4"]
  assert checkpointing.orbax_steps(root) == [2]
  assert (moved[0] / "_CHECKPOINT_METADATA").exists()
  assert checkpointing.check_resume(root, {}, step=2).step == 2
  tiny, optimizer = hand_checkpoints.model(0.0)
  assert hand_checkpoints.manager(root).maybe_restore(tiny, optimizer)[0] == 2
  saved_model, _ = hand_checkpoints.model(1.0)  # What step 2 holds.
  np.testing.assert_array_equal(np.asarray(tiny.w[...]),
                                np.asarray(saved_model.w[...]))


def test_steps_of_an_actor_prefix_emptied_by_another_process(gcs):
  # Another host's object was the prefix's only one: this process saw it
  # (a cached listing), the other deleted it. Orbax's exists-then-list
  # found no objects and gcsfs raised FileNotFoundError (a CI failure of
  # the 2-host job below, from a host's write probe); no steps it is.
  root = f"gs://{_BUCKET}/emptied"
  probe = checkpointing.actor_directory(root) / "theirs"
  probe.write_bytes(b"ok")
  assert [p.name for p in checkpointing.as_path(root).iterdir()] == ["actor"]
  request = urllib.request.Request(
      f"{gcs.url}/storage/v1/b/{_BUCKET}/o/emptied%2Factor%2Ftheirs",
      method="DELETE")
  with urllib.request.urlopen(request, timeout=10):
    pass
  try:
    assert checkpointing.orbax_steps(root) == []
    assert checkpointing.complete_steps(root) == []
    assert checkpointing.check_resume(root, {}) is None
  finally:
    fake_gcs.forget_listings()


def test_a_missing_bucket_is_not_writable(gcs):
  del gcs
  with pytest.raises(checkpointing.CheckpointError,
                     match="'gs://no-such-bucket/run' is not writable"):
    checkpointing.check_writable("gs://no-such-bucket/run")


# --- a 2-host job on gs:// ---------------------------------------------------


def _command(out: pathlib.Path, root: str, *args: str) -> list[str]:
  return [sys.executable, str(example_runs.EXAMPLE), *JOB, *args,
          f"--checkpoint_dir={root}", f"--dump_dir={out}",
          f"--metrics_out={out}/metrics.jsonl",
          f"--timeout={_TIMEOUT_S - 100}"]


def _run(server: fake_gcs.FakeGcs, cmd: list[str], *, expect_rc: int = 0
         ) -> subprocess.CompletedProcess[str]:
  launch_utils.require_markers("multihost", "e2e")
  proc = zygote.run(cmd, env=launch_utils.launcher_env(server.env()),
                    capture_output=True, text=True, timeout=_TIMEOUT_S)
  assert proc.returncode == expect_rc, (
      proc.stdout[-4000:] + proc.stderr[-4000:])
  return proc


def _complete_steps(root: str) -> list[int]:
  """`checkpointing.complete_steps`, listing afresh: the job's hosts wrote
  the bucket since this process last listed it."""
  fake_gcs.forget_listings()
  return checkpointing.complete_steps(root)


def _resumed_from(proc: subprocess.CompletedProcess[str]) -> str:
  lines = [line for line in proc.stdout.splitlines()
           if "resuming from checkpoint" in line]
  assert len(lines) == 1, proc.stdout[-3000:]
  return lines[0]


@pytest.fixture(scope="module")
def gcs_runs(gcs, tmp_path_factory):
  """An uninterrupted run saving to gs://bucket/ref, and the same command
  on gs://bucket/run SIGKILLed after step 1 and its checkpoint, then run
  again."""
  tmp = tmp_path_factory.mktemp("ckpt_gcs")
  ref_out, ref_root = tmp / "ref", f"gs://{_BUCKET}/ref"
  _run(gcs, _command(ref_out, ref_root))
  out, root = tmp / "resumed", f"gs://{_BUCKET}/run"
  cmd = _command(out, root)
  launch_utils.run_killed_when(
      cmd, lambda: (launch_utils.steps_done(out / "metrics.jsonl") >= 1
                    and 1 in _complete_steps(root)),
      log_path=tmp / "killed.log", env=launch_utils.launcher_env(gcs.env()),
      timeout_s=_TIMEOUT_S, poll_s=0.2)
  after_kill = _complete_steps(root)
  proc = _run(gcs, cmd)  # The same command again.
  return dict(tmp=tmp, ref=ref_out, ref_root=ref_root, out=out, root=root,
              proc=proc, after_kill=after_kill)


@pytest.mark.multihost
@pytest.mark.e2e
def test_job_on_gcs_sigkilled_resumes_exactly(gcs_runs):
  assert gcs_runs["after_kill"] == [1]
  root = gcs_runs["root"]
  assert (f"resuming from checkpoint {root}/actor/1 (global step 1, data"
          " position 6") in _resumed_from(gcs_runs["proc"])
  example_runs.assert_resumed_equal(
      gcs_runs["ref"], gcs_runs["out"], first_step=2, steps=STEPS, exact=True)
  assert _complete_steps(root) == [1, 2]
  assert _complete_steps(gcs_runs["ref_root"]) == [1, 2]
  # No lock on gs:// (job_files): nothing but Orbax's and mcjax's objects.
  fake_gcs.forget_listings()
  assert sorted(p.name for p in checkpointing.as_path(root).iterdir()) == [
      "actor"]


@pytest.mark.multihost
@pytest.mark.e2e
def test_gcs_checkpoint_of_another_configuration_is_refused_before_hosts_start(
    gcs, gcs_runs):
  proc = _run(gcs, _command(gcs_runs["tmp"] / "other", gcs_runs["ref_root"],
                            "--lora_rank=8", "--learner=drgrpo"),
              expect_rc=2)
  err = proc.stderr.strip()
  assert "Traceback" not in err and "[launch]" not in proc.stdout, err
  assert len(err.splitlines()) == 1, err
  assert f"Checkpoint {gcs_runs['ref_root']}/actor/2 was written with" in err
  for name in ("lora_rank: checkpoint null, now 8",
               'learner: checkpoint "grpo", now "drgrpo"'):
    assert name in err, err
  assert _complete_steps(gcs_runs["ref_root"]) == [1, 2]


@pytest.mark.multihost
@pytest.mark.e2e
def test_gcs_resume_step_sets_later_aside_and_resumes_exactly(gcs, gcs_runs):
  root, out = gcs_runs["root"], gcs_runs["tmp"] / "resume_step"
  # Not a complete checkpoint: refused before any host starts.
  refused = _run(gcs, [*_command(out, root), "--resume_step=3"], expect_rc=2)
  assert "its complete checkpoints are steps 1, 2." in refused.stderr
  assert "[launch]" not in refused.stdout
  proc = _run(gcs, [*_command(out, root), "--resume_step=1"])
  aside = f"{root}/{checkpointing.SET_ASIDE_SUBDIR}"
  assert f"set aside the later step(s) 2 in {aside}" in proc.stdout
  assert f"{root}/actor/1 (global step 1" in _resumed_from(proc)
  example_runs.assert_resumed_equal(
      gcs_runs["ref"], out, first_step=2, steps=STEPS, exact=True)
  # The resumed run wrote its own step 2; the earlier one is kept aside.
  assert _complete_steps(root) == [1, 2]
  assert (checkpointing.as_path(aside) / "2" / "commit_success.txt").exists()


def _copy_tree(src: str, dst: str) -> None:
  """Copies every object under `src` to the same place under `dst`."""
  fake_gcs.forget_listings()
  source = checkpointing.as_path(src)
  target = checkpointing.as_path(dst)
  target.mkdir(parents=True, exist_ok=True)
  for path in source.iterdir():  # epath has no recursive glob on gs://.
    if path.is_dir():
      _copy_tree(str(path), str(target / path.name))
    else:
      (target / path.name).write_bytes(path.read_bytes())


@pytest.mark.multihost
@pytest.mark.e2e
def test_two_host_gcs_checkpoint_resumes_on_one_host(gcs, gcs_runs):
  """The reference's step-1 checkpoint, written by 2 hosts on gs://, resumed
  by 1 host: bit for bit what the same resume from a local copy of it gives,
  and the reference's step-2 batch and completions. (Its parameters differ
  from the 2-host run's by the other reduction order: 1.4e-6 on one entry
  here, over the 1e-6 of tests/test_checkpointing.py's host-count resumes,
  which train two steps from a later checkpoint; so the check against the
  2-host run is the local test's, and this one checks what gs:// adds.)"""
  runs = {}
  for where, root in (("gcs", f"gs://{_BUCKET}/one_host"),
                      ("local", str(gcs_runs["tmp"] / "one_host_ckpt"))):
    _copy_tree(gcs_runs["ref_root"], root)
    out = gcs_runs["tmp"] / f"one_host_{where}"
    proc = _run(gcs, [*_command(out, root), "--resume_step=1",
                      "--num_hosts=1"])
    resumed = _resumed_from(proc)
    assert f"{root}/actor/1 (global step 1" in resumed, resumed
    assert "written by 2 host(s)" in resumed, resumed
    fake_gcs.forget_listings()
    assert checkpointing.latest(root).num_hosts == 1
    runs[where] = out
  got, local = (example_runs.read_rollouts(runs[w]) for w in ("gcs", "local"))
  ref = example_runs.read_rollouts(gcs_runs["ref"])[1:]
  assert len(got) == len(ref) == STEPS - 1
  for a, b, c in zip(got, local, ref):
    assert a["prompts"] == b["prompts"] == c["prompts"]
    assert a["completions"] == b["completions"] == c["completions"]
    assert a["rewards"] == b["rewards"]
  losses = [[r["loss"] for r in json.loads(
      (runs[w] / "records.json").read_text())] for w in ("gcs", "local")]
  assert losses[0] == losses[1]
  pa, pb = (np.load(runs[w] / "params.npz") for w in ("gcs", "local"))
  assert sorted(pa.files) == sorted(pb.files)
  for name in pa.files:
    np.testing.assert_array_equal(pa[name], pb[name], err_msg=name)
  example_runs.assert_parameters_moved(runs["gcs"])
