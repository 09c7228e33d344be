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

"""Checkpoint and exact resume (tunix_mcjax.checkpointing, docs/checkpointing.md).

Shared runs (module-scoped): one uninterrupted 4-step 2-host run,
checkpointing every 2 steps, is the reference for the SIGKILL resume (the
job killed while it writes step 4's checkpoint), the resumes of its step-2
checkpoint on 3 and on 1 host, and the refused resumes. LoRA (rank 4) has
its own reference and its own SIGKILL after step 3 and rerun of the same
command (the host-count change is tested with full weights only). A resumed run
must reproduce the reference's prompts, completions, rewards and losses of
every step after the checkpoint and its final parameters.
"""

from __future__ import annotations

import gc
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import types

import numpy as np
import pytest

import example_runs
import hand_checkpoints
import launch_utils
import zygote
from tunix_mcjax import admission
from tunix_mcjax import checkpointing

# 6 prompts per step divide over 2 and 3 hosts; 2 devices per host (the
# 3-host mesh is then hsdp, the tiny model's widths not dividing over 6).
STEPS = 4
JOB = (f"--steps={STEPS}", "--batch_size=6", "--num_generations=2",
       "--max_new_tokens=6", "--seed=3", "--learning_rate=1e-2",
       "--beta=0.04", "--checkpoint_every=2", "--devices_per_host=2")
LORA = ("--lora_rank=4", "--lora_alpha=8")
_TIMEOUT_S = 600
# In the name of Orbax's temporary directory of a checkpoint being written.
_ORBAX_TMP = ".orbax-checkpoint-tmp"


def _command(out: pathlib.Path, ckpt: pathlib.Path, *args: str) -> list[str]:
  return [sys.executable, str(example_runs.EXAMPLE), *JOB, *args,
          f"--checkpoint_dir={ckpt}", f"--dump_dir={out}",
          f"--metrics_out={out}/metrics.jsonl",
          f"--timeout={_TIMEOUT_S - 100}"]


def _run(cmd: list[str], *, expect_rc: int = 0
         ) -> subprocess.CompletedProcess[str]:
  launch_utils.require_markers("multihost", "e2e")
  proc = zygote.run(cmd, env=launch_utils.launcher_env(),
                    capture_output=True, text=True, timeout=_TIMEOUT_S)
  assert proc.returncode == expect_rc, (
      proc.stdout[-4000:] + proc.stderr[-4000:])
  return proc


def _run_killed_after(cmd: list[str], out: pathlib.Path, ckpt: pathlib.Path,
                      step: int, saved: int) -> None:
  """Runs `cmd` and SIGKILLs the whole job once step `step` is recorded and
  checkpoint `saved` is complete (saves are asynchronous: step `saved + 1`
  can finish while `saved` is still being written)."""
  launch_utils.run_killed_when(
      cmd, lambda: (launch_utils.steps_done(out / "metrics.jsonl") >= step
                    and saved in checkpointing.complete_steps(str(ckpt))),
      log_path=out.parent / f"{out.name}.log", timeout_s=_TIMEOUT_S)


def _saves_in_flight(ckpt: pathlib.Path) -> list[str]:
  """Orbax's temporary directories under `ckpt`: checkpoints being written
  (`<step>.orbax-checkpoint-tmp`, renamed to `<step>` once complete)."""
  try:
    names = os.listdir(checkpointing.actor_directory(str(ckpt)))
  except FileNotFoundError:
    return []
  return sorted(n for n in names if _ORBAX_TMP in n)


def _run_killed_while_saving(cmd: list[str], out: pathlib.Path,
                             ckpt: pathlib.Path, step: int) -> None:
  """Runs `cmd` and SIGKILLs the whole job while checkpoint `step` is being
  written (its temporary directory exists: Orbax takes ~0.4 s here).

  A kill that came too late (the save completed between the look and the
  kill) is retried once from scratch; twice too late fails the test.
  """
  def saving() -> bool:
    return any(n.startswith(f"{step}.") for n in _saves_in_flight(ckpt))

  for _ in range(2):
    launch_utils.run_killed_when(
        cmd, saving, log_path=out.parent / f"{out.name}.log",
        timeout_s=_TIMEOUT_S, poll_s=0.005)
    if step not in checkpointing.complete_steps(str(ckpt)):
      return
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(ckpt, ignore_errors=True)
  pytest.fail(f"checkpoint {step} completed before the kill, twice")


