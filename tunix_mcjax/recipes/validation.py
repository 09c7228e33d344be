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

"""Checks of a job's inputs: dataset rows, prompt lengths, rewards, vocab.

Every check raises `InputError`, whose message names the row, function or
setting and says what to change; entry points print it as one line and
exit 2 (no traceback).

* Dataset (`prepare_dataset`, `check_batches`): every batch has the fields
  the rewards read ("prompts", "answer"), no prompt is empty, and no prompt
  is longer than `max_prompt_length` tokens as the sampler counts them
  (bos included). A longer prompt would make Tunix's sampler pad that host's
  prompts to a wider buffer than the other hosts', so it is an error naming
  the row; `skip_long_prompts` drops such rows instead, decided on the
  global dataset before prompts are dealt (every host drops the same rows,
  so batches stay aligned).
* Rewards (`checked_reward_fns`): a reward function that raises is reported
  with its name and the first row it fails on; NaN or infinite rewards, and
  a result of the wrong length, are errors (Tunix would sum rewards with
  `np.nansum`, silently training on NaN as 0). A call that timed out or
  whose pool worker died (`rewards_pool.RewardCallError`) is an error with
  that message, not blamed on a row. Good rewards pass unchanged.
* Vocabulary (`check_vocab`): a tokenizer with more ids than the model's
  embedding would index past it (JAX clamps the index silently).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
import dataclasses
import functools
from typing import Any

import numpy as np

from tunix_mcjax import rewards_pool
from tunix_mcjax.recipes import agentic_tasks
from tunix_mcjax.recipes import tasks

# The batch fields the built-in rewards read.
REQUIRED_FIELDS = ("prompts", "answer")
_SNIPPET = 60


class InputError(ValueError):
  """A job input (data, reward function, tokenizer) the user must change."""


def _snippet(text: Any) -> str:
  text = str(text)
  if len(text) <= _SNIPPET:
    return repr(text)
  return repr(text[:_SNIPPET] + "...")


# --- Dataset rows -------------------------------------------------------------


def check_batches(
    batches: Sequence[Mapping[str, Any]],
    *,
    fields: Sequence[str] = REQUIRED_FIELDS,
    what: str = "dataset",
) -> None:
  """Raises InputError for a missing field, a ragged batch or empty prompt.

  Rows are named by their global index (batch index x batch size +
  position), the index admission records for the row.

  Args:
    batches: Global batches {"prompts": [...], "answer": [...], ...}.
    fields: Fields every batch must have.
    what: How messages name the data ("dataset", "evaluation dataset").
  """
  row = 0
  for b, batch in enumerate(batches):
    if not isinstance(batch, Mapping):
      raise InputError(
          f"{what} batch {b} is a {type(batch).__name__}, not a mapping of"
          f" fields; make every batch a dict with fields {list(fields)}."
      )
    missing = [f for f in fields if f not in batch]
    if missing:
      raise InputError(
          f"{what} batch {b} (rows {row}..) has no {missing} field(s) (it has"
          f" {sorted(batch)}); give every row a prompt and an answer."
      )
    prompts = batch[fields[0]] if fields else batch.get("prompts", ())
    n = len(prompts)
    for f in fields:
      if len(batch[f]) != n:
        raise InputError(
            f"{what} batch {b}: field {f!r} has {len(batch[f])} entries but"
            f" {fields[0]!r} has {n}; every row needs every field."
        )
    if "prompts" in batch:
      for i, prompt in enumerate(batch["prompts"]):
        if not isinstance(prompt, (str, np.str_)) or not str(prompt).strip():
          raise InputError(
              f"{what} row {row + i} (batch {b}, position {i}) has an empty"
              f" or non-text prompt {prompt!r}; remove the row or give it a"
              " prompt."
          )
    row += n


def sampler_prompt_lengths(
    tokenizer: Any) -> Callable[[Sequence[str]], list[int]]:
  """Prompt lengths in tokens as Tunix's sampler counts them (bos included).

  Args:
    tokenizer: The job's tokenizer (anything Tunix's TokenizerAdapter takes).

  Returns:
    A function from prompts to their token counts.
  """
  from tunix.generate import tokenizer_adapter  # pylint: disable=g-import-not-at-top

  adapter = tokenizer_adapter.TokenizerAdapter(tokenizer)

  def lengths(prompts: Sequence[str]) -> list[int]:
    # As Sampler.tokenize: bos (when it has one) + encode, duplicate bos
    # removed.
    bos = [adapter.bos_id()] if adapter.bos_id() else []
    return [len(adapter.dedup_bos_ids(bos + list(adapter.encode(str(p)))))
            for p in prompts]

  return lengths


def _long_prompt_error(where: str, prompt: str, length: int,
                       max_prompt_length: int) -> InputError:
  return InputError(
      f"{where} has a prompt of {length} tokens, more than"
      f" max_prompt_length={max_prompt_length} ({_snippet(prompt)}); raise"
      " --max_prompt_length, shorten the prompt, or pass --skip_long_prompts"
      " to drop such rows."
  )


def check_prompt_lengths(
    batches: Sequence[Mapping[str, Any]],
    *,
    length_fn: Callable[[Sequence[str]], Sequence[int]],
    max_prompt_length: int,
    what: str = "dataset",
) -> None:
  """Raises InputError naming the first prompt over `max_prompt_length`."""
  row = 0
  for b, batch in enumerate(batches):
    prompts = [str(p) for p in batch["prompts"]]
    for i, length in enumerate(length_fn(prompts)):
      if length > max_prompt_length:
        raise _long_prompt_error(
            f"{what} row {row + i} (batch {b}, position {i})", prompts[i],
            int(length), max_prompt_length)
    row += len(prompts)


def drop_long_rows(
    batches: Sequence[Mapping[str, Any]],
    *,
    length_fn: Callable[[Sequence[str]], Sequence[int]],
    max_prompt_length: int,
    num_batches: int,
    what: str = "dataset",
) -> tuple[list[dict[str, np.ndarray]], int]:
  """The global rows with prompts that fit, re-batched; and the drop count.

  Rows keep their order; batches keep their size. Deterministic in the
  global batches, so every host keeps the same rows.

  Args:
    batches: Global batches of equal size.
    length_fn: Prompt lengths in tokens (`sampler_prompt_lengths`).
    max_prompt_length: The longest prompt kept.
    num_batches: Full batches needed.
    what: How messages name the data.

  Returns:
    (the first `num_batches` full batches of the kept rows, rows dropped).

  Raises:
    InputError: fewer than `num_batches` full batches remain.
  """
  if not batches:
    return [], 0
  size = len(batches[0]["prompts"])
  keep: dict[str, list[Any]] = {k: [] for k in batches[0]}
  dropped = 0
  for batch in batches:
    lengths = length_fn([str(p) for p in batch["prompts"]])
    for i, length in enumerate(lengths):
      if length > max_prompt_length:
        dropped += 1
        continue
      for k in keep:
        keep[k].append(batch[k][i])
  kept = len(keep["prompts"])
  if kept < size * num_batches:
    raise InputError(
        f"--skip_long_prompts dropped {dropped} of {kept + dropped} {what}"
        f" rows longer than max_prompt_length={max_prompt_length} tokens,"
        f" leaving {kept}: fewer than the {size * num_batches} that"
        f" {num_batches} batch(es) of {size} need; raise --max_prompt_length."
    )
  out = [
      {k: np.asarray(v[j * size:(j + 1) * size]) for k, v in keep.items()}
      for j in range(num_batches)
  ]
  return out, dropped


@dataclasses.dataclass(frozen=True, kw_only=True)
class PreparedDataset:
  """A job's checked global batches.

  Attributes:
    batches: `num_batches` global batches of `batch_size` rows.
    reward_fns: The task's reward functions (unchecked; see
      `checked_reward_fns`).
    dropped: Rows dropped for long prompts (with `skip_long_prompts`).
    rows: Rows considered before dropping.
  """

  batches: list[dict[str, np.ndarray]]
  reward_fns: list[Any]
  dropped: int = 0
  rows: int = 0


def prepare_dataset(
    spec: str,
    *,
    batch_size: int,
    num_batches: int,
    seed: int,
    length_fn: Callable[[Sequence[str]], Sequence[int]],
    max_prompt_length: int,
    skip_long_prompts: bool = False,
) -> PreparedDataset:
  """`tasks.dataset_from_spec`, checked; long prompts refused or dropped.

  With `skip_long_prompts`, GSM8K rows are filtered in the file before the
  shuffle (so the run still gets `num_batches` full batches); the toy task's
  rows after batching. Either way on the global dataset, identically on
  every host.

  Args:
    spec: "toy" or "gsm8k:PATH".
    batch_size: Global prompts per batch.
    num_batches: Batches needed.
    seed: Dataset seed.
    length_fn: Prompt lengths in tokens (`sampler_prompt_lengths`).
    max_prompt_length: The sampler's prompt budget.
    skip_long_prompts: Drop rows whose prompt is longer (else an error).

  Returns:
    The prepared dataset.

  Raises:
    InputError: the spec or the data cannot be used; says what to change.
  """
  try:
    if spec.startswith("gsm8k:") and spec != "gsm8k:":
      path = spec[len("gsm8k:"):]
      rows = tasks.load_gsm8k(path)
      prompts = [tasks.gsm8k_prompt(r["question"]) for r in rows]
      lengths = list(length_fn(prompts))
      long_rows = [i for i, n in enumerate(lengths) if n > max_prompt_length]
      if long_rows and not skip_long_prompts:
        i = long_rows[0]
        raise _long_prompt_error(
            f"{path}: row {i + 1} (of {len(rows)}; {len(long_rows)} too long)",
            prompts[i], lengths[i], max_prompt_length)
      kept = [r for i, r in enumerate(rows) if lengths[i] <= max_prompt_length]
      if not kept:
        raise InputError(
            f"--skip_long_prompts dropped all {len(rows)} rows of {path}:"
            f" every prompt is longer than max_prompt_length="
            f"{max_prompt_length} tokens; raise --max_prompt_length."
        )
      batches = tasks.gsm8k_batches(kept, batch_size=batch_size,
                                    num_batches=num_batches, seed=seed)
      check_batches(batches)
      return PreparedDataset(
          batches=batches,
          reward_fns=[tasks.gsm8k_answer_reward, tasks.gsm8k_format_reward],
          dropped=len(long_rows), rows=len(rows))
    if spec == "calc":
      batches, reward_fns = agentic_tasks.calc_dataset(
          num_batches=num_batches, batch_size=batch_size, seed=seed), []
    else:
      batches, reward_fns = tasks.dataset_from_spec(
          spec, batch_size=batch_size, num_batches=num_batches, seed=seed)
  except InputError:
    raise
  except (ValueError, OSError) as e:
    raise InputError(str(e)) from e
  return _checked(batches, list(reward_fns), what="dataset",
                  length_fn=length_fn, max_prompt_length=max_prompt_length,
                  skip_long_prompts=skip_long_prompts,
                  num_batches=num_batches)


def _checked(
    batches: Sequence[Mapping[str, Any]],
    reward_fns: list[Any],
    *,
    what: str,
    length_fn: Callable[[Sequence[str]], Sequence[int]],
    max_prompt_length: int,
    skip_long_prompts: bool,
    num_batches: int,
) -> PreparedDataset:
  """Batches of a task's spec, checked; long prompts refused or dropped."""
  check_batches(batches, what=what)
  rows = sum(len(b["prompts"]) for b in batches)
  if not skip_long_prompts:
    check_prompt_lengths(batches, length_fn=length_fn,
                         max_prompt_length=max_prompt_length, what=what)
    return PreparedDataset(batches=list(batches), reward_fns=reward_fns,
                           rows=rows)
  batches, dropped = drop_long_rows(
      batches, length_fn=length_fn, max_prompt_length=max_prompt_length,
      num_batches=num_batches, what=what)
  return PreparedDataset(batches=batches, reward_fns=reward_fns,
                         dropped=dropped, rows=rows)


