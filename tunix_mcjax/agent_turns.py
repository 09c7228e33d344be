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

"""What Tunix's agentic GRPO learner needs from a cluster, for mcjax.

Tunix's `AgenticGRPOLearner` (training_mode=agentic_grpo) runs one agent per
(prompt, sample) and calls `generate` once per agent turn, with one
conversation, from up to `max_concurrency` threads; the call's `trace_tags`
name the agent's group (the prompt's position in the learner's prompt
stream) and its pair index (the sample). `AgentTurns` turns that into a row
identity for the engine, (global prompt index, pair index + G x turn), so
that every turn of every agent draws its own sampling noise whatever host,
thread or order generates it: the mcjax hosts and the stock single
controller sample the same conversations. It also batches the turns that
wait for the host's engine into one call (the engines are not re-entrant,
and one row per call spends most of a step dispatching decode steps).

`AgentTurns.actor_logps_fn` is the trainer-side log-prob pass the learner
asks for (`get_actor_per_token_logps`): Tunix computes it under a
host-memory snapshot of the policy taken at every weight sync; mcjax uses
the live trainer state, which is that policy until the step's first
optimizer update, and, when a step takes several (a mini-batch below the
batch), a device copy of it taken before that update (`before_update`).

Multi-controller discipline: that pass, the reference pass and the train
step are global programs, which every host must issue in the same order.
Tunix's agentic learner computes the log-probs on its main thread, where it
trains, when compute_logps_micro_batch_size equals train_micro_batch_size
(above 1 per host). With 1 per host it computes each group's log-probs on
its rollout thread as the group finishes, which would interleave with the
train steps differently on every host; `AgentTurns.order_logps` then holds
a group's log-probs until the updates before its micro-batch are done, so
every host issues L1 .. Lm T1 Lm+1 .. (m groups per update), whatever order
its agents finish in; and a group of the next batch also until the weight
sync and the main thread's logging of the step after it (a cross-host
gather: `metrics_buffered`), which on-policy agents that finish fast would pass.

Off-policy (mcjax_da, `lag` K = Tunix's `off_policy_steps` >= 1): Tunix's
producer generates the next K batches while its consumer trains, and which
policy each episode gets, and which batch each step trains, would depend on
timing, differently on every host. mcjax fixes both: every turn of batch b
runs on policy version max(first step, b - K) (`current_turns` tells the
engine), the stalest the bound allows and the one published when Tunix
hands the producer batch b; and a batch's agents start only once every
group of the batch before has ended (`group_done`, which the learner's
producer reports: `compat.agentic_learner`), so each step trains exactly
its own batch, at staleness min(K, b - first step).

Evaluation (Tunix's learner, every eval_every_n_steps): the learner's
groups of an evaluation pass come numbered from
`compat.agentic_learner.EVAL_GROUP_OFFSET` + k (the pass's k-th prompt);
their turns are keyed by the evaluation rows admission recorded (the same
noise every pass), generated with the latest policy under the evaluation
ledger and never in one engine call with training turns. While a pass runs
(`evaluation`) its log-prob passes are not ordered with the train steps:
the learner's main thread waits for the pass, and where it computes the
training log-probs itself (above one prompt per host) nothing else issues
a global program meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
import contextlib
import dataclasses
import threading
from typing import Any

import numpy as np

from tunix_mcjax import ledger as ledger_lib
from tunix_mcjax.compat import agentic_learner

# (prompts, max_generation_steps) -> the rollout's output of those rows.
Generate = Callable[[Any, "int | None"], Any]

# How long a group's log-probs wait for the train step before them.
ORDER_TIMEOUT_S = 3600.0

# Tunix's trace tag names (tunix.perf.experimental.constants).
GROUP_ID = "group_id"
PAIR_INDEX = "pair_index"


class AgentTurns:
  """Row identities of agent turns, from the learner's trace tags.

  The learner numbers groups from `global_steps x batch` on, in the order it
  draws prompts; so group g is prompt g mod B of step g // B, where B is the
  host's prompts per batch, whose identities admission recorded in `ledger`
  (`first_step`: the global step of the ledger's first batch, i.e. the
  resumed step). An agent's first turn takes its row from the ledger (so a
  step closes only when every admitted row was generated); turn t keys its
  noise as sample `pair + G x t`. `lag`: None, or the off-policy bound K
  whose schedule it fixes (module doc).
  """

  def __init__(self, ledger: ledger_lib.StepLedger, fixed_ids: Any, *,
               first_step: int, lag: int | None = None):
    self._ledger = ledger
    self._fixed_ids = fixed_ids
    self._first_step = int(first_step)
    self._lag = lag
    # The (policy version, batch step) of the turns this thread generates.
    self._local = threading.local()
    # Groups the learner's producer finished, and whether it reports them.
    self._groups = threading.Condition()
    self._groups_done = 0
    self._observed = False
    # Evaluation passes running, and their agents' turns so far.
    self._evaluations = 0
    self._eval_turns: dict[tuple[int, int], int] = {}
    self._turns: dict[tuple[int, int], int] = {}
    # Turns waiting for the engine, and whether a thread is running a batch.
    self._ready = threading.Condition()
    self._pending: list[_Turn] = []
    self._busy = False
    # Groups whose log-probs the rollout thread asked for, groups trained.
    self._order = threading.Condition()
    self._logps_groups = 0
    self._trained_groups = 0
    self._syncs = 0  # Weight syncs since the first step, their step logged.
    self._unlogged_sync = False
    # The policy of the last weight sync when a step takes several
    # optimizer updates (`before_update`), and that sync's update count.
    self._anchor: Any = None
    self._anchor_at = -1
    self._agentic = False  # An agent's turn was generated (not GRPO's).

  @staticmethod
  def is_turn(trace_tags: Any) -> bool:
    """Whether a generate call is an agent's turn (it names its agent)."""
    return bool(trace_tags) and GROUP_ID in trace_tags and (
        PAIR_INDEX in trace_tags)

  def generate(self, trace_tags: Any, prompts: Any,
               max_generation_steps: int | None, run: Generate,
               decode: Callable[[list[int]], str]) -> Any:
    """One generate call: `run(prompts, max_generation_steps)` for any call
    but an agent's turn; a turn is generated with the turns pending beside
    it, in one engine call (`run` under their row identities, to the full
    response budget), and cut to its own budget.

    Cutting is exact: each row samples with its own keys, so its first n
    tokens are those of a call with budget n. `decode`: the tokenizer's.
    """
    if not self.is_turn(trace_tags):
      return run(prompts, max_generation_steps)
    self._agentic = True
    num_prompts = 1 if isinstance(prompts, str) else len(prompts)
    if num_prompts != 1:
      raise ValueError(
          f"An agent turn generated {num_prompts} conversations in one call;"
          " Tunix's agentic learner sends one, and mcjax keys each turn's"
          " sampling by its agent.")
    group, pair = int(trace_tags[GROUP_ID]), int(trace_tags[PAIR_INDEX])
    evaluation = group >= agentic_learner.EVAL_GROUP_OFFSET
    with self._ready:
      if evaluation:
        ids, step, first_turn = self._eval_identity(
            group - agentic_learner.EVAL_GROUP_OFFSET, pair), None, False
      else:
        ids, step, first_turn = self._identity(group, pair)
    if first_turn:
      self._hold(step)
    turn = _Turn(
        prompt=prompts if isinstance(prompts, str) else prompts[0],
        ids=ids, budget=max_generation_steps, step=step,
        version=(None if self._lag is None or evaluation
                 else max(self._first_step, step - self._lag)),
        evaluation=evaluation)
    with self._ready:
      self._pending.append(turn)
      while not turn.done:
        if self._busy:
          self._ready.wait()
          continue
        # This thread runs the pending turns of the first one's policy
        # version and batch (its own among them, or next time round).
        key = self._pending[0].key
        batch = [t for t in self._pending if t.key == key]
        self._pending = [t for t in self._pending if t.key != key]
        self._busy = True
        self._ready.release()
        try:
          self._local.turns = (key[:2] if self._lag is not None
                               and not key[2] else None)
          with (self._fixed_ids.evaluating() if key[2]
                else contextlib.nullcontext()):
            outs, error = _run_batch(batch, run, self._fixed_ids,
                                     decode), None
        except BaseException as e:  # pylint: disable=broad-except
          outs, error = [None] * len(batch), e
        finally:
          self._local.turns = None
          self._ready.acquire()
          self._busy = False
        for t, out in zip(batch, outs):
          t.out, t.error, t.done = out, error, True
        self._ready.notify_all()
    if turn.error is not None:
      raise turn.error
    return turn.out

  @property
  def first_step(self) -> int:
    """The global step of the first batch (the resumed step)."""
    return self._first_step

  def current_turns(self) -> tuple[int, int] | None:
    """While this thread generates pinned agent turns (`lag` given): their
    (policy version, batch step); else None."""
    return getattr(self._local, "turns", None)

  def observe_groups(self) -> bool:
    """The learner's producer reports each finished group (`group_done`).
    True: its turns are pinned to their policy (off-policy), so its weight
    syncs need not wait for running episodes."""
    self._observed = True
    return bool(self._lag)

  def group_done(self) -> None:
    """The learner's producer finished a group (all G episodes)."""
    with self._groups:
      self._groups_done += 1
      self._groups.notify_all()

  @contextlib.contextmanager
  def evaluation(self) -> Iterator[None]:
    """While the learner runs an evaluation pass (module doc)."""
    with self._order:
      self._evaluations += 1
    with self._ready:
      self._eval_turns.clear()  # A pass's agents start at turn 0.
    try:
      yield
    finally:
      with self._order:
        self._evaluations -= 1

  def weights_synced(self) -> None:
    """A weight sync (the publication of a step's update) is done; its step
    is logged at the learner's next `metrics_buffered`."""
    with self._order:
      self._unlogged_sync = True

  def metrics_buffered(self) -> None:
    """The learner buffered metrics. On its main thread right after a sync
    (Tunix's learners do so), that logged the synced step, a cross-host
    gather: only then may the next batch's log-probs go."""
    if threading.current_thread() is not threading.main_thread():
      return
    with self._order:
      if self._unlogged_sync:
        self._unlogged_sync = False
        self._syncs += 1
        self._order.notify_all()

  def _hold(self, step: int) -> None:
    """Off-policy: the first turn of an agent of batch `step` waits until
    every group of the batches before has ended (module doc)."""
    batch = step - self._first_step
    if not self._lag or batch <= 0:
      return  # On-policy, Tunix hands over a batch after the last one.
    if not self._observed:
      raise RuntimeError(
          "Agentic GRPO with off_policy_steps >= 1 under mcjax_da needs"
          " Tunix's agentic learner built as"
          " tunix_mcjax.compat.agentic_learner.learner_class(), which"
          " reports each finished trajectory group to the cluster.")
    need = batch * self._prompts()
    with self._groups:
      if not self._groups.wait_for(lambda: self._groups_done >= need,
                                   timeout=ORDER_TIMEOUT_S):
        raise RuntimeError(
            f"An agent of batch {step} waited {ORDER_TIMEOUT_S:.0f} s for"
            f" the {need} groups before it to end ({self._groups_done}"
            " ended): the learner's producer stopped.")

  def order_logps(self, training_config: Any) -> None:
    """Where the learner asks for a group's trainer-side log-probs (its
    first global program for the group): on its rollout thread, waits until
    the updates before the group's micro-batch are done (module doc).

    `training_config`: the host's Tunix RLTrainingConfig (its micro-batch
    of prompts).
    """
    if (threading.current_thread() is threading.main_thread()
        or self._evaluations):
      return
    per_update = (training_config.train_micro_batch_size
                  or training_config.mini_batch_size or self._prompts())
    with self._order:
      group, self._logps_groups = self._logps_groups, self._logps_groups + 1
      before = group - group % per_update
      # A group of the next batch waits for the weight sync after the last
      # update and the logging of its step (`metrics_buffered`), a gather
      # on the main thread: off-policy it often ends before that sync;
      # on-policy it starts after the sync but may end before the logging.
      syncs = before // self._prompts()
      if not self._order.wait_for(
          lambda: self._trained_groups >= before and self._syncs >= syncs,
          timeout=ORDER_TIMEOUT_S):
        raise RuntimeError(
            f"The log-probs of this host's group {group} waited"
            f" {ORDER_TIMEOUT_S:.0f} s for the updates of the"
            f" {before} groups before it ({self._trained_groups} trained,"
            f" {self._syncs} of {syncs} weight syncs): the learner's train"
            " step did not run.")

  def trained(self, train_ds: Any) -> None:
    """An update over `train_ds` (this host's examples) is done."""
    if not self._logps_groups:  # Nothing waits (any other learner too).
      return
    rows = sum(int(np.shape(e.prompt_ids)[0]) for e in train_ds)
    with self._order:
      self._trained_groups += rows // self._num_generations()
      self._order.notify_all()

  def before_update(self, trainer: Any, training_config: Any,
                    updates_at_sync: int) -> None:
    """Before an update of the agentic learner (the one learner that asks
    for trainer-side log-probs): on a step's first, when the step takes
    several (this host's mini-batch below its batch), keeps the policy of
    the last weight sync, as stock Tunix's anchor policy state, for the
    log-probs asked after it (`actor_logps_fn`): one more copy of the
    trainer's state in device memory while the step runs."""
    if (not self._agentic or trainer.train_steps != updates_at_sync
        or self._anchor_at == updates_at_sync):
      return
    self._anchor, self._anchor_at = None, updates_at_sync
    mini = training_config.mini_batch_size
    if mini is not None and mini < self._prompts():
      # pylint: disable=g-import-not-at-top
      from flax import nnx
      import jax
      import jax.numpy as jnp
      # pylint: enable=g-import-not-at-top

      self._anchor = jax.tree.map(jnp.copy, nnx.state(trainer.model))

  def actor_logps_fn(self, trainer: Any, *, pad_id: int, eos_id: int,
                     temperature: float, updates_at_sync: int) -> Any:
    """The trainer-side log-prob pass, as (prompts, completions) ->
    log-probs under the policy of the last weight sync (the cluster runs it
    over its rows: `McJaxRLCluster._global_logps`): the live state until
    the step's first update, then the anchor (`before_update`).

    Args:
      trainer: the actor trainer.
      pad_id, eos_id: the tokenizer's.
      temperature: as the rollout sampled.
      updates_at_sync: the trainer's optimizer updates at the last sync.
    """
    # pylint: disable=g-import-not-at-top
    from flax import nnx
    from tunix.rl import common
    # pylint: enable=g-import-not-at-top

    graphdef, state = nnx.split(trainer.model)
    if trainer.train_steps != updates_at_sync:
      if self._anchor is None or self._anchor_at != updates_at_sync:
        raise RuntimeError(
            "get_actor_per_token_logps after an optimizer update within a"
            f" step ({trainer.train_steps - updates_at_sync} since the last"
            " weight sync) with no copy of the synced policy: the cluster"
            " calls before_update before every update.")
      state = self._anchor
    return lambda prompts, completions: common.compute_per_token_logps(
        graphdef, state, prompt_tokens=prompts, completion_tokens=completions,
        pad_id=pad_id, eos_id=eos_id, stop_gradient=True, return_logits=False,
        temperature=temperature)

  def _num_generations(self) -> int:
    entries = self._ledger.entries
    return int(entries[0].row_ids[:, 1].max()) + 1 if entries else 1

  def _prompts(self) -> int:
    """This host's prompts per batch."""
    entries = self._ledger.entries
    return (entries[0].row_ids.shape[0] // self._num_generations()
            if entries else 1)

  def _identity(self, group: int, pair: int) -> tuple[np.ndarray, int, bool]:
    """The turn's row identity, its batch's global step, and whether it is
    the agent's first turn."""
    entries = self._ledger.entries
    if not entries:
      raise RuntimeError(
          f"An agent turn of group {group} came with no admitted batch open:"
          " feed the agentic learner the dataset returned by"
          " `cluster.shard_dataset(...)`.")
    per_batch = entries[0].row_ids.shape[0]
    num_generations = int(entries[0].row_ids[:, 1].max()) + 1
    prompts = per_batch // num_generations
    step, index = divmod(group, prompts)
    batch = step - self._first_step
    entry = next((e for e in entries if e.batch == batch), None)
    if entry is None or pair >= num_generations:
      raise RuntimeError(
          f"Agent turn of group {group}, pair {pair}: no admitted row (open"
          f" batches {[e.batch for e in entries]}, {prompts} prompts x"
          f" {num_generations} samples each, first step {self._first_step}).")
    row = entry.row_ids[index * num_generations + pair].copy()
    key = (group, pair)
    turn = self._turns.get(key, 0)
    self._turns[key] = turn + 1
    if turn == 0:
      self._ledger.mark_taken(entry.batch, 1)
    else:
      row[1] += num_generations * turn
    # Agents of closed batches take no more turns.
    for old in [k for k in self._turns if k[0] < group - 4 * prompts]:
      del self._turns[old]
    return row[None, :], step, turn == 0


  def _eval_identity(self, index: int, pair: int) -> np.ndarray:
    """An evaluation turn's row identity: the pass's `index`-th prompt's
    evaluation row (admission's), sample `pair + G x turn`."""
    entries = self._fixed_ids.evaluation.entries
    rows = (np.concatenate([e.row_ids for e in entries]) if entries
            else np.zeros((0, 2), np.int64))
    num_generations = self._num_generations()  # As in training.
    if index * num_generations + pair >= len(rows):
      raise RuntimeError(
          f"Evaluation agent {index}, pair {pair}: admission recorded"
          f" {len(rows)} evaluation rows; feed the agentic learner the"
          " eval_ds returned by `cluster.shard_eval_dataset(...)`.")
    row = rows[index * num_generations + pair].copy()
    turn = self._eval_turns.get((index, pair), 0)
    self._eval_turns[(index, pair)] = turn + 1
    row[1] += num_generations * turn
    return row[None, :]


