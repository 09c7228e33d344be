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

"""Bad inputs: dataset rows, long prompts, reward functions, vocabulary."""

from __future__ import annotations

import inspect
import json
import math
import pathlib

import numpy as np
import pytest

from tunix_mcjax.recipes import job_checks
from tunix_mcjax.recipes import job_config
from tunix_mcjax.recipes import models
from tunix_mcjax.recipes import tasks
from tunix_mcjax.recipes import validation

InputError = validation.InputError


def _write_gsm8k(path: pathlib.Path, questions: list[str]) -> str:
  path.write_text("".join(
      json.dumps({"question": q, "answer": f"#### {i}"}) + "\n"
      for i, q in enumerate(questions)))
  return str(path)


def _chars(prompts):
  # One token per character: lengths are easy to reason about.
  return [len(p) for p in prompts]


# --- Dataset rows ----------------------------------------------------------


def test_check_batches_names_the_missing_field_and_the_fix():
  batches = [{"prompts": np.asarray(["a:", "b:"])}]
  with pytest.raises(InputError, match=r"batch 0 .*\['answer'\].*answer"):
    validation.check_batches(batches)


def test_check_batches_names_the_empty_prompt_by_global_row():
  batches = tasks.toy_dataset(num_batches=2, batch_size=3, seed=0)
  batches[1]["prompts"][1] = "  "
  with pytest.raises(InputError, match=r"row 4 \(batch 1, position 1\).*"
                     r"empty"):
    validation.check_batches(batches)


def test_check_batches_refuses_ragged_fields():
  batches = [{"prompts": np.asarray(["a:", "b:"]), "answer": np.asarray(["a"])}]
  with pytest.raises(InputError, match="'answer' has 1 entries"):
    validation.check_batches(batches)


def test_gsm8k_row_without_question_names_file_and_line(tmp_path):
  path = tmp_path / "train.jsonl"
  path.write_text(json.dumps({"question": "q?", "answer": "#### 1"}) + "\n"
                  + json.dumps({"answer": "#### 2"}) + "\n")
  with pytest.raises(InputError, match=r"train.jsonl:2 .*'question'"):
    validation.prepare_dataset(
        f"gsm8k:{path}", batch_size=1, num_batches=1, seed=0,
        length_fn=_chars, max_prompt_length=10_000)


def test_gsm8k_empty_question_names_file_and_line(tmp_path):
  path = _write_gsm8k(tmp_path / "train.jsonl", ["q?", "   "])
  with pytest.raises(InputError, match=r"train.jsonl:2.*empty"):
    validation.prepare_dataset(
        f"gsm8k:{path}", batch_size=1, num_batches=1, seed=0,
        length_fn=_chars, max_prompt_length=10_000)


def test_missing_dataset_file_is_an_input_error(tmp_path):
  with pytest.raises(InputError, match="does not exist"):
    validation.prepare_dataset(
        f"gsm8k:{tmp_path}/nope.jsonl", batch_size=1, num_batches=1, seed=0,
        length_fn=_chars, max_prompt_length=100)


# --- Long prompts ----------------------------------------------------------


def test_long_prompt_is_an_error_naming_the_row_and_the_flags(tmp_path):
  base = len(tasks.gsm8k_prompt(""))
  path = _write_gsm8k(tmp_path / "train.jsonl", ["short", "x" * 50, "ok"])
  with pytest.raises(InputError, match=r"row 2 \(of 3; 1 too long\).*"
                     r"--max_prompt_length.*--skip_long_prompts"):
    validation.prepare_dataset(
        f"gsm8k:{path}", batch_size=2, num_batches=1, seed=0,
        length_fn=_chars, max_prompt_length=base + 10)


def test_skip_long_prompts_drops_them_from_the_global_rows(tmp_path):
  base = len(tasks.gsm8k_prompt(""))
  questions = ["q0", "x" * 50, "q2", "q3", "y" * 60]
  path = _write_gsm8k(tmp_path / "train.jsonl", questions)
  data = validation.prepare_dataset(
      f"gsm8k:{path}", batch_size=3, num_batches=2, seed=7,
      length_fn=_chars, max_prompt_length=base + 10, skip_long_prompts=True)
  assert (data.dropped, data.rows) == (2, 5)
  prompts = [p for b in data.batches for p in b["prompts"]]
  assert len(prompts) == 6 and all(len(p) <= base + 10 for p in prompts)
  # The kept rows, reshuffled as the unfiltered rows would be: the same
  # batches on every host (a pure function of the file and the seed).
  again = validation.prepare_dataset(
      f"gsm8k:{path}", batch_size=3, num_batches=2, seed=7,
      length_fn=_chars, max_prompt_length=base + 10, skip_long_prompts=True)
  for a, b in zip(data.batches, again.batches):
    np.testing.assert_array_equal(a["prompts"], b["prompts"])
    np.testing.assert_array_equal(a["answer"], b["answer"])


