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

"""Tests of the toy and GSM8K datasets and their reward functions."""

from __future__ import annotations

import json
import pathlib
import threading

import jax
import numpy as np
import pytest

from tunix_mcjax.recipes import tasks

SHARED_GSM8K = (
    pathlib.Path(__file__).resolve().parents[3] / "shared/data/gsm8k"
)

_ROWS = [
    {"question": "Tom has 3 apples and buys 4 more. How many?",
     "answer": "3 + 4 = <<3+4=7>>7\n#### 7"},
    {"question": "A shirt costs $1,200 and is 25% off. Price?",
     "answer": "1200 * 0.75 = 900\n#### 900"},
    {"question": "What is 5 - 12?", "answer": "#### -7"},
]


def _write_jsonl(path: pathlib.Path, rows: list[dict[str, str]]) -> str:
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  return str(path)


def _tunix_repeat(batch: dict[str, np.ndarray], g: int) -> dict[str, object]:
  # What Tunix's learner does to every batch before rollout.
  return jax.tree.map(lambda x: np.repeat(x, g, axis=0), batch)


# ----------------------------------------------------------------------------
# Toy task.


def test_toy_dataset_shapes_and_content():
  batches = tasks.toy_dataset(num_batches=3, batch_size=5, seed=0)
  assert len(batches) == 3
  for batch in batches:
    assert set(batch) == {"prompts", "answer"}
    assert isinstance(batch["prompts"], np.ndarray)
    assert batch["prompts"].shape == batch["answer"].shape == (5,)
    for prompt, answer in zip(batch["prompts"], batch["answer"]):
      letter = prompt[0]
      assert letter in tasks.TOY_LETTERS
      assert prompt == tasks.toy_prompt(letter) == f"{letter}:"
      assert answer == letter * tasks.TOY_COMPLETION_LENGTH


def test_toy_dataset_is_deterministic_and_seed_dependent():
  def flat(seed):
    return [
        p
        for b in tasks.toy_dataset(num_batches=4, batch_size=8, seed=seed)
        for p in b["prompts"].tolist()
    ]

  assert flat(1) == flat(1)
  assert flat(1) != flat(2)
  # A varied stream, not one letter.
  assert len(set(flat(1))) > 3


def test_toy_batches_survive_tunix_repeat():
  batch = tasks.toy_dataset(num_batches=1, batch_size=3, seed=0)[0]
  repeated = _tunix_repeat(batch, 4)
  assert repeated["prompts"].tolist() == [
      p for p in batch["prompts"].tolist() for _ in range(4)
  ]
  # Lists would not: Tunix's tree.map treats each string as a leaf.
  broken = _tunix_repeat({"prompts": batch["prompts"].tolist()}, 4)
  assert not isinstance(broken["prompts"][0], str)


def test_toy_match_reward_values():
  answer = ["cccccccc"] * 6
  completions = [
      "cccccccc",  # All correct.
      "abababab",  # None.
      "ccccabab",  # Half.
      "cc",  # Stopped early: missing positions count as misses.
      "ccccccccxyz",  # Characters past the answer are ignored.
      "",
  ]
  rewards = tasks.toy_match_reward(
      prompts=["c:"] * 6, completions=completions, answer=answer, mode="train"
  )
  assert rewards == [1.0, 0.0, 0.5, 0.25, 1.0, 0.0]
  assert all(isinstance(r, float) for r in rewards)


def test_toy_match_reward_is_per_row():
  rewards = tasks.toy_match_reward(
      ["a:", "b:"], ["aaaaaaaa", "aaaaaaaa"], np.array(["a" * 8, "b" * 8])
  )
  assert rewards == [1.0, 0.0]
  with pytest.raises(ValueError, match="answer"):
    tasks.toy_match_reward(["a:"], ["a", "b"], ["a" * 8])


def test_demo_defaults_validate():
  d = tasks.DEMO_DEFAULTS
  assert d.max_tokens_to_generate >= tasks.TOY_COMPLETION_LENGTH
  assert d.kv_cache_size >= d.max_prompt_length + d.max_tokens_to_generate
  with pytest.raises(ValueError, match="num_generations"):
    tasks.DemoDefaults(num_generations=1)
  with pytest.raises(ValueError, match="max_tokens_to_generate"):
    tasks.DemoDefaults(max_tokens_to_generate=2)
  with pytest.raises(ValueError, match="kv_cache_size"):
    tasks.DemoDefaults(kv_cache_size=4)
  with pytest.raises(ValueError, match="learning_rate"):
    tasks.DemoDefaults(learning_rate=0.0)


# ----------------------------------------------------------------------------
# GSM8K answer extraction.