def _resumed_from(proc: subprocess.CompletedProcess[str]) -> str:
  lines = [line for line in proc.stdout.splitlines()
           if "resuming from checkpoint" in line]
  assert len(lines) == 1, proc.stdout[-3000:]
  return lines[0]


def _resume_copy(ref_ckpt: pathlib.Path, ckpt: pathlib.Path, out: pathlib.Path,
                 *args: str) -> subprocess.CompletedProcess[str]:
  """Resumes from a copy of `ref_ckpt` cut back to its step-2 checkpoint."""
  shutil.copytree(ref_ckpt, ckpt)
  for step in range(4, STEPS + 1, 2):
    shutil.rmtree(checkpointing.actor_directory(str(ckpt)) / str(step))
  return _run(_command(out, ckpt, *args))


@pytest.fixture(scope="module")
def full(tmp_path_factory):
  """An uninterrupted run, and the same command killed after step 3 while
  it writes step 4's checkpoint, then run again."""
  tmp = tmp_path_factory.mktemp("ckpt_full")
  ref_out, ref_ckpt = tmp / "ref", tmp / "ref_ckpt"
  _run(_command(ref_out, ref_ckpt, "--num_hosts=2"))
  out, ckpt = tmp / "resumed", tmp / "ckpt"
  cmd = _command(out, ckpt, "--num_hosts=2")
  _run_killed_while_saving(cmd, out, ckpt, step=4)
  after_kill = dict(
      steps=checkpointing.complete_steps(str(ckpt)),
      latest=checkpointing.latest(str(ckpt)).step,
      in_flight=_saves_in_flight(ckpt),
      steps_done=launch_utils.steps_done(out / "metrics.jsonl"))
  proc = _run(cmd)  # The same command again.
  return dict(ref=ref_out, ref_ckpt=ref_ckpt, out=out, ckpt=ckpt, proc=proc,
              after_kill=after_kill)


@pytest.fixture(scope="module")
def lora(tmp_path_factory):
  """An uninterrupted LoRA run, and the same command killed after step 3
  then run again."""
  tmp = tmp_path_factory.mktemp("ckpt_lora")
  ref_out, ref_ckpt = tmp / "ref", tmp / "ref_ckpt"
  _run(_command(ref_out, ref_ckpt, "--num_hosts=2", *LORA))
  out, ckpt = tmp / "resumed", tmp / "ckpt"
  cmd = _command(out, ckpt, "--num_hosts=2", *LORA)
  _run_killed_after(cmd, out, ckpt, step=3, saved=2)
  steps_after_kill = checkpointing.complete_steps(str(ckpt))
  proc = _run(cmd)  # The same command again.
  return dict(ref=ref_out, out=out, ckpt=ckpt, proc=proc,
              steps_after_kill=steps_after_kill)


# --- exact resume after SIGKILL of the whole job ------------------------------


@pytest.mark.multihost
@pytest.mark.e2e
def test_job_sigkilled_while_saving_resumes_exactly(full):
  # Killed after step 3, while step 4's checkpoint was being written: its
  # half-written directory is left, step 2's checkpoint is the latest
  # complete one, and the rerun resumes from it.
  after_kill = full["after_kill"]
  assert after_kill["steps_done"] == 3
  assert after_kill["steps"] == [2] and after_kill["latest"] == 2
  assert [n.split(".")[0] for n in after_kill["in_flight"]] == ["4"], (
      after_kill)
  assert "actor/2 (global step 2, data position 12" in _resumed_from(
      full["proc"])
  example_runs.assert_resumed_equal(
      full["ref"], full["out"], first_step=3, steps=STEPS, exact=True)
  # The resumed run checkpoints on: the same steps as the reference.
  assert checkpointing.complete_steps(str(full["ckpt"])) == list(range(2, STEPS + 1, 2))
  assert checkpointing.complete_steps(str(full["ref_ckpt"])) == list(range(2, STEPS + 1, 2))
  # The rerun's save of step 4 replaced the half-written one.
  assert not _saves_in_flight(full["ckpt"])