def test_skip_long_prompts_refuses_when_nothing_fits(tmp_path):
  path = _write_gsm8k(tmp_path / "train.jsonl", ["a", "b"])
  with pytest.raises(InputError, match="dropped all 2 rows"):
    validation.prepare_dataset(
        f"gsm8k:{path}", batch_size=1, num_batches=1, seed=0,
        length_fn=_chars, max_prompt_length=3, skip_long_prompts=True)


def test_drop_long_rows_keeps_order_and_counts():
  batches = [{"prompts": np.asarray(["a", "bbbb", "c"]),
              "answer": np.asarray(["1", "2", "3"])},
             {"prompts": np.asarray(["d", "e", "ffff"]),
              "answer": np.asarray(["4", "5", "6"])}]
  out, dropped = validation.drop_long_rows(
      batches, length_fn=_chars, max_prompt_length=2, num_batches=1)
  assert dropped == 2
  assert out[0]["prompts"].tolist() == ["a", "c", "d"]
  assert out[0]["answer"].tolist() == ["1", "3", "4"]
  with pytest.raises(InputError, match="fewer than the 6"):
    validation.drop_long_rows(
        batches, length_fn=_chars, max_prompt_length=2, num_batches=2)


def test_toy_prompt_longer_than_the_budget_names_the_row():
  with pytest.raises(InputError, match=r"dataset row 0 \(batch 0, position 0"
                     r"\).*3 tokens.*max_prompt_length=2"):
    validation.prepare_dataset(
        "toy", batch_size=2, num_batches=1, seed=0,
        length_fn=validation.sampler_prompt_lengths(models.ToyTokenizer()),
        max_prompt_length=2)


def test_sampler_prompt_lengths_count_bos_like_the_sampler():
  lengths = validation.sampler_prompt_lengths(models.ToyTokenizer())
  # bos + "c" + ":" (the demo's max_prompt_length of 4 fits it).
  assert lengths(["c:", ""]) == [3, 1]


def test_eval_dataset_skip_keeps_the_first_rows_that_fit(tmp_path):
  base = len(tasks.gsm8k_prompt(""))
  _write_gsm8k(tmp_path / "test.jsonl", ["a", "x" * 40, "b", "c"])
  _write_gsm8k(tmp_path / "train.jsonl", ["t"])
  data = validation.prepare_eval_dataset(
      f"gsm8k:{tmp_path}/train.jsonl", batch_size=3, num_batches=1, seed=0,
      length_fn=_chars, max_prompt_length=base + 5, skip_long_prompts=True)
  assert data.dropped == 1
  assert [p[-10:] for p in data.batches[0]["prompts"]] == [
      tasks.gsm8k_prompt(q)[-10:] for q in ("a", "b", "c")]
  with pytest.raises(InputError, match="evaluation dataset row 1"):
    validation.prepare_eval_dataset(
        f"gsm8k:{tmp_path}/train.jsonl", batch_size=2, num_batches=1, seed=0,
        length_fn=_chars, max_prompt_length=base + 5)


# --- Rewards -----------------------------------------------------------------


def _call(fn, n=4, **extra):
  # As Tunix's SequenceRewardManager calls a reward function.
  prompts = [f"p{i}" for i in range(n)]
  return fn(prompts=prompts, completions=[f"c{i}" for i in range(n)],
            answer=np.asarray([f"a{i}" for i in range(n)]), mode="train",
            **extra)


def test_good_rewards_pass_unchanged_with_name_and_signature():
  def my_reward(prompts, completions, answer, **kwargs):
    del prompts, kwargs
    return [float(c[-1] == a[-1]) + 0.25 for c, a in zip(completions, answer)]

  (checked,) = validation.checked_reward_fns(my_reward)
  assert checked.__name__ == "my_reward"
  assert inspect.signature(checked) == inspect.signature(my_reward)
  assert _call(checked) == _call(my_reward) == [1.25] * 4


def test_a_raising_reward_names_the_function_and_the_row():
  def picky(prompts, completions, answer, **kwargs):
    del prompts, kwargs
    return [1.0 / (int(c[1:]) - 2) for c, _ in zip(completions, answer)]

  (checked,) = validation.checked_reward_fns([picky])
  with pytest.raises(InputError, match=r"'picky' raised ZeroDivisionError.*"
                     r"row 2 of 4 .*'p2'.*'c2'"):
    _call(checked)


def test_a_nan_reward_is_an_error_not_silent_zero():
  def sometimes_nan(prompts, completions, **kwargs):
    del prompts, kwargs
    return [math.nan if c == "c3" else 0.5 for c in completions]

  (checked,) = validation.checked_reward_fns([sometimes_nan])
  with pytest.raises(InputError, match=r"'sometimes_nan' returned nan for row"
                     r" 3 of 4.*finite"):
    _call(checked)


