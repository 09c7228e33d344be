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

"""What the vllm engine asks `vllm.LLM` for and how it reads the answers.

Rollouts: one request per row, each with its own seed from the row's
identity (placement-invariant sampling), completions cut before the stop
token as Tunix's sampler does. Log-probs of given completions: prompt
log-probs of prompt + completion, one forward pass per row. Only vLLM's
public request and output types are used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from tunix.rl.rollout import base_rollout


def row_seeds(seed: int, row_ids: np.ndarray) -> list[int]:
  """One 63-bit vLLM seed per row from (engine seed, prompt, sample).

  Args:
    seed: the engine's base seed.
    row_ids: (B, 2) non-negative ints: global prompt index, sample index.

  Returns:
    B Python ints; equal ids give equal seeds whatever their position.
  """
  out = []
  for prompt, sample in np.asarray(row_ids, dtype=np.int64).tolist():
    state = np.random.SeedSequence([int(seed) & (2**63 - 1), prompt, sample])
    hi, lo = state.generate_state(2, np.uint32).tolist()
    out.append(((hi << 32) | lo) & (2**63 - 1))
  return out


def next_power_of_2(x: int) -> int:
  return 1 if x <= 1 else 1 << (x - 1).bit_length()


def sampling_params(
    vllm: Any,
    cfg: base_rollout.RolloutConfig,
    *,
    seed: int,
    stop: list[int],
    pad: int | None,
    forbid_pad_token: bool,
) -> Any:
  """One row's `vllm.SamplingParams` (greedy as the native engine decides)."""
  greedy = cfg.top_p is None or not cfg.temperature
  bias = None
  if forbid_pad_token and pad is not None and pad not in stop:
    # -inf, not vLLM's documented -100 clamp (which only
    # SamplingParams.from_optional applies): a bias of -100 still loses to
    # logits that differ by more than 100.
    bias = {int(pad): float("-inf")}
  return vllm.SamplingParams(
      n=1,
      max_tokens=int(cfg.max_tokens_to_generate),
      temperature=0.0 if greedy else float(cfg.temperature),
      top_p=1.0 if greedy else float(cfg.top_p),
      top_k=0 if greedy or not cfg.top_k else int(cfg.top_k),
      seed=seed,
      stop_token_ids=stop,
      logprobs=0 if cfg.return_logprobs else None,
      logit_bias=bias,
      detokenize=False,
  )


def completions(
    outs: Sequence[Any], *, stop: Sequence[int], return_logprobs: bool,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
  """(tokens, log-probs) of each row's completion, before its stop token.

  The log-probs list is empty unless `return_logprobs`.
  """
  tokens, logprobs = [], []
  for out in outs:
    c = out.outputs[0]
    toks = list(c.token_ids)
    lps = None
    if return_logprobs:
      lps = [float(step[t].logprob) for t, step in zip(toks, c.logprobs)]
    # Like Tunix's sampler: the completion ends before the stop token.
    if toks and toks[-1] in stop:
      toks = toks[:-1]
      lps = None if lps is None else lps[:-1]
    tokens.append(np.asarray(toks, dtype=np.int32))
    if lps is not None:
      logprobs.append(np.asarray(lps, dtype=np.float32))
  return tokens, logprobs


def scoring_inputs(
    prompts: np.ndarray, completions_: np.ndarray, pad: int
) -> tuple[list[dict[str, list[int]]], list[tuple[int, int]]]:
  """Requests that score completions: (inputs, (prompt length, n) per row).

  Each input is the prompt without its left padding followed by the
  completion up to its last non-pad token (n tokens).
  """
  inputs, spans = [], []
  for p, c in zip(prompts.tolist(), completions_.tolist()):
    start = next((i for i, t in enumerate(p) if t != pad), len(p))
    p = p[start:]
    real = [i for i, t in enumerate(c) if t != pad]
    n = real[-1] + 1 if real else 0
    inputs.append({"prompt_token_ids": p + c[:n]})
    spans.append((len(p), n))
  return inputs, spans


def scored_logps(
    outs: Sequence[Any], inputs: Sequence[dict[str, list[int]]],
    spans: Sequence[tuple[int, int]], shape: tuple[int, ...],
) -> np.ndarray:
  """The completions' log-probs from vLLM's prompt log-probs (0 past n)."""
  result = np.zeros(shape, dtype=np.float32)
  for row, (out, inp, (p_len, n)) in enumerate(zip(outs, inputs, spans)):
    ids = inp["prompt_token_ids"]
    for j in range(n):
      step = out.prompt_logprobs[p_len + j]
      result[row, j] = step[ids[p_len + j]].logprob
  return result