@pytest.mark.multihost
@pytest.mark.e2e
def test_sigkilled_lora_job_resumes_exactly(lora):
  assert lora["steps_after_kill"] == [2]
  assert "actor/2 (global step 2, data position 12, written by 2 host(s))" in (
      _resumed_from(lora["proc"]))
  example_runs.assert_resumed_equal(
      lora["ref"], lora["out"], first_step=3, steps=STEPS, exact=True)
  assert checkpointing.complete_steps(str(lora["ckpt"])) == list(range(2, STEPS + 1, 2))
  # Only the adapters (and their optimizer state) are checkpointed.
  saved = checkpointing.latest(str(lora["ckpt"]))
  assert saved.fingerprint["trainable_params"] and all(
      "lora" in name for name in saved.fingerprint["trainable_params"])


# --- another host count ---------------------------------------------------------


@pytest.mark.multihost
@pytest.mark.e2e
@pytest.mark.parametrize("num_hosts", [3, 1])
def test_two_host_checkpoint_resumes_on_another_host_count(full, tmp_path,
                                                           num_hosts):
  ckpt, out = tmp_path / "ckpt", tmp_path / f"hosts{num_hosts}"
  proc = _resume_copy(full["ref_ckpt"], ckpt, out, f"--num_hosts={num_hosts}")
  assert "written by 2 host(s)" in _resumed_from(proc)
  example_runs.assert_resumed_equal(
      full["ref"], out, first_step=3, steps=STEPS, exact=False)
  assert checkpointing.latest(str(ckpt)).num_hosts == num_hosts


# --- refused resumes and directories ----------------------------------------------


@pytest.mark.multihost
@pytest.mark.e2e
def test_checkpoint_of_another_configuration_is_refused_before_hosts_start(
    full):
  before = checkpointing.complete_steps(str(full["ref_ckpt"]))
  proc = _run(
      _command(full["ref"].parent / "other", full["ref_ckpt"], "--num_hosts=2",
               "--lora_rank=8", "--learner=drgrpo", "--batch_size=12"),
      expect_rc=2)
  err = proc.stderr.strip()
  assert "Traceback" not in err and "[launch]" not in proc.stdout, err
  assert len(err.splitlines()) == 1, err
  for name in ("lora_rank: checkpoint null, now 8",
               'learner: checkpoint "grpo", now "drgrpo"',
               "batch_size: checkpoint 6, now 12"):
    assert name in err, err
  assert checkpointing.complete_steps(str(full["ref_ckpt"])) == before


def test_unwritable_directory_is_refused(tmp_path):
  blocker = tmp_path / "a_file"
  blocker.write_text("")
  with pytest.raises(checkpointing.CheckpointError, match="not writable"):
    checkpointing.check_writable(str(blocker / "ckpt"))
  checkpointing.check_writable(str(tmp_path / "new" / "ckpt"))
  assert not list((tmp_path / "new" / "ckpt" / "actor").iterdir())


def test_example_refuses_an_unwritable_directory_before_hosts_start(
    tmp_path):
  blocker = tmp_path / "a_file"
  blocker.write_text("")
  proc = zygote.run(
      [sys.executable, str(example_runs.EXAMPLE), "--num_hosts=2",
       "--devices_per_host=1", "--batch_size=2", "--num_generations=2",
       f"--checkpoint_dir={blocker}/ckpt"],
      env=launch_utils.launcher_env(), capture_output=True, text=True,
      timeout=120)
  err = proc.stderr.strip()
  assert proc.returncode == 2, err[-3000:]
  assert len(err.splitlines()) == 1 and "Traceback" not in err, err[-3000:]
  assert f"Checkpoint directory '{blocker}/ckpt' is not writable" in err
  assert "[launch]" not in proc.stdout  # No host started.


def test_mismatch_names_parameters_and_values():
  saved = {"trainable_params": {"['a']['w']": [[64, 4], "float32"],
                                "['b']": [[2], "float32"]},
           "learner": "grpo", "only_saved": 1}
  now = {"trainable_params": {"['a']['w']": [[64, 8], "float32"],
                              "['b']": [[2], "float32"]},
         "learner": "grpo", "only_now": 2}
  assert checkpointing.mismatches(saved, now) == [
      "trainable_params: ['a']['w']: checkpoint [[64, 4], 'float32'], now"
      " [[64, 8], 'float32']"]
  assert checkpointing.mismatches(saved, saved) == []


