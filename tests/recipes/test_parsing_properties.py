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

"""Property-based tests (hypothesis) of config and dataset parsing.

Each property runs a bounded number of examples (derandomized, so a run is
reproducible and its time bounded): whatever the input, parsing either
succeeds with the documented result or raises the documented error type
with a message; never another exception, never a silent wrong result.
"""

from __future__ import annotations

import json
import math
import pathlib
import tempfile

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import numpy as np
import pytest

from tunix_mcjax import runtime
from tunix_mcjax.recipes import job_checks
from tunix_mcjax.recipes import job_config
from tunix_mcjax.recipes import tasks
from tunix_mcjax.recipes import validation

_BOUNDED = settings(max_examples=60, deadline=None, derandomize=True,
                    database=None)

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
_nonblank = _text.filter(lambda s: s.strip())


@_BOUNDED
@given(rows=st.lists(st.tuples(_nonblank, _nonblank), min_size=1, max_size=8),
       blank_lines=st.lists(st.booleans(), min_size=8, max_size=8))
def test_gsm8k_rows_round_trip_through_jsonl(rows, blank_lines):
  with tempfile.TemporaryDirectory() as tmp:
    path = pathlib.Path(tmp) / "train.jsonl"
    lines = []
    for (q, a), blank in zip(rows, blank_lines):
      if blank:
        lines.append("   ")
      lines.append(json.dumps({"question": q, "answer": a, "extra": 1}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    got = tasks.load_gsm8k(path)
  assert got == [{"question": q, "answer": a} for q, a in rows]


@_BOUNDED
@given(rows=st.lists(st.tuples(_text, _text), min_size=1, max_size=6),
       broken=st.sampled_from(["", "{", "[]", '{"question": "q"}', "null"]))
def test_bad_gsm8k_lines_are_value_errors_naming_the_line(rows, broken):
  with tempfile.TemporaryDirectory() as tmp:
    path = pathlib.Path(tmp) / "train.jsonl"
    lines = [json.dumps({"question": q, "answer": a}) for q, a in rows]
    lines.append(broken)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    empty = [i for i, (q, a) in enumerate(rows, 1)
             if not q.strip() or not a.strip()]
    if not empty and not broken:
      assert len(tasks.load_gsm8k(path)) == len(rows)  # A blank line.
      return
    with pytest.raises(ValueError) as e:
      tasks.load_gsm8k(path)
    line = empty[0] if empty else len(rows) + 1
    assert f"train.jsonl:{line}" in str(e.value)


@_BOUNDED
@given(lengths=st.lists(st.integers(1, 60), min_size=1, max_size=24),
       limit=st.integers(1, 60), batch=st.integers(1, 4),
       num_batches=st.integers(1, 3), seed=st.integers(0, 5))
def test_long_prompt_policy_on_the_global_rows(lengths, limit, batch,
                                               num_batches, seed):
  with tempfile.TemporaryDirectory() as tmp:
    path = pathlib.Path(tmp) / "train.jsonl"
    base = len(tasks.gsm8k_prompt(""))
    path.write_text("".join(
        json.dumps({"question": "x" * n, "answer": f"#### {i}"}) + "\n"
        for i, n in enumerate(lengths)))
    common = dict(batch_size=batch, num_batches=num_batches, seed=seed,
                  length_fn=lambda ps: [len(p) - base for p in ps],
                  max_prompt_length=limit)
    long_rows = [i for i, n in enumerate(lengths) if n > limit]
    if long_rows:
      with pytest.raises(validation.InputError,
                         match=rf"row {long_rows[0] + 1} \(of {len(lengths)};"
                         rf" {len(long_rows)} too long\)"):
        validation.prepare_dataset(f"gsm8k:{path}", **common)
    if len(long_rows) == len(lengths):
      with pytest.raises(validation.InputError, match="dropped all"):
        validation.prepare_dataset(f"gsm8k:{path}", skip_long_prompts=True,
                                   **common)
      return
    data = validation.prepare_dataset(f"gsm8k:{path}",
                                      skip_long_prompts=True, **common)
  assert (data.dropped, data.rows) == (len(long_rows), len(lengths))
  assert len(data.batches) == num_batches
  kept_answers = {f"{i}" for i, n in enumerate(lengths) if n <= limit}
  for b in data.batches:
    assert len(b["prompts"]) == batch
    assert all(len(p) - base <= limit for p in b["prompts"])
    assert set(b["answer"].tolist()) <= kept_answers


@_BOUNDED
@given(batch_size=st.integers(-2, 40), num_generations=st.integers(-1, 6),
       mini=st.one_of(st.none(), st.integers(-1, 40)),
       hosts=st.integers(1, 5))
def test_job_config_is_valid_or_a_value_error(batch_size, num_generations,
                                              mini, hosts):
  try:
    cfg = job_config.GrpoJobConfig(batch_size=batch_size,
                                   num_generations=num_generations,
                                   mini_batch_size=mini)
  except ValueError as e:
    assert str(e)
    return
  assert cfg.batch_size >= 1 and cfg.num_generations >= 2
  assert cfg.batch_size % (cfg.mini_batch_size or cfg.batch_size) == 0
  divides = all(v is None or v % hosts == 0
                for v in (cfg.batch_size, cfg.mini_batch_size))
  if divides:
    assert job_checks.check_job(cfg, num_hosts=hosts,
                                devices_per_host=2) is not None
  else:
    with pytest.raises(validation.InputError,
                       match=f"must divide over {hosts} hosts"):
      job_checks.check_job(cfg, num_hosts=hosts, devices_per_host=2)


_env_value = st.one_of(st.none(), st.text("0123456789 -+x:.", max_size=8),
                       st.integers(-3, 9).map(str))


@_BOUNDED
@given(coordinator=st.one_of(st.none(), st.sampled_from(
    ["127.0.0.1:1234", "host:0", "nohost", ":80", "h:65536", "[::1]:99"])),
       num=_env_value, pid=_env_value, devices=_env_value)
def test_runtime_env_is_a_config_or_a_value_error(coordinator, num, pid,
                                                  devices):
  env = {k: v for k, v in {
      runtime.ENV_COORDINATOR: coordinator, runtime.ENV_NUM_HOSTS: num,
      runtime.ENV_HOST_ID: pid, runtime.ENV_DEVICES_PER_HOST: devices,
  }.items() if v is not None}
  try:
    cfg = runtime.RuntimeConfig.from_env(env)
  except ValueError as e:
    assert str(e)
    return
  if cfg.coordinator_address is not None:
    assert 0 <= cfg.process_id < cfg.num_processes


@_BOUNDED
@given(values=st.lists(st.floats(allow_nan=True, allow_infinity=True),
                       min_size=1, max_size=12))
def test_checked_rewards_pass_finite_values_and_refuse_the_rest(values):
  def reward(prompts, completions, **kwargs):
    del prompts, completions, kwargs
    return list(values)

  (checked,) = validation.checked_reward_fns([reward])
  prompts = [f"p{i}" for i in range(len(values))]
  call = lambda: checked(prompts=prompts, completions=prompts, mode="train")
  if all(math.isfinite(v) for v in values):
    assert call() == values
  else:
    first = int(np.flatnonzero(~np.isfinite(values))[0])
    with pytest.raises(validation.InputError, match=rf"for row {first} of"):
      call()