@pytest.mark.parametrize("result", [[1.0] * 3, np.ones(5), None, ["x"] * 4,
                                    [[1.0]] * 4])
def test_a_wrong_result_is_an_error(result):
  def bad(prompts, completions, **kwargs):
    del prompts, completions, kwargs
    return result

  (checked,) = validation.checked_reward_fns([bad])
  with pytest.raises(InputError, match="'bad' returned"):
    _call(checked)


def test_the_checked_rewards_train_like_tunix_sums_them():
  # Tunix's reward manager passes config values a function names; the
  # wrapper must keep that working (signature through __wrapped__).
  from tunix.rl import reward_manager  # pylint: disable=g-import-not-at-top
  from tunix.rl.grpo import grpo_learner  # pylint: disable=g-import-not-at-top

  def uses_beta(prompts, completions, beta, **kwargs):
    del prompts, kwargs
    return [beta] * len(completions)

  fns = validation.checked_reward_fns([uses_beta, tasks.toy_match_reward])
  manager = reward_manager.SequenceRewardManager(
      fns, grpo_learner.GRPOConfig(beta=0.5, num_generations=2))
  out = manager(prompts=["a:", "b:"], completions=["aaa", "bbb"],
                answer=np.asarray(["aaaaaaaa", "bbbbbbbb"]), mode="train")
  np.testing.assert_allclose(out["rewards"], [0.5 + 3 / 8] * 2)


def test_a_nan_reward_stops_tunix_reward_manager_naming_the_function():
  # What the learner calls (RLLearner._compute_rewards): the error reaches
  # it instead of np.nansum's silent 0 (the job then exits 2 with this line).
  from tunix.rl import reward_manager  # pylint: disable=g-import-not-at-top
  from tunix.rl.grpo import grpo_learner  # pylint: disable=g-import-not-at-top

  def flaky_judge(prompts, completions, **kwargs):
    del prompts, kwargs
    return [math.nan if c == "bbb" else 1.0 for c in completions]

  def run(fns):
    manager = reward_manager.SequenceRewardManager(
        fns, grpo_learner.GRPOConfig(num_generations=2))
    return manager(prompts=["a:", "b:"], completions=["aaa", "bbb"],
                   answer=np.asarray(["aaaaaaaa", "bbbbbbbb"]), mode="train")

  # Unchecked, Tunix trains on the NaN as if it were 0 ...
  assert run([flaky_judge])["rewards"].tolist() == [1.0, 0.0]
  # ... checked, it is an error naming the function and the row.
  with pytest.raises(InputError, match=r"'flaky_judge' returned nan for row 1"
                     r" of 2 on this host \(prompt 'b:'"):
    run(validation.checked_reward_fns([flaky_judge]))


# --- Vocabulary ---------------------------------------------------------------


def test_tokenizer_larger_than_the_model_is_an_error():
  tok = models.ToyTokenizer(models.PRINTABLE_ALPHABET)
  model_vocab = models.tiny_qwen3_config().vocab_size
  assert validation.tokenizer_vocab_size(tok) > model_vocab
  with pytest.raises(InputError, match=rf"{len(tok)} ids .*only"
                     rf" {model_vocab}"):
    validation.check_vocab(validation.tokenizer_vocab_size(tok), model_vocab,
                           model="tiny")
  validation.check_vocab(len(models.ToyTokenizer()), model_vocab, model="tiny")


# --- Pre-start checks of the example's job -----------------------------------


@pytest.mark.parametrize("changes, message", [
    (dict(batch_size=6), r"--batch_size=6 is global and must divide over 4"),
    (dict(engine="nope"), r"--engine='nope' is not a registered engine"),
    (dict(dataset="gsm8k:/no/such.jsonl"), r"'/no/such.jsonl' is not a file"),
    (dict(model="/no/such/ckpt"), r"--model='/no/such/ckpt' is not 'tiny'"),
    (dict(dataset="tox"), r"--dataset='tox' is not 'toy'"),
])
def test_check_job_refuses_before_any_host_starts(changes, message):
  cfg = job_config.GrpoJobConfig(**changes)
  with pytest.raises(InputError, match=message):
    job_checks.check_job(cfg, num_hosts=4, devices_per_host=2)


def test_check_job_accepts_the_demo_and_returns_the_mesh():
  choice = job_checks.check_job(job_config.GrpoJobConfig(), num_hosts=2,
                                devices_per_host=4)
  assert choice.kind in ("fsdp", "hsdp")


def test_builtin_engine_names_are_the_registered_ones():
  from tunix_mcjax import engines  # pylint: disable=g-import-not-at-top,unused-import
  from tunix_mcjax.registry import ENGINES  # pylint: disable=g-import-not-at-top

  ours = {n for n in ENGINES.names()
          if ENGINES.get(n).__module__.startswith("tunix_mcjax.")}
  assert ours == set(job_checks.BUILTIN_ENGINES)