def test_checkpoint_without_resume_state_is_refused(tmp_path):
  # A checkpoint Tunix wrote on its own (no data position): refused rather
  # than resumed inexactly.
  actor = checkpointing.actor_directory(str(tmp_path)) / "3"
  actor.mkdir(parents=True)
  (actor / "_CHECKPOINT_METADATA").write_text(
      json.dumps({"custom_metadata": {"global_step": 3}}))
  (actor / "commit_success.txt").write_text("")
  with pytest.raises(checkpointing.CheckpointError, match="no mcjax resume"):
    checkpointing.check_resume(str(tmp_path), {})


def test_config_rejects_bad_checkpoint_settings():
  from tunix_mcjax.recipes import job_config  # pylint: disable=g-import-not-at-top

  with pytest.raises(ValueError, match="checkpoint_every must be >= 1"):
    job_config.GrpoJobConfig(checkpoint_dir="/tmp/x", checkpoint_every=0)
  with pytest.raises(ValueError, match="needs backend='mcjax'"):
    job_config.GrpoJobConfig(checkpoint_dir="/tmp/x", backend="tunix")
  with pytest.raises(ValueError, match="max_to_keep"):
    job_config.GrpoJobConfig(max_to_keep=0)


@pytest.mark.multihost
@pytest.mark.e2e
def test_corrupt_latest_checkpoint_is_named_and_resume_step_goes_back(
    full, tmp_path):
  """The reference's checkpoints with step 4's largest array file cut in
  half: refused in one line naming the file; --resume_step 2 resumes from
  step 2 exactly as the uninterrupted run went on."""
  ckpt, out = tmp_path / "ckpt", tmp_path / "resumed"
  shutil.copytree(full["ref_ckpt"], ckpt)
  latest = checkpointing.actor_directory(str(ckpt)) / str(STEPS)
  cut = hand_checkpoints.largest_array_file(latest)
  size = hand_checkpoints.truncate(cut)
  cmd = _command(out, ckpt, "--num_hosts=2")
  refused = _run(cmd, expect_rc=2)
  err = refused.stderr.strip()
  assert len(err.splitlines()) == 1 and "Traceback" not in err, err
  assert f"Checkpoint {latest} is corrupt: {cut} is truncated" in err, err
  assert ("--resume_step 2 resumes from the previous complete checkpoint, or"
          f" delete {latest}.") in err, err
  assert "[launch]" not in refused.stdout  # No host started.
  proc = _run([*cmd, "--resume_step=2"])
  aside = ckpt / checkpointing.SET_ASIDE_SUBDIR
  assert f"set aside the later step(s) {STEPS} in {aside}" in proc.stdout
  assert "actor/2 (global step 2, data position 12" in _resumed_from(proc)
  example_runs.assert_resumed_equal(
      full["ref"], out, first_step=3, steps=STEPS, exact=True)
  # The resumed run wrote its own step 4; the damaged one is kept aside.
  assert checkpointing.complete_steps(str(ckpt)) == [2, STEPS]
  assert (aside / str(STEPS) / cut.relative_to(latest)).stat().st_size == size
  assert checkpointing.check_resume(str(ckpt), {}).step == STEPS


# --- corrupt checkpoints and --resume_step (hand-made, no hosts) --------------


@pytest.fixture(scope="module")
def hand_made(tmp_path_factory) -> pathlib.Path:
  """Real checkpoints of steps 2 and 4 (Tunix's saver, mcjax's metadata)."""
  root = tmp_path_factory.mktemp("hand_made") / "ckpt"
  hand_checkpoints.write(str(root))
  return root


def _copy(hand_made: pathlib.Path, tmp_path: pathlib.Path) -> str:
  root = tmp_path / "ckpt"
  shutil.copytree(hand_made, root)
  return str(root)


def _cut_array_file(step: pathlib.Path) -> pathlib.Path:
  path = hand_checkpoints.largest_array_file(step)
  hand_checkpoints.truncate(path)
  return path


def _remove_array_file(step: pathlib.Path) -> pathlib.Path:
  path = hand_checkpoints.largest_array_file(step)
  path.unlink()
  return path