@dataclasses.dataclass
class _Turn:
  """One agent turn waiting for the engine."""

  prompt: str
  ids: np.ndarray
  budget: int | None
  step: int | None  # The global step of its batch (None: evaluation).
  version: int | None  # The policy version it is pinned to (off-policy).
  evaluation: bool = False
  out: Any = None
  error: BaseException | None = None
  done: bool = False

  @property
  def key(self) -> tuple[Any, ...]:
    """Turns of one key may share an engine call."""
    return (self.version, self.step, self.evaluation)


def _run_batch(batch: list[_Turn], run: Generate, fixed_ids: Any,
               decode: Callable[[list[int]], str]) -> list[Any]:
  """Generates `batch` in one call, padded to a power of two of rows (few
  program shapes), to the full budget; each turn's output, cut to its own."""
  from tunix.rl.rollout import base_rollout  # pylint: disable=g-import-not-at-top

  n = len(batch)
  rows = batch + [batch[-1]] * ((1 << (n - 1).bit_length()) - n)
  with fixed_ids.fixed(np.concatenate([t.ids for t in rows])):
    out = run([t.prompt for t in rows], None)
  outs = []
  for i, t in enumerate(batch):
    keep = len(out.tokens[i]) if t.budget is None else t.budget
    tokens = out.tokens[i][:keep]
    outs.append(base_rollout.RolloutOutput(
        text=[out.text[i] if len(tokens) == len(out.tokens[i])
              else decode(np.asarray(tokens).tolist())],
        # The sampler's logits: [] unless asked for.
        logits=out.logits and [out.logits[i][:keep]],
        tokens=[tokens],
        left_padded_prompt_tokens=np.asarray(
            out.left_padded_prompt_tokens[i:i + 1]),
        logprobs=None if out.logprobs is None else [out.logprobs[i][:keep]],
    ))
  return outs


def chunk_rows(micro_batch_size: int | None) -> int | None:
  """Rows per log-prob program: `micro_batch_size`, except on the agentic
  learner's rollout thread, which asks for one group's log-probs at a time
  with a micro-batch of 1 (module doc): the group's rows then go in one
  program, as a single row cannot split over a host's devices."""
  if threading.current_thread() is threading.main_thread():
    return micro_batch_size
  return None