def prepare_eval_dataset(
    spec: str,
    *,
    batch_size: int,
    num_batches: int,
    seed: int,
    length_fn: Callable[[Sequence[str]], Sequence[int]],
    max_prompt_length: int,
    skip_long_prompts: bool = False,
) -> PreparedDataset:
  """`tasks.eval_dataset_from_spec`, checked like `prepare_dataset`."""
  what = "evaluation dataset"
  try:
    if skip_long_prompts and spec.startswith("gsm8k:"):
      test = tasks.gsm8k_test_path(spec[len("gsm8k:"):])
      rows = tasks.load_gsm8k(test)
      prompts = [tasks.gsm8k_prompt(r["question"]) for r in rows]
      batch = {"prompts": np.asarray(prompts, dtype=str),
               "answer": np.asarray(
                   [tasks.gsm8k_gold_answer(r["answer"]) for r in rows],
                   dtype=str)}
      check_batches([batch], what=what)
      lengths = list(length_fn(prompts))
      keep = [i for i, n in enumerate(lengths) if n <= max_prompt_length]
      needed = batch_size * num_batches
      if len(keep) < needed:
        raise InputError(
            f"--skip_long_prompts leaves {len(keep)} of {len(rows)} rows of"
            f" {test}, fewer than the {needed} that {num_batches} evaluation"
            f" batch(es) of {batch_size} need; raise --max_prompt_length or"
            " evaluate fewer batches."
        )
      # The first rows that fit, in file order (as without skipping).
      dropped = len(rows) - len(keep)
      keep = np.asarray(keep[:needed])
      out = [{k: v[keep[j * batch_size:(j + 1) * batch_size]]
              for k, v in batch.items()} for j in range(num_batches)]
      return PreparedDataset(batches=out, reward_fns=[],
                             dropped=dropped, rows=len(rows))
    if spec == "calc":
      batches = agentic_tasks.calc_dataset(
          num_batches=num_batches, batch_size=batch_size,
          seed=seed + tasks.TOY_EVAL_SEED_OFFSET,
          first_index=agentic_tasks.EVAL_FIRST_INDEX)
    else:
      batches = tasks.eval_dataset_from_spec(
          spec, batch_size=batch_size, num_batches=num_batches, seed=seed)
  except InputError:
    raise
  except (ValueError, OSError) as e:
    raise InputError(str(e)) from e
  return _checked(batches, [], what=what, length_fn=length_fn,
                  max_prompt_length=max_prompt_length,
                  skip_long_prompts=skip_long_prompts,
                  num_batches=num_batches)