def _garble(name: str):
  def garble(step: pathlib.Path) -> pathlib.Path:
    (step / name).write_text('{"item_handlers": {')
    return step / name
  return garble


def _cut_manifest(step: pathlib.Path) -> pathlib.Path:
  path = step / "model_params" / "manifest.ocdbt"
  hand_checkpoints.truncate(path)
  return path


def _drop_optimizer_state(step: pathlib.Path) -> pathlib.Path:
  # Tunix would restore the parameters alone and resume with a fresh Adam.
  shutil.rmtree(step / "optimizer_state")
  return step / "optimizer_state"


# damage -> (what it does to step 4, what the message says of the file).
_DAMAGE = {
    "truncated array file": (_cut_array_file, "is truncated"),
    "missing array file": (_remove_array_file, "is missing"),
    "unreadable step metadata": (_garble("_CHECKPOINT_METADATA"),
                                 "is not valid JSON"),
    "unreadable tree metadata": (_garble("model_params/_METADATA"),
                                 "is not valid JSON"),
    "truncated manifest": (_cut_manifest, "cannot be read"),
    "missing item": (_drop_optimizer_state, "is missing (listed in"),
}


def test_intact_checkpoints_pass_the_checks(hand_made, tmp_path):
  root = _copy(hand_made, tmp_path)
  for step in (2, 4):
    assert checkpointing.verify(hand_checkpoints.step_dir(root, step)) is None
  saved = checkpointing.check_resume(root, {})
  assert (saved.step, saved.global_step, saved.data_position) == (4, 4, 24)


@pytest.mark.parametrize("damage", sorted(_DAMAGE))
def test_a_corrupt_latest_checkpoint_is_one_line_naming_the_file(
    hand_made, tmp_path, damage):
  root = _copy(hand_made, tmp_path)
  latest = hand_checkpoints.step_dir(root, 4)
  harm, says = _DAMAGE[damage]
  path = harm(latest)
  with pytest.raises(checkpointing.CheckpointError) as info:
    checkpointing.check_resume(root, {})
  message = str(info.value)
  assert "\n" not in message
  assert message.startswith(f"Checkpoint {latest} is corrupt: {path} {says}")
  assert message.endswith(
      "; --resume_step 2 resumes from the previous complete checkpoint, or"
      f" delete {latest}.")
  # What --resume_step 2 then takes; the checks moved and deleted nothing.
  assert checkpointing.check_resume(
      root, {}, step=2, sets_aside_later=True).step == 2
  assert checkpointing.complete_steps(root) == [2, 4]


def test_no_intact_earlier_checkpoint_is_said(hand_made, tmp_path):
  root = _copy(hand_made, tmp_path)
  for step in (2, 4):
    _cut_array_file(hand_checkpoints.step_dir(root, step))
  actor = checkpointing.actor_directory(root)
  with pytest.raises(checkpointing.CheckpointError,
                     match="no earlier checkpoint there is intact") as info:
    checkpointing.check_resume(root, {})
  assert f"delete {actor} to start afresh" in str(info.value)
  with pytest.raises(checkpointing.CheckpointError,
                     match=f"Checkpoint {actor / '2'} is corrupt"):
    checkpointing.check_resume(root, {}, step=2, sets_aside_later=True)


def test_a_stray_numbered_directory_is_no_checkpoint(hand_made, tmp_path):
  root = _copy(hand_made, tmp_path)
  actor = checkpointing.actor_directory(root)
  (actor / "7").mkdir()
  # Orbax takes it for a step (and Tunix would restore it); mcjax does not.
  assert checkpointing.orbax_steps(root) == [2, 4, 7]
  assert checkpointing.complete_steps(root) == [2, 4]
  assert checkpointing.latest(root).step == 4
  with pytest.raises(checkpointing.CheckpointError) as info:
    checkpointing.check_resume(root, {})
  message = str(info.value)
  assert message.startswith(f"{actor / '7'} is not a checkpoint (it has no"
                            " _CHECKPOINT_METADATA)"), message
  assert "--resume_step 4 to resume from the latest complete" in message
  assert checkpointing.check_resume(
      root, {}, step=4, sets_aside_later=True).step == 4
  assert checkpointing.set_aside_later(root, 4) == [
      pathlib.Path(root) / checkpointing.SET_ASIDE_SUBDIR / "7"]
  assert checkpointing.orbax_steps(root) == [2, 4]
  assert checkpointing.check_resume(root, {}).step == 4
  # One below the latest: Orbax counts it among those it keeps (deletes).
  (actor / "1").mkdir()
  (actor / "1" / "notes.txt").write_text("not a checkpoint")
  with pytest.raises(checkpointing.CheckpointError,
                     match=r"actor/1 is not a checkpoint .* move it out"):
    checkpointing.check_resume(root, {})


