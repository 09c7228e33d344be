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

"""Datasets and verifiable rewards for the GRPO example.

Two tasks, both producing GLOBAL batches in one format:
`{"prompts": np.ndarray[str], "answer": np.ndarray[str]}`, each of exactly
`batch_size` rows and deterministic given the seed.

* "toy": prompts like "c:"; the completion should repeat the prompt's letter.
  The reward is dense (fraction of the first `TOY_COMPLETION_LENGTH` characters
  that match), starts near 1/vocab for a random model and is learned by the
  tiny Qwen3 of models.py in a few dozen GRPO steps on CPU.
* "gsm8k:PATH": grade-school math from a local jsonl, rewarded by comparing the
  completion's final number with the gold answer.

Batch fields are numpy arrays, not lists: Tunix's learner repeats every batch
field with `jax.tree.map(lambda x: np.repeat(x, G, axis=0), batch)`, which
treats a list as a pytree and turns each string into its own array.

Reward functions use Tunix's signature `fn(prompts, completions, **kwargs)`;
`kwargs` carries the other batch fields (here `answer`, repeated per
completion like the prompts) and `mode`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
import dataclasses
import json
import math
import os
import pathlib
import re
from typing import Any

import numpy as np

RewardFn = Callable[..., list[float]]
Batch = dict[str, np.ndarray]

# Letters that toy prompts ask for; all are in models.TOY_ALPHABET.
TOY_LETTERS = "abcdefgh"
# Characters of a completion that the toy reward scores.
TOY_COMPLETION_LENGTH = 8


@dataclasses.dataclass(frozen=True, kw_only=True)
class DemoDefaults:
  """GRPO hyperparameters under which the tiny model learns the toy task.

  Higher learning rates or smaller groups often collapse every completion
  of a group onto one letter, which leaves GRPO without a signal. How these
  defaults were chosen, and the reward curve they give, is in
  docs/benchmarks.md ("Demo and toy-task defaults").

  Attributes:
    batch_size: Global prompts per step (before x num_generations).
    num_generations: Completions per prompt (GRPO group size G).
    num_steps: Training steps (= batches).
    learning_rate: Adam learning rate.
    beta: KL coefficient; 0 lets Tunix skip the reference model.
    temperature: Sampling temperature.
    max_tokens_to_generate: Completion budget; at least TOY_COMPLETION_LENGTH
      so that the maximum reward is reachable.
    max_prompt_length: Prompt budget in tokens (bos + "c:" = 3).
    kv_cache_size: Vanilla-sampler cache; >= prompt + completion budget.
    seed: Seed for the dataset and the model initialisation.
  """

  batch_size: int = 16
  num_generations: int = 16
  num_steps: int = 60
  learning_rate: float = 5e-3
  beta: float = 0.0
  temperature: float = 1.0
  max_tokens_to_generate: int = TOY_COMPLETION_LENGTH
  max_prompt_length: int = 4
  kv_cache_size: int = 32
  seed: int = 0

  def __post_init__(self):
    for name in ("batch_size", "num_steps", "max_prompt_length"):
      if getattr(self, name) < 1:
        raise ValueError(f"DemoDefaults.{name} must be >= 1.")
    if self.num_generations < 2:
      raise ValueError(
          "DemoDefaults.num_generations must be >= 2: GRPO's advantages are"
          " relative within a group."
      )
    if self.learning_rate <= 0:
      raise ValueError("DemoDefaults.learning_rate must be > 0.")
    if self.beta < 0:
      raise ValueError("DemoDefaults.beta must be >= 0.")
    if self.temperature <= 0:
      raise ValueError("DemoDefaults.temperature must be > 0.")
    if self.max_tokens_to_generate < TOY_COMPLETION_LENGTH:
      raise ValueError(
          "DemoDefaults.max_tokens_to_generate must be >="
          f" TOY_COMPLETION_LENGTH={TOY_COMPLETION_LENGTH}, or the toy reward"
          " can never reach 1."
      )
    budget = self.max_prompt_length + self.max_tokens_to_generate
    if self.kv_cache_size < budget:
      raise ValueError(
          "DemoDefaults.kv_cache_size must be >= max_prompt_length +"
          " max_tokens_to_generate (Tunix's sampler rejects smaller caches)."
      )


DEMO_DEFAULTS = DemoDefaults()


def _is_positive_int(x: Any) -> bool:
  return isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 1


def _check_sizes(*, batch_size: int, num_batches: int) -> None:
  if not _is_positive_int(batch_size):
    raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}.")
  if not _is_positive_int(num_batches):
    raise ValueError(
        f"num_batches must be an integer >= 1, got {num_batches!r}."
    )


def _batch(prompts: Sequence[str], answers: Sequence[str]) -> Batch:
  return {
      "prompts": np.asarray(prompts, dtype=str),
      "answer": np.asarray(answers, dtype=str),
  }


# ----------------------------------------------------------------------------
# Toy task.


def toy_prompt(letter: str) -> str:
  return f"{letter}:"


def toy_dataset(*, num_batches: int, batch_size: int, seed: int) -> list[Batch]:
  """Global toy batches: prompt "<letter>:", answer the letter repeated.

  Args:
    num_batches: Number of batches.
    batch_size: Prompts per batch.
    seed: Letters are drawn uniformly from TOY_LETTERS with this seed.

  Returns:
    `num_batches` dicts {"prompts", "answer"} of `batch_size` rows each.
  """
  _check_sizes(batch_size=batch_size, num_batches=num_batches)
  rng = np.random.default_rng(seed)
  batches = []
  for _ in range(num_batches):
    picks = rng.integers(len(TOY_LETTERS), size=batch_size)
    letters = [TOY_LETTERS[i] for i in picks]
    batches.append(_batch(
        [toy_prompt(c) for c in letters],
        [c * TOY_COMPLETION_LENGTH for c in letters],
    ))
  return batches


def _check_one_answer_per_completion(
    completions: Sequence[str], answer: Sequence[Any]
) -> None:
  if len(completions) != len(answer):
    raise ValueError(
        f"Got {len(completions)} completions but {len(answer)} answers; the"
        " batch's 'answer' field must be repeated like the prompts."
    )


def toy_match_reward(
    prompts: Sequence[str],
    completions: Sequence[str],
    answer: Sequence[str],
    **kwargs: Any,
) -> list[float]:
  """Fraction of `answer`'s positions that the completion matches.

  Dense on purpose: a random policy already scores ~1/vocab, and every extra
  matching character is rewarded, so GRPO has a signal from step one.
  Characters beyond len(answer) are ignored; a completion shorter than the
  answer (early eos) loses the missing positions.

  Args:
    prompts: Prompts (unused; the answer carries the target).
    completions: Decoded completions.
    answer: Target strings, one per completion.
    **kwargs: Other batch fields and Tunix's `mode`; ignored.

  Returns:
    One reward in [0, 1] per completion.
  """
  del prompts, kwargs
  _check_one_answer_per_completion(completions, answer)
  rewards = []
  for completion, target in zip(completions, answer):
    target = str(target)
    if not target:
      rewards.append(0.0)
      continue
    hits = sum(a == b for a, b in zip(str(completion), target))
    rewards.append(hits / len(target))
  return rewards


# ----------------------------------------------------------------------------
# GSM8K.

GSM8K_PROMPT_TEMPLATE = (
    "Solve the math problem. Reason step by step, then write the final"
    " answer on its own line as '#### <number>'.\n\n"
    "Question: {question}\nAnswer:"
)
# Added to a completion's reward when it ends with a '#### <number>' line.
GSM8K_FORMAT_REWARD = 0.2

# No nested or adjacent overlapping quantifiers: each match attempt is linear
# in the match length and failed attempts are O(1), so `finditer` is linear.
_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_FINAL_MARKER = "####"
_BOXED = "\\boxed{"


def load_gsm8k(
    path: str | os.PathLike[str], *, limit: int | None = None
) -> list[dict[str, str]]:
  """Reads GSM8K rows {"question", "answer"} from a jsonl file.

  Args:
    path: A jsonl file with fields "question" and "answer" (gold final answer
      after '#### ').
    limit: Read at most this many rows.

  Returns:
    The rows, in file order.
  """
  p = pathlib.Path(path).expanduser()
  if not p.is_file():
    raise FileNotFoundError(
        f"GSM8K file {str(p)!r} does not exist; pass the path of a jsonl file"
        " with 'question' and 'answer' fields (e.g."
        " shared/data/gsm8k/train.jsonl)."
    )
  if limit is not None and limit < 1:
    raise ValueError(f"limit must be >= 1 or None, got {limit!r}.")
  rows = []
  # Bytes, decoded line by line: a bad byte is reported at its FILE:LINE.
  with p.open("rb") as f:
    for lineno, raw in enumerate(f, 1):
      try:
        line = raw.decode("utf-8")
      except UnicodeDecodeError as e:
        raise ValueError(
            f"{str(p)}:{lineno} is not UTF-8 text (byte"
            f" 0x{raw[e.start]:02x} at column {e.start + 1}); save the file"
            " as UTF-8 or remove the line."
        ) from e
      if not line.strip():
        continue
      try:
        row = json.loads(line)
        values = {k: row[k] for k in ("question", "answer")}
      except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(
            f"{str(p)}:{lineno} is not a JSON object with 'question' and"
            f" 'answer': {e}"
        ) from e
      # str(None) would train on the text "None"; a bare number is a fine
      # gold answer.
      answer = values["answer"]
      if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        values["answer"] = str(answer)
      wrong = [f"{k!r} is {json.dumps(v)}" for k, v in values.items()
               if not isinstance(v, str)]
      if wrong:
        raise ValueError(
            f"{str(p)}:{lineno}: {' and '.join(wrong)}, not text; fix the"
            " row or remove the line."
        )
      rows.append(values)
      empty = [k for k in ("question", "answer") if not rows[-1][k].strip()]
      if empty:
        raise ValueError(
            f"{str(p)}:{lineno} has an empty {' and '.join(empty)}; fill it"
            " in or remove the line."
        )
      if limit is not None and len(rows) >= limit:
        break
  if not rows:
    raise ValueError(f"GSM8K file {str(p)!r} has no rows.")
  return rows


def gsm8k_prompt(question: str) -> str:
  return GSM8K_PROMPT_TEMPLATE.format(question=question.strip())


def gsm8k_gold_answer(answer: str) -> str:
  """The gold final answer: text after the last '####', else the input."""
  idx = answer.rfind(_FINAL_MARKER)
  tail = answer[idx + len(_FINAL_MARKER):] if idx >= 0 else answer
  return tail.strip()


def _boxed_content(text: str) -> str | None:
  start = text.rfind(_BOXED)
  if start < 0:
    return None
  depth = 1
  i = start + len(_BOXED)
  begin = i
  while i < len(text):
    c = text[i]
    if c == "{":
      depth += 1
    elif c == "}":
      depth -= 1
      if depth == 0:
        return text[begin:i]
    i += 1
  return text[begin:]  # Unclosed: take the rest, still linear.


def _first_number(text: str) -> str | None:
  m = _NUMBER_RE.search(text)
  return m.group(0) if m else None


def _last_number(text: str) -> str | None:
  last = None
  for m in _NUMBER_RE.finditer(text):
    last = m
  return last.group(0) if last else None


def extract_final_number(text: str) -> str | None:
  """The final numeric answer in `text`, in linear time.

  Preference order: the first number after the last '####'; else the first
  number inside the last '\\boxed{...}'; else the last number anywhere.
  Commas are removed; '$' and trailing periods never enter a match.

  Args:
    text: A completion or a gold solution.

  Returns:
    The number as a string (e.g. "-1234.5"), or None.
  """
  text = str(text).replace("\u2212", "-")  # Unicode minus sign.
  idx = text.rfind(_FINAL_MARKER)
  if idx >= 0:
    found = _first_number(text[idx + len(_FINAL_MARKER):])
  else:
    boxed = _boxed_content(text)
    found = _first_number(boxed) if boxed is not None else None
    if found is None:
      found = _last_number(text)
  if found is None:
    return None
  found = found.replace(",", "")
  return found if found not in ("-", "") else None


def _to_float(number: str | None) -> float | None:
  if number is None:
    return None
  try:
    value = float(number)
  except ValueError:
    return None
  return value if math.isfinite(value) else None


def numbers_equal(a: str | None, b: str | None) -> bool:
  """Numeric equality of two extracted numbers ("72" == "72.00")."""
  x, y = _to_float(a), _to_float(b)
  if x is None or y is None:
    return False
  return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9)


def gsm8k_answer_reward(
    prompts: Sequence[str],
    completions: Sequence[str],
    answer: Sequence[str],
    **kwargs: Any,
) -> list[float]:
  """1.0 when the completion's final number equals the gold answer, else 0.

  Args:
    prompts: Prompts (unused).
    completions: Decoded completions.
    answer: Gold answers, one per completion: a bare number or a full GSM8K
      solution ending in '#### <number>'.
    **kwargs: Other batch fields and Tunix's `mode`; ignored.

  Returns:
    One reward per completion.
  """
  del prompts, kwargs
  _check_one_answer_per_completion(completions, answer)
  rewards = []
  for completion, gold in zip(completions, answer):
    gold_number = extract_final_number(gsm8k_gold_answer(str(gold)))
    ok = numbers_equal(extract_final_number(completion), gold_number)
    rewards.append(1.0 if ok else 0.0)
  return rewards


def gsm8k_format_reward(
    prompts: Sequence[str], completions: Sequence[str], **kwargs: Any
) -> list[float]:
  """GSM8K_FORMAT_REWARD when a '####' marker is followed by a number."""
  del prompts, kwargs
  rewards = []
  for c in completions:
    c = str(c)
    idx = c.rfind(_FINAL_MARKER)
    tail = c[idx + len(_FINAL_MARKER):].lstrip(" $") if idx >= 0 else ""
    ok = _NUMBER_RE.match(tail) is not None
    rewards.append(GSM8K_FORMAT_REWARD if ok else 0.0)
  return rewards


def gsm8k_batches(
    rows: Sequence[dict[str, str]],
    *,
    batch_size: int,
    num_batches: int,
    seed: int,
) -> list[Batch]:
  """Global batches from GSM8K rows, reshuffled every epoch.

  Args:
    rows: From `load_gsm8k`.
    batch_size: Prompts per batch.
    num_batches: Number of batches; rows are reused (new order) as needed.
    seed: Shuffle seed.

  Returns:
    Batches {"prompts", "answer"} where answer is the gold final number.
  """
  _check_sizes(batch_size=batch_size, num_batches=num_batches)
  if not rows:
    raise ValueError("gsm8k_batches needs at least one row.")
  rng = np.random.default_rng(seed)
  order: list[int] = []
  needed = batch_size * num_batches
  while len(order) < needed:
    order.extend(rng.permutation(len(rows)).tolist())
  batches = []
  for b in range(num_batches):
    idx = order[b * batch_size:(b + 1) * batch_size]
    batches.append(_batch(
        [gsm8k_prompt(rows[i]["question"]) for i in idx],
        [gsm8k_gold_answer(rows[i]["answer"]) for i in idx],
    ))
  return batches


# ----------------------------------------------------------------------------
# Evaluation splits.

# The toy task's held-out split: batches drawn with this offset added to the
# job's seed (a different stream from the training batches').
TOY_EVAL_SEED_OFFSET = 1_000_003


def gsm8k_test_path(train_path: str | os.PathLike[str]) -> pathlib.Path:
  """GSM8K's test file next to a training file (train.jsonl -> test.jsonl)."""
  p = pathlib.Path(train_path).expanduser()
  if "train" not in p.name:
    raise ValueError(
        f"Cannot tell the GSM8K test file for {str(p)!r}: its name has no"
        " 'train' to replace by 'test'; name the training file e.g."
        " train.jsonl, with test.jsonl next to it."
    )
  return p.with_name(p.name.replace("train", "test"))