@pytest.mark.parametrize(
    "text,expected",
    [
        ("so the answer is 72", "72"),
        ("#### 72", "72"),
        ("She pays $1,234.50.", "1234.50"),
        ("It is 18.", "18"),
        ("3 + 4 = 7 apples. #### 7\n", "7"),
        ("first 5 then #### $1,000", "1000"),
        ("a #### 3 b #### 4", "4"),  # The last marker wins.
        ("#### -7", "-7"),
        ("the result is \u221212", "-12"),  # Unicode minus.
        ("so \\boxed{42} and then 7 more", "42"),
        ("\\boxed{\\text{11}} \\boxed{12}", "12"),
        ("\\boxed{1{2}", "1"),  # Unclosed brace: still answers.
        ("It costs 3.5.", "3.5"),
        ("version 3.5.1", "1"),  # The last number is "1" after ".".
        ("no digits here", None),
        ("#### done", None),  # A marker without a number is no answer.
        ("---", None),
        ("", None),
    ],
)
def test_extract_final_number(text, expected):
  assert tasks.extract_final_number(text) == expected


def test_numbers_equal():
  assert tasks.numbers_equal("72", "72.0")
  assert tasks.numbers_equal("-7", "-7.00")
  assert not tasks.numbers_equal("72", "73")
  assert not tasks.numbers_equal(None, "1")
  assert not tasks.numbers_equal("9" * 400, "9" * 400)  # inf is no answer.


def test_gold_answer():
  assert tasks.gsm8k_gold_answer("work\n#### 1,200") == "1,200"
  assert tasks.gsm8k_gold_answer("42") == "42"


def _run_with_timeout(fn, timeout_s: float):
  result, error = [], []

  def target():
    try:
      result.append(fn())
    except Exception as e:  # pylint: disable=broad-exception-caught
      error.append(e)

  thread = threading.Thread(target=target, daemon=True)
  thread.start()
  thread.join(timeout_s)
  assert not thread.is_alive(), f"did not finish within {timeout_s} s"
  if error:
    raise error[0]
  return result[0]


@pytest.mark.parametrize(
    "text",
    [
        "1," * 100_000,
        "-" * 200_000,
        "1.1." * 50_000,
        "9" * 200_000,
        "#### " * 40_000,
        "\\boxed{" * 30_000,
        "{" * 200_000 + "\\boxed{" + "}" * 1000,
        "a " * 100_000 + "#### " + "-" * 100_000,
        "1 " * 100_000,
    ],
    ids=["commas", "minus", "dots", "digits", "markers", "boxed", "braces",
         "marker-tail", "many-numbers"],
)
def test_extraction_is_fast_on_pathological_strings(text):
  # Backtracking regexes take minutes to hours on these; linear code takes
  # milliseconds. The generous timeout keeps slow CI machines green.
  def work():
    tasks.extract_final_number(text)
    tasks.gsm8k_format_reward([""], [text])
    return tasks.gsm8k_answer_reward([""], [text], ["#### 1"])

  assert len(_run_with_timeout(work, 30)) == 1


def test_gsm8k_rewards():
  completions = [
      "4 + 3 = 7\n#### 7",
      "the answer is 7",
      "#### 8",
      "nothing",
      "#### $7.00",
  ]
  gold = ["7"] * 5
  assert tasks.gsm8k_answer_reward(
      [""] * 5, completions, gold, mode="train"
  ) == [1.0, 1.0, 0.0, 0.0, 1.0]
  f = tasks.GSM8K_FORMAT_REWARD
  assert tasks.gsm8k_format_reward([""] * 5, completions) == [
      f, 0.0, f, 0.0, f,
  ]
  # Gold given as a full solution works too.
  assert tasks.gsm8k_answer_reward(
      [""], ["#### 900"], [_ROWS[1]["answer"]]
  ) == [1.0]
  with pytest.raises(ValueError, match="answer"):
    tasks.gsm8k_answer_reward([""], ["1", "2"], ["1"])


# ----------------------------------------------------------------------------
# GSM8K data.


def test_load_gsm8k(tmp_path):
  path = _write_jsonl(tmp_path / "g.jsonl", _ROWS)
  assert tasks.load_gsm8k(path) == _ROWS
  assert tasks.load_gsm8k(path, limit=2) == _ROWS[:2]
  with pytest.raises(FileNotFoundError, match="does not exist"):
    tasks.load_gsm8k(tmp_path / "missing.jsonl")
  bad = tmp_path / "bad.jsonl"
  bad.write_text('{"question": "q"}\n')
  with pytest.raises(ValueError, match="bad.jsonl:1"):
    tasks.load_gsm8k(bad)
  (tmp_path / "empty.jsonl").write_text("\n")
  with pytest.raises(ValueError, match="no rows"):
    tasks.load_gsm8k(tmp_path / "empty.jsonl")
  with pytest.raises(ValueError, match="limit"):
    tasks.load_gsm8k(path, limit=0)