# --- Rewards ------------------------------------------------------------------


def _fn_name(fn: Any) -> str:
  return getattr(fn, "__name__", None) or repr(fn)


def _row_kwargs(kwargs: Mapping[str, Any], n: int, i: int) -> dict[str, Any]:
  """`kwargs` with every per-row field (length n) cut to row i."""
  out = {}
  for k, v in kwargs.items():
    if isinstance(v, (list, tuple, np.ndarray)) and len(v) == n:
      out[k] = v[i:i + 1]
    else:
      out[k] = v
  return out


def _first_failing_row(
    fn: Any, prompts: Sequence[Any], completions: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> tuple[int, Exception] | None:
  """The first row `fn` raises on by itself, or None."""
  n = len(completions)
  for i in range(n):
    try:
      fn(prompts=prompts[i:i + 1], completions=completions[i:i + 1],
         **_row_kwargs(kwargs, n, i))
    except rewards_pool.RewardCallError as e:
      raise InputError(str(e)) from e
    except Exception as e:  # pylint: disable=broad-exception-caught
      return i, e
  return None


def _row_text(prompts: Sequence[Any], completions: Sequence[Any],
              i: int) -> str:
  prompt = prompts[i] if i < len(prompts) else "?"
  return (f"row {i} of {len(completions)} on this host (prompt"
          f" {_snippet(prompt)}, completion {_snippet(completions[i])})")


def checked_reward_fn(fn: Any) -> Any:
  """`fn`, with its failures and bad results raised as InputError.

  The wrapper keeps `fn`'s name and signature (Tunix reads both) and
  returns exactly what `fn` returns when that is one finite number per
  completion.

  Args:
    fn: A reward function `fn(prompts, completions, **kwargs)`.

  Returns:
    The checked function.
  """
  name = _fn_name(fn)

  @functools.wraps(fn)
  def checked(prompts, completions, **kwargs):
    try:
      rewards = fn(prompts=prompts, completions=completions, **kwargs)
    except rewards_pool.RewardCallError as e:
      # Timed out, or its pool worker died: the message names the function,
      # rows and host; scoring row by row would only wait or crash again.
      raise InputError(str(e)) from e
    except Exception as e:  # pylint: disable=broad-exception-caught
      found = _first_failing_row(fn, prompts, completions, kwargs)
      if found is None:
        raise InputError(
            f"reward function {name!r} raised {type(e).__name__}: {e} on a"
            f" batch of {len(completions)} rows (no single row fails alone);"
            " fix the function."
        ) from e
      i, row_error = found
      raise InputError(
          f"reward function {name!r} raised {type(row_error).__name__}:"
          f" {row_error} on {_row_text(prompts, completions, i)}; fix the"
          " function or that dataset row."
      ) from e
    if rewards is None:
      raise InputError(
          f"reward function {name!r} returned None; return one float per"
          " completion."
      )
    try:
      values = np.asarray(rewards, dtype=np.float64)
    except (TypeError, ValueError) as e:
      raise InputError(
          f"reward function {name!r} returned {_snippet(rewards)}, not"
          " numbers; return one float per completion."
      ) from e
    if values.shape != (len(completions),):
      raise InputError(
          f"reward function {name!r} returned {values.size} value(s) of"
          f" shape {values.shape} for {len(completions)} completions; return"
          " one float per completion, in order."
      )
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
      i = int(bad[0])
      raise InputError(
          f"reward function {name!r} returned {values[i]} for"
          f" {_row_text(prompts, completions, i)} ({bad.size} non-finite in"
          " all); return a finite float (e.g. 0.0 for a completion it cannot"
          " score): Tunix would sum NaN as 0 and train on it silently."
      )
    return rewards

  return checked


def checked_reward_fns(reward_fns: Any) -> list[Any]:
  """`checked_reward_fn` of each of `reward_fns` (a function or a list)."""
  fns = reward_fns if isinstance(reward_fns, (list, tuple)) else [reward_fns]
  return [checked_reward_fn(fn) for fn in fns]


# --- Vocabulary ---------------------------------------------------------------


def tokenizer_vocab_size(tokenizer: Any) -> int | None:
  """Ids the tokenizer can produce (added tokens included), or None."""
  try:
    return int(len(tokenizer))
  except TypeError:
    pass
  size = getattr(tokenizer, "vocab_size", None)
  if callable(size):
    size = size()
  return None if size is None else int(size)


def check_vocab(tokenizer_vocab: int | None, model_vocab: int | None, *,
                model: str) -> None:
  """Raises InputError when the tokenizer has more ids than the model.

  Args:
    tokenizer_vocab: `tokenizer_vocab_size(tokenizer)`; None: unknown.
    model_vocab: The model's embedding rows; None: unknown.
    model: How to name the model in the message.
  """
  if tokenizer_vocab is None or model_vocab is None:
    return
  if tokenizer_vocab > model_vocab:
    raise InputError(
        f"the tokenizer has {tokenizer_vocab} ids but the model {model!r}"
        f" embeds only {model_vocab}: ids >= {model_vocab} would silently"
        " read a clamped embedding row; use the tokenizer saved with the"
        " model (or a model whose vocab_size covers the tokenizer)."
    )