def eval_dataset_from_spec(
    spec: str, *, batch_size: int, num_batches: int, seed: int
) -> list[Batch]:
  """Held-out evaluation batches for "toy" or "gsm8k:PATH".

  Args:
    spec: As `dataset_from_spec`; "gsm8k:.../train.jsonl" evaluates on the
      test.jsonl next to it (its first batch_size * num_batches rows, in file
      order); "toy" on toy batches drawn with seed + TOY_EVAL_SEED_OFFSET.
    batch_size: Global prompts per evaluation batch.
    num_batches: Evaluation batches per evaluation pass.
    seed: The job's dataset seed.

  Returns:
    The evaluation batches (rewarded by the spec's reward functions).
  """
  _check_sizes(batch_size=batch_size, num_batches=num_batches)
  if spec == "toy":
    return toy_dataset(num_batches=num_batches, batch_size=batch_size,
                       seed=seed + TOY_EVAL_SEED_OFFSET)
  if spec.startswith("gsm8k:"):
    rows = load_gsm8k(gsm8k_test_path(spec[len("gsm8k:"):]))
    needed = batch_size * num_batches
    if len(rows) < needed:
      raise ValueError(
          f"The GSM8K test file has {len(rows)} rows, fewer than the"
          f" {needed} that {num_batches} evaluation batches of {batch_size}"
          " need; evaluate fewer batches."
      )
    return [
        _batch(
            [gsm8k_prompt(r["question"]) for r in rows[b * batch_size:
                                                       (b + 1) * batch_size]],
            [gsm8k_gold_answer(r["answer"]) for r in rows[b * batch_size:
                                                          (b + 1) * batch_size]],
        )
        for b in range(num_batches)
    ]
  raise ValueError(
      f"Unknown dataset spec {spec!r}; use 'toy' or 'gsm8k:PATH'."
  )