def test_resume_step_takes_a_complete_checkpoint_and_sets_later_aside(
    hand_made, tmp_path):
  root = _copy(hand_made, tmp_path)
  actor = checkpointing.actor_directory(root)
  _cut_array_file(actor / "4")
  with pytest.raises(checkpointing.CheckpointError) as info:
    checkpointing.check_resume(root, {}, step=3, sets_aside_later=True)
  assert str(info.value) == (
      f"--resume_step 3: {actor} holds no complete checkpoint of step 3; its"
      " complete checkpoints are steps 2, 4.")
  # A host, which no launching process prepared, refuses the later step.
  with pytest.raises(checkpointing.CheckpointError,
                     match=r"still holds later steps \(4\)"):
    checkpointing.check_resume(root, {}, step=2)
  saved = checkpointing.check_resume(root, {}, step=2, sets_aside_later=True)
  assert (saved.step, saved.global_step, saved.data_position) == (2, 2, 12)
  assert checkpointing.complete_steps(root) == [2, 4]  # Checks move nothing.
  aside = pathlib.Path(root) / checkpointing.SET_ASIDE_SUBDIR
  moved = checkpointing.set_aside_later(root, 2)
  assert moved == [aside / "4"]
  assert "set aside the later step(s) 4 in" in (
      checkpointing.describe_set_aside(2, moved))
  assert checkpointing.complete_steps(root) == [2]
  assert checkpointing.check_resume(root, {}, step=2).step == 2  # The hosts'.
  # Tunix's manager now restores step 2.
  tiny, optimizer = hand_checkpoints.model(0.0)
  assert hand_checkpoints.manager(root).maybe_restore(tiny, optimizer)[0] == 2
  # A step set aside again keeps the one set aside before.
  shutil.copytree(actor / "2", actor / "4")
  assert checkpointing.set_aside_later(root, 2) == [aside / "4.1"]
  assert sorted(p.name for p in aside.iterdir()) == ["4", "4.1"]


# Orbax leaves the failed read's other coroutines unawaited.
@pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_restore_that_fails_is_one_line_naming_the_file(hand_made, tmp_path):
  root = _copy(hand_made, tmp_path)
  latest = hand_checkpoints.step_dir(root, 4)
  ckpts = checkpointing.ClusterCheckpoints(
      root=root, ledger=admission.StepLedger(), num_hosts=1, host_index=0)
  tiny, optimizer = hand_checkpoints.model(0.0)
  tc = types.SimpleNamespace(mini_batch_size=None,
                             train_micro_batch_size=None)
  assert ckpts.check(tiny, tc).step == 4
  # Damaged after the check: the restore inside Tunix fails.
  path = _cut_array_file(latest)
  with pytest.raises(checkpointing.CheckpointError) as info:
    with ckpts.restoring():
      hand_checkpoints.manager(root).maybe_restore(tiny, optimizer)
  message = str(info.value)
  assert "\n" not in message
  assert message.startswith(
      f"Restoring checkpoint {latest} failed: {path} is truncated"), message
  assert "--resume_step 2 resumes from the previous complete" in message
  # Damage no check sees without reading the arrays (the same size, other
  # bytes): the restore's own error, naming the store.
  root = _copy(hand_made, tmp_path / "zeroed")
  latest = hand_checkpoints.step_dir(root, 4)
  path = hand_checkpoints.largest_array_file(latest)
  path.write_bytes(bytes(path.stat().st_size))
  assert checkpointing.verify(latest) is None
  ckpts = checkpointing.ClusterCheckpoints(
      root=root, ledger=admission.StepLedger(), num_hosts=1, host_index=0)
  assert ckpts.check(tiny, tc).step == 4
  with pytest.raises(checkpointing.CheckpointError) as info:
    with ckpts.restoring():
      hand_checkpoints.manager(root).maybe_restore(tiny, optimizer)
  message = str(info.value)
  assert message.startswith(f"Restoring checkpoint {latest} failed:")
  assert f'local file "{latest}/model_params/"' in message, message
  # Other errors pass through unchanged.
  with pytest.raises(KeyError):
    with ckpts.restoring():
      raise KeyError("not a restore")
  # The failed reads' coroutines go now, under this test's filter.
  del info
  gc.collect()