def test_load_gsm8k_refuses_bytes_and_values_that_are_not_text(tmp_path):
  good = json.dumps(_ROWS[0])
  binary = tmp_path / "binary.jsonl"
  binary.write_bytes(good.encode() + b'\n{"question": "a\xff", "answer": "1"}\n')
  with pytest.raises(ValueError) as e:
    tasks.load_gsm8k(binary)
  assert str(e.value).startswith(f"{binary}:2 is not UTF-8 text (byte 0xff")
  null = tmp_path / "null.jsonl"
  null.write_text(good + '\n\n{"question": null, "answer": "#### 3"}\n')
  with pytest.raises(ValueError, match=r"null.jsonl:3: 'question' is null,"
                     r" not text"):
    tasks.load_gsm8k(null)
  listed = tmp_path / "listed.jsonl"
  listed.write_text('{"question": "q", "answer": ["#### 3"]}\n')
  with pytest.raises(ValueError, match=r"listed.jsonl:1: 'answer' is"):
    tasks.load_gsm8k(listed)
  # A bare number is a gold answer, read as its text.
  number = tmp_path / "number.jsonl"
  number.write_text('{"question": "q", "answer": 42}\n')
  assert tasks.load_gsm8k(number) == [{"question": "q", "answer": "42"}]


def test_gsm8k_batches(tmp_path):
  rows = tasks.load_gsm8k(_write_jsonl(tmp_path / "g.jsonl", _ROWS))
  batches = tasks.gsm8k_batches(rows, batch_size=2, num_batches=5, seed=3)
  assert len(batches) == 5
  assert all(b["prompts"].shape == b["answer"].shape == (2,) for b in batches)
  again = tasks.gsm8k_batches(rows, batch_size=2, num_batches=5, seed=3)
  for a, b in zip(batches, again):
    np.testing.assert_array_equal(a["prompts"], b["prompts"])
  # Rows are reused across epochs; each epoch is a permutation.
  seen = [p for b in batches for p in b["prompts"].tolist()]
  assert sorted(seen[:3]) == sorted(tasks.gsm8k_prompt(r["question"])
                                    for r in rows)
  by_prompt = {tasks.gsm8k_prompt(r["question"]): r for r in rows}
  for b in batches:
    for p, a in zip(b["prompts"], b["answer"]):
      assert a == tasks.gsm8k_gold_answer(by_prompt[p]["answer"])
      assert p.startswith("Solve") and p.endswith("Answer:")


def test_dataset_from_spec(tmp_path):
  batches, fns = tasks.dataset_from_spec(
      "toy", batch_size=4, num_batches=2, seed=0
  )
  assert len(batches) == 2 and fns == [tasks.toy_match_reward]
  path = _write_jsonl(tmp_path / "g.jsonl", _ROWS)
  batches, fns = tasks.dataset_from_spec(
      f"gsm8k:{path}", batch_size=4, num_batches=2, seed=0
  )
  assert [b["prompts"].shape for b in batches] == [(4,), (4,)]
  assert fns == [tasks.gsm8k_answer_reward, tasks.gsm8k_format_reward]
  # Rewarding the gold solutions themselves gives full marks.
  gold = [r["answer"] for r in _ROWS]
  finals = [tasks.gsm8k_gold_answer(g) for g in gold]
  assert fns[0]([""] * 3, gold, finals) == [1.0, 1.0, 1.0]


@pytest.mark.parametrize(
    "spec,kwargs,error,match",
    [
        ("mnist", {}, ValueError, "Unknown dataset spec"),
        ("gsm8k:", {}, ValueError, "needs a path"),
        ("gsm8k:/nonexistent/x.jsonl", {}, FileNotFoundError, "does not exist"),
        ("toy", {"batch_size": 0}, ValueError, "batch_size"),
        ("toy", {"num_batches": 0}, ValueError, "num_batches"),
    ],
)
def test_dataset_from_spec_errors(spec, kwargs, error, match):
  args = {"batch_size": 2, "num_batches": 1, "seed": 0, **kwargs}
  with pytest.raises(error, match=match):
    tasks.dataset_from_spec(spec, **args)


@pytest.mark.skipif(
    not (SHARED_GSM8K / "test.jsonl").exists(),
    reason="shared GSM8K data not present",
)
def test_every_shared_gsm8k_gold_answer_parses():
  rows = tasks.load_gsm8k(SHARED_GSM8K / "test.jsonl")
  assert len(rows) == 1319
  gold = [r["answer"] for r in rows]
  finals = [tasks.gsm8k_gold_answer(a) for a in gold]
  assert all(tasks.extract_final_number(f) is not None for f in finals)
  rewards = tasks.gsm8k_answer_reward([""] * len(gold), gold, finals)
  assert rewards == [1.0] * len(gold)