# ----------------------------------------------------------------------------
# Spec dispatch.


def dataset_from_spec(
    spec: str, *, batch_size: int, num_batches: int, seed: int
) -> tuple[list[Batch], list[RewardFn]]:
  """Batches and reward functions for "toy" or "gsm8k:PATH".

  Args:
    spec: "toy", or "gsm8k:" followed by a local jsonl path.
    batch_size: Global prompts per batch.
    num_batches: Number of batches.
    seed: Dataset seed.

  Returns:
    (batches, reward_fns) ready for Tunix's GRPOLearner.
  """
  _check_sizes(batch_size=batch_size, num_batches=num_batches)
  if spec == "toy":
    return (
        toy_dataset(num_batches=num_batches, batch_size=batch_size, seed=seed),
        [toy_match_reward],
    )
  if spec.startswith("gsm8k:"):
    path = spec[len("gsm8k:"):]
    if not path:
      raise ValueError(
          "Dataset spec 'gsm8k:' needs a path, e.g."
          " 'gsm8k:shared/data/gsm8k/train.jsonl'."
      )
    rows = load_gsm8k(path)
    return (
        gsm8k_batches(rows, batch_size=batch_size, num_batches=num_batches,
                      seed=seed),
        [gsm8k_answer_reward, gsm8k_format_reward],
    )
  raise ValueError(
      f"Unknown dataset spec {spec!r}; use 'toy' or 'gsm8k:PATH' (a local"
      " jsonl file with 'question' and 'answer' fields)."
  )