def test_example_refuses_a_corrupt_checkpoint_before_hosts_start(
    hand_made, tmp_path):
  root = _copy(hand_made, tmp_path)
  path = _cut_array_file(hand_checkpoints.step_dir(root, 4))
  base = [sys.executable, str(example_runs.EXAMPLE), "--num_hosts=2",
          "--devices_per_host=1", "--batch_size=2", "--num_generations=2",
          f"--checkpoint_dir={root}"]
  for args, says in (((), f"{path} is truncated"),
                     (("--resume_step=3",),
                      "its complete checkpoints are steps 2, 4.")):
    proc = zygote.run(
        [*base, *args], env=launch_utils.launcher_env(), capture_output=True,
        text=True, timeout=120)
    err = proc.stderr.strip()
    assert proc.returncode == 2, err[-3000:]
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err[-3000:]
    assert says in err, err
    assert "[launch]" not in proc.stdout  # No host started.
  assert checkpointing.complete_steps(root) == [2, 4]


def test_config_rejects_a_resume_step_without_a_directory():
  from tunix_mcjax.recipes import job_config  # pylint: disable=g-import-not-at-top

  with pytest.raises(ValueError, match="--resume_step=2 needs"
                     " --checkpoint_dir"):
    job_config.GrpoJobConfig(resume_step=2)
  with pytest.raises(ValueError, match="a step >= 0"):
    job_config.GrpoJobConfig(checkpoint_dir="/tmp/x", resume_step=-1)


# --- admission on resume (no hosts) ---------------------------------------------


def _batches(n: int, size: int) -> list[dict[str, list[str]]]:
  return [{"prompts": [f"p{b}_{i}" for i in range(size)]} for b in range(n)]


@pytest.mark.parametrize("num_hosts", [1, 2, 3])
def test_resumed_admission_skips_to_the_data_position(num_hosts):
  """Fast-forwarded batches take no row ids; identities continue at the
  saved position on any host count."""
  rows = []
  for host in range(num_hosts):
    ledger = admission.StepLedger()
    ds = admission.Admission(
        admission.AdmissionConfig(num_hosts=num_hosts, host_index=host,
                                  num_generations=2),
        ledger=ledger,
    ).shard(_batches(5, 6), resume=admission.ResumeAt(
        data_position=12, fast_forward_micro_batches=2))
    yielded = list(ds)
    # 2 fast-forward copies the learner discards, then batches 2, 3, 4.
    assert len(yielded) == 5
    assert yielded[2]["prompts"][0].startswith("p2_")
    entries = ledger.entries
    assert [e.stream_end for e in entries] == [18, 24, 30]
    rows.append(entries[0].row_ids[:, 0])
  # The union over hosts: prompts 12..17, each twice (G = 2).
  assert sorted(np.concatenate(rows).tolist()) == sorted(
      list(range(12, 18)) * 2)


# --- the cluster's side (checkpointing.ClusterCheckpoints, no hosts) --------


def test_cluster_checkpoints_without_a_directory_do_nothing():
  ckpts = checkpointing.ClusterCheckpoints(
      root=None, ledger=admission.StepLedger(), num_hosts=2, host_index=0)
  # No manager methods: any save or wrap would fail on object().
  trainer = types.SimpleNamespace(train_steps=3, checkpoint_manager=object())
  assert ckpts.check(actor=None, training_config=None) is None
  ckpts.attach(trainer, lambda: 0)
  ckpts.save_final(trainer, global_step=3)
  assert not hasattr(trainer, "custom_checkpoint_metadata_fn")
  assert ckpts.metadata(3)["mcjax"]["fingerprint"] == {}


def test_cluster_checkpoints_save_the_data_position_of_the_step(tmp_path):
  ledger = admission.StepLedger()
  ds = iter(admission.Admission(
      admission.AdmissionConfig(num_hosts=1, host_index=0, num_generations=2),
      ledger=ledger,
  ).shard(_batches(3, 6)))
  ckpts = checkpointing.ClusterCheckpoints(
      root=str(tmp_path), ledger=ledger, num_hosts=1, host_index=0)
  manager = object()
  trainer = types.SimpleNamespace(train_steps=0, checkpoint_manager=manager)
  global_steps = 0
  ckpts.attach(trainer, lambda: global_steps)
  assert isinstance(trainer.checkpoint_manager, checkpointing.SaveErrors)
  next(ds)
  next(ds)  # A prefetched batch: the step's is the oldest open one.
  # Tunix saves inside the step, before the cluster counts it.
  saved = trainer.custom_checkpoint_metadata_fn()
  assert saved["global_step"] == 1
  assert saved["mcjax"]["data_position"] == 6
  ledger.take(12)
  ckpts.step_closed(ledger.close_step().batch)
  global_steps = 1
  assert ckpts.data_position == 6
  assert trainer.custom_checkpoint_metadata_fn()["mcjax"]["data_position"] == 12
  ckpts.step_closed(None)  # A step without a batch moves nothing.
  assert ckpts.data_position == 6
  tc = types.SimpleNamespace(train_micro_batch_size=None, mini_batch_size=3)
  assert ckpts.dataset_resume(trainer, tc) is None  # A fresh start.
  trainer.train_steps, trainer.iter_steps = 2, 4
  assert ckpts.dataset_resume(trainer, tc) == admission.ResumeAt(
      data_position=6, fast_forward_micro_batches=4, micro_batch_size=3)


def test_cluster_checkpoints_refuse_a_restore_they_did_not_check(tmp_path):
  ckpts = checkpointing.ClusterCheckpoints(
      root=str(tmp_path), ledger=admission.StepLedger(), num_hosts=1,
      host_index=0)
  published = []
  with pytest.raises(RuntimeError, match="another process wrote to"):
    ckpts.resume(types.SimpleNamespace(train_steps=2),
                 lambda: published.append(1))
  assert not published


def test_resume_off_a_batch_boundary_is_an_error():
  ds = admission.Admission(
      admission.AdmissionConfig(num_hosts=1, host_index=0, num_generations=2),
  ).shard(_batches(3, 6), resume=admission.ResumeAt(data_position=7))
  with pytest.raises(ValueError, match="not at a batch boundary"):
    list(ds)


def test_failed_save_names_the_directory_and_the_intact_checkpoint(tmp_path):
  """A save that cannot write (a file-size limit standing in for a full
  disk) is a CheckpointError, and the previous checkpoint stays loadable."""
  import resource  # pylint: disable=g-import-not-at-top

  from flax import nnx  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  from tunix.sft import checkpoint_manager  # pylint: disable=g-import-not-at-top

  class Model(nnx.Module):

    def __init__(self, value: float):
      # Random values: ocdbt compresses, a constant would fit any limit.
      self.w = nnx.Param(value + jnp.asarray(
          np.random.default_rng(0).random((256, 256)), jnp.float32))

  root = str(tmp_path)
  manager = checkpointing.SaveErrors(
      checkpoint_manager.CheckpointManager(
          str(checkpointing.actor_directory(root)),
          ocp.CheckpointManagerOptions(
              enable_async_checkpointing=False)),
      root)
  assert manager.save(1, Model(1.0), force=True, custom_metadata={})
  limits = resource.getrlimit(resource.RLIMIT_FSIZE)
  handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
  # The 256 KiB parameter cannot be written; small metadata files can.
  resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, limits[1]))
  try:
    with pytest.raises(checkpointing.CheckpointError,
                       match="step 1, is intact") as info:
      manager.save(2, Model(2.0), force=True, custom_metadata={})
  finally:
    resource.setrlimit(resource.RLIMIT_FSIZE, limits)
    signal.signal(signal.SIGXFSZ, handler)
  assert "while saving step 2" in str(info.value)
  assert checkpointing.complete_steps(root) == [1]
  restored = Model(0.0)
  assert manager.maybe_restore(restored)[0] == 1
  np.testing.assert_array_equal(np.asarray(restored.w[...]),
                                np.asarray(Model(1.0).w[...]))
  manager.close()
