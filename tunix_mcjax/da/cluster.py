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

"""The "mcjax_da" backend: the trainer hosts' cluster of the disaggregated mode.

`McJaxDaRLCluster` is the colocated `McJaxRLCluster` with its engine replaced
by the trainer host's rollout hosts (`remote_engine.RemoteEngine`); the stock
learner runs on top unchanged. Per step, on every trainer host: admission
(this trainer host's prompts; with staleness K the next K batches are
admitted ahead) -> completions from its rollout hosts -> rewards and
advantages (learner, local rows) -> with K >= 1, the proximal log-probs (one
forward pass of the actor over all trainer hosts) and truncated importance
weights (`importance`) -> the FSDP train step over the trainer hosts ->
publication: one all-gather into each trainer host, one put into Ray's
object store, installed by its rollout hosts before their next generation.

What the schedule supports today (refused before hosts start otherwise,
`rules.disaggregated`): num_iterations 1, one or several optimizer
updates per batch (mini-batches; micro-batches below them accumulate
gradients; the weights are published once per batch), no sequence packing
yet. The rollout and log-prob micro-batches are independent of the
training micro-batch, as in Tunix: the learner generates in the calls
`learner_generate_calls` predicts, and each training micro-batch takes its
rows from those calls' results in order, all of one policy version.

Checkpoint and resume are the colocated backend's (`checkpointing`: the
trainer hosts save; rollout hosts hold nothing worth saving). Policy
versions count the updates applied, so a run resumed at global step s
publishes the restored policy as version s and numbers on from there. The
older policies a stale batch would have been sampled with are not in the
checkpoint: with max_staleness K >= 1 the first batch after a resume is
sampled with the restored policy (staleness 0, as at step 1 of a fresh
run), so a resumed K >= 1 run differs from an uninterrupted one from that
batch on; at K = 0 the resume is exact.

Under `--transfer_guard` the trainer hosts' backend calls after the first
step are guarded as the colocated backend's are (`transfers`): rows stay on
the devices between the learner and the log-prob and train programs, and
what the trainer needs on the host by design moves explicitly
(`transfers.DELIBERATE`'s "da_rows", "da_importance" and "da_publish": the
row check against the rollout hosts' tokens, the importance weights
computed in numpy against the sampler log-probs from Ray, each publication
into Ray's object store). The rollout hosts are not guarded: their work is
host-side by nature (weights arrive from Ray's object store and go onto
their devices, completions go back through Ray).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator, Mapping
import dataclasses
import functools
import math
from typing import Any

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
from tunix.rl import common as rl_common
from tunix.rl import utils as rl_utils

from tunix_mcjax import cluster as cluster_lib
from tunix_mcjax import global_rows
from tunix_mcjax import runtime
from tunix_mcjax import transfers
from tunix_mcjax.da import importance
from tunix_mcjax.da import options as options_lib
from tunix_mcjax.da import remote_engine

Role = cluster_lib.Role
Mode = cluster_lib.Mode


def learner_generate_calls(
    prompts: int, *, num_generations: int, mini_batch_size: int | None,
    train_micro_batch_size: int | None, rollout_micro_batch_size: int | None,
    compute_logps_micro_batch_size: int | None) -> list[int]:
  """Rows of each engine call Tunix's learner (0.1.7) makes for one batch.

  All sizes in prompts, this host's (`rules.per_host_training_config`);
  None as in Tunix: mini-batch = batch, training micro-batch = mini-batch,
  rollout and log-prob micro-batches = training micro-batch. Per
  mini-batch, the learner (`RLLearner._prepare_data`) merges training
  micro-batches until they hold lcm(rollout, log-prob micro-batch) prompts
  or the mini-batch ends, and generates the merged rows in calls of the
  rollout micro-batch x G rows (`RLCluster.generate`), the last call of a
  merge taking what is left.
  """
  mini = mini_batch_size or prompts
  micro = train_micro_batch_size or mini
  rollout = rollout_micro_batch_size or micro
  target = math.lcm(rollout, compute_logps_micro_batch_size or micro)
  if prompts % mini or mini % micro:
    raise ValueError(
        f"{prompts} prompts per batch do not split into mini-batches of"
        f" {mini} and micro-batches of {micro}.")
  calls = []

  def merge(merged: int) -> None:
    rows, step = merged * num_generations, rollout * num_generations
    calls.extend(min(step, rows - lo) for lo in range(0, rows, step))

  for _ in range(prompts // mini):
    merged = 0
    for _ in range(mini // micro):
      merged += micro
      if merged >= target:
        merge(merged)
        merged = 0
    if merged:
      merge(merged)
  return calls


def take_generated(generated: collections.deque[remote_engine.GeneratedBatch],
                   rows: int) -> remote_engine.GeneratedBatch:
  """Takes the next `rows` generated rows off `generated`, in order, from
  one or more generate calls' results (a call's rest stays for the next
  micro-batch).

  A rollout micro-batch larger than the training micro-batch splits a
  call's rows over several updates' micro-batches; a smaller one joins
  several calls. A call's waits and counts go with its first rows.
  """
  parts, need = [], rows
  while need:
    if not generated:
      raise RuntimeError(
          f"A training micro-batch of {rows} rows, but only"
          f" {rows - need} generated rows wait for it: the learner trains"
          " rows it did not generate through this cluster.")
    head = generated[0]
    if len(head.tokens) <= need:
      parts.append(generated.popleft())
      need -= len(parts[-1].tokens)
      continue
    parts.append(dataclasses.replace(
        head, tokens=head.tokens[:need], logprobs=head.logprobs[:need]))
    generated[0] = dataclasses.replace(
        head, tokens=head.tokens[need:], logprobs=head.logprobs[need:],
        rollout_wait_s=0.0, generate_s=0.0, weights_wait_s=0.0,
        weights_get_s=0.0, weights_install_s=0.0, reissued_rows=0)
    need = 0
  versions = sorted({p.version for p in parts})
  if len(versions) > 1:
    raise RuntimeError(
        f"A training micro-batch of {rows} rows holds rows of policy"
        f" versions {versions}: the rows of one batch must be generated"
        " with one policy.")
  if len(parts) == 1:
    return parts[0]
  return remote_engine.GeneratedBatch(
      tokens=[t for p in parts for t in p.tokens],
      logprobs=[lp for p in parts for lp in p.logprobs],
      version=versions[0],
      rollout_wait_s=sum(p.rollout_wait_s for p in parts),
      generate_s=sum(p.generate_s for p in parts),
      weights_wait_s=max(p.weights_wait_s for p in parts),
      weights_get_s=max(p.weights_get_s for p in parts),
      weights_install_s=max(p.weights_install_s for p in parts),
      reissued_rows=sum(p.reissued_rows for p in parts))


class _Lookahead(Iterable[dict[str, Any]]):
  """A sharded dataset admitted `depth` batches ahead of the learner.

  Admission records a batch in the ledger when it is pulled, so the ledger's
  untaken entries are exactly the batches buffered here, in order.
  """

  def __init__(self, inner: Iterable[dict[str, Any]], depth: int):
    self._inner = inner
    self._depth = depth
    self._buffer: collections.deque[dict[str, Any]] = collections.deque()
    self._current: dict[str, Any] | None = None

  def __iter__(self) -> Iterator[dict[str, Any]]:
    self._buffer.clear()
    it = iter(self._inner)
    exhausted = False
    while True:
      while not exhausted and len(self._buffer) < self._depth + 1:
        try:
          self._buffer.append(next(it))
        except StopIteration:
          exhausted = True
      if not self._buffer:
        return
      self._current = self._buffer.popleft()
      yield self._current

  def buffered(self) -> list[dict[str, Any]]:
    """Admitted batches the learner has not pulled yet, oldest first."""
    return list(self._buffer)

  def current(self) -> dict[str, Any] | None:
    """The batch the learner pulled last (with micro-batches, the one whose
    rows it is generating)."""
    return self._current


class McJaxDaRLCluster(cluster_lib.McJaxRLCluster):
  """Trainer-host cluster whose rollouts come from separate rollout hosts.

  Takes `McJaxRLCluster`'s arguments plus `da` (`DaOptions`). Must run in a
  process Ray started (a trainer actor of `launcher`), so that this trainer
  host's rollout actors can be found by name.
  """

  backend_name = "mcjax_da"

  def __init__(self, *, da: options_lib.DaOptions, num_generations: int,
               **kwargs: Any):
    self.da = da
    self._num_generations = num_generations
    self._lookahead: _Lookahead | None = None
    self._step_da: dict[str, Any] = {}
    # Completion tokens behind `_step_da` (micro-batches merged so far).
    self._step_tokens = 0
    self.link: remote_engine.RolloutLink | None = None
    self._restored = False
    super().__init__(**kwargs)
    if self._restored:
      # Version = global step: the learner's staleness check (global step
      # minus the batch's version) continues from the checkpoint.
      self.rollout.publish_restored(
          self.global_steps,
          self.publisher(nnx.state(self.actor_trainer.model,
                                   self.weights.param_filter)))

  # --- the engine: this trainer host's rollout hosts --------------------------

  def _engine_factory(self, name: str) -> Any:
    import ray  # pylint: disable=g-import-not-at-top

    del name  # The rollout hosts run it (see `rollout_host`).
    names = self.da.rollout_actor_names(jax.process_index())
    # The launcher named them in the namespace this job runs in (its own
    # per launch unless the options give one).
    namespace = self.da.namespace or ray.get_runtime_context().namespace
    handles = []
    for actor_name in names:
      try:
        handles.append(ray.get_actor(actor_name, namespace=namespace))
      except ValueError as e:
        raise RuntimeError(
            f"Rollout actor {actor_name!r} (namespace {namespace!r})"
            " not found: the disaggregated backend runs inside a job started"
            " by tunix_mcjax.da.launcher, which creates the rollout hosts."
        ) from e
    self.link = remote_engine.RolloutLink(
        handles, timeout_s=self.da.timeout_s,
        # A re-issued request runs on the weights it was made for.
        keep_versions=self.da.max_staleness + 2)
    return functools.partial(
        remote_engine.RemoteEngine, link=self.link,
        max_staleness=self.da.max_staleness, upcoming=self._upcoming)

  # --- resume ------------------------------------------------------------------

  def _publish_restored(self) -> None:
    # Called while the base class restores, before the restored global step
    # (the version to publish it as) is set: published at the end of
    # __init__, before any rollout.
    self._restored = True

  # --- admission, `max_staleness` batches ahead --------------------------------

  def shard_dataset(self, global_batches: Iterable[Mapping[str, Any]], *,
                    num_generations: int, loss_agg_mode: str | None = None
                    ) -> Iterable[dict[str, Any]]:
    sharded = super().shard_dataset(global_batches,
                                    num_generations=num_generations,
                                    loss_agg_mode=loss_agg_mode)
    self._lookahead = _Lookahead(sharded, self.da.max_staleness)
    return self._lookahead

  def _generate_calls(self, prompts: int) -> list[int]:
    """Rows of the learner's engine calls for a batch of `prompts`."""
    tc = self.cluster_config.training_config
    return learner_generate_calls(
        prompts, num_generations=self._num_generations,
        mini_batch_size=tc.mini_batch_size,
        train_micro_batch_size=tc.train_micro_batch_size,
        rollout_micro_batch_size=tc.rollout_micro_batch_size,
        compute_logps_micro_batch_size=tc.compute_logps_micro_batch_size)

  def _upcoming(self, k: int, rows_per_call: int
                ) -> list[tuple[list[str], np.ndarray]]:
    """The learner's next generate calls, up to the end of the next `k`
    admitted batches: prompts (G rows each) and row ids per call.

    With micro-batches the learner generates a batch in several calls, in
    order (`learner_generate_calls`); the rest of the batch being generated
    comes first. `rows_per_call`: the call just made, whose rows the ledger
    has given out; it must be the one the plan predicted.
    """
    if not k or self._lookahead is None:
      return []
    open_entries = self.ledger.entries
    entries = [e for e in open_entries if e.taken == 0]
    batches = self._lookahead.buffered()
    if len(entries) != len(batches):
      raise RuntimeError(
          f"{len(entries)} admitted batches not generated yet, but"
          f" {len(batches)} buffered: the learner must generate each batch"
          " once, in admission order."
      )
    g = self._num_generations
    pending = [(e, b, 0) for e, b in list(zip(entries, batches))[:k]]
    started = [e for e in open_entries if 0 < e.taken < e.row_ids.shape[0]]
    if started:
      pending.insert(0, (started[0], self._lookahead.current(),
                         started[0].taken))
    calls = []
    for i, (entry, batch, first) in enumerate(pending):
      prompts = [p for p in batch["prompts"] for _ in range(g)]
      rows = entry.row_ids.shape[0]
      sizes = self._generate_calls(len(batch["prompts"]))
      bounds = np.cumsum([0, *sizes]).tolist()
      just_made = (first - rows_per_call, first) if started and not i else (
          None)
      if len(prompts) != rows or first not in bounds or (
          just_made is not None and just_made[0] not in bounds):
        raise RuntimeError(
            f"Batch {entry.batch} ({rows} rows, {len(prompts)} prompts x G):"
            f" the learner's generate call of {rows_per_call} rows ending at"
            f" row {first} is not one of the calls of {sizes} rows that"
            " Tunix's learner makes for it (learner_generate_calls); the"
            " disaggregated schedule prefetches exactly those."
        )
      for lo, hi in zip(bounds, bounds[1:]):
        if lo >= first:
          calls.append((prompts[lo:hi], entry.row_ids[lo:hi]))
    return calls

  # --- the learner's calls ------------------------------------------------------

  def get_old_per_token_logps(self, prompt_tokens, completion_tokens,
                              micro_batch_size=None):
    # No engine on this host: the trainers' own policy, over all of them.
    with self._guarded():
      return self._actor_logps(prompt_tokens, completion_tokens,
                               micro_batch_size)

  def _actor_logps(self, prompt_tokens, completion_tokens,
                   micro_batch_size=None) -> jax.Array:
    """This host's rows' log-probs under the actor (a global program), left
    on this host's devices."""
    n = prompt_tokens.shape[0]
    temperature = self.get_rollout_config(mode=Mode.TRAIN).temperature
    graphdef, state = nnx.split(self.actor_trainer.model)
    outs = []
    with self.step_clock.phase("logps", cross_host="logps"), \
        self._get_mesh_and_logical_axis_rules_cm(Role.ACTOR), \
        self._guarded():
      for sl in rl_utils.chunk_slices_by_size(stop=n,
                                              step=micro_batch_size or n):
        out = rl_common.compute_per_token_logps(
            graphdef, state,
            prompt_tokens=self._to_global(
                global_rows.take_rows(prompt_tokens, sl)),
            completion_tokens=self._to_global(
                global_rows.take_rows(completion_tokens, sl)),
            pad_id=self.rollout.pad_id(), eos_id=self.rollout.eos_id(),
            stop_gradient=True, return_logits=False,
            temperature=temperature,
        )
        # This host's rows, left on its devices.
        outs.append(global_rows.local_rows_on_device(
            runtime.order_collectives(out)))
      return outs[0] if len(outs) == 1 else jnp.concatenate(outs, axis=0)

  def update_actor(self, train_ds, eval_ds, skip_jit=False):
    # With micro-batches (gradient accumulation) the learner generates and
    # hands over one micro-batch at a time: one generated part per example,
    # the step's record combining them.
    with self._guarded():
      examples = []
      for example in train_ds:
        batch = take_generated(self.rollout.generated,
                               example.completion_ids.shape[0])
        earlier, self._step_da = self._step_da, {}
        weighted, tokens = self._with_importance_weights(example, batch)
        examples.append(weighted)
        # Only `is_weight_mean` (K >= 1) is weighted by tokens when merged.
        if earlier:
          self._step_da = _merge_parts(earlier, self._step_da,
                                       self._step_tokens, tokens)
          tokens += self._step_tokens
        self._step_tokens = tokens
      super().update_actor(examples, eval_ds, skip_jit)

  def _with_importance_weights(
      self, example: Any, batch: remote_engine.GeneratedBatch
  ) -> tuple[Any, int]:
    """Checks the rows' policy version; weights them when they may be stale.

    Returns the example (with `sampler_is_weights` when K >= 1) and, when
    weighted, its completion tokens (0 otherwise): they weight its
    `is_weight_mean` when a step's micro-batches are merged.
    """
    staleness = self.global_steps - batch.version
    if not 0 <= staleness <= self.da.max_staleness:
      raise RuntimeError(
          f"A batch of policy version {batch.version} reached the update of"
          f" version {self.global_steps}: staleness {staleness} is outside"
          f" [0, max_staleness={self.da.max_staleness}]."
      )
    with transfers.deliberate("da_rows"):
      completion_ids = np.asarray(jax.device_get(example.completion_ids))
    for i, tokens in enumerate(batch.tokens):
      row = np.asarray(tokens)[:completion_ids.shape[1]]
      if not np.array_equal(completion_ids[i, :row.shape[0]], row):
        raise RuntimeError(
            f"Row {i} of the update is not the completion the rollout hosts"
            " generated for it: the learner reordered rows."
        )
    self._step_da = {
        "policy_version": int(batch.version),
        "staleness": int(staleness),
        "rollout_wait_s": float(batch.rollout_wait_s),
        "rollout_generate_s": float(batch.generate_s),
        "weights_wait_s": float(batch.weights_wait_s),
        "weights_get_s": float(batch.weights_get_s),
        "weights_install_s": float(batch.weights_install_s),
        "reissued_rows": int(batch.reissued_rows),
    }
    if self.da.max_staleness == 0:
      # On-policy by construction: the sampler is the trainer's policy.
      return example, 0
    prox = self._actor_logps(example.prompt_ids, example.completion_ids)
    with transfers.deliberate("da_importance"):
      prox, mask = (np.asarray(a) for a in jax.device_get(
          (prox, example.completion_mask)))
    sampler = importance.padded_sampler_logps(batch.logprobs,
                                              completion_ids.shape[1])
    weights = importance.truncated_weights(prox, sampler, mask,
                                           self.da.is_cap)
    self._step_da.update(importance.weight_stats(
        weights, mask, importance.context_aligned(
            completion_ids, mask, self.rollout.pad_id())))
    # The weights go into the global batch with the other host rows
    # (`global_rows.to_global`, "host_rows").
    return example.replace(sampler_is_weights=weights), int(mask.sum())

  def _step_extras(self) -> dict[str, Any] | None:
    # After this step's publication: its bytes and put time.
    extras, self._step_da = self._step_da, {}
    extras.update(self.link.last_publish)
    extras["rollout_host_failures"] = self.link.failures
    return extras

  def close(self):
    try:
      super().close()
    finally:
      if self.link is not None:
        self.link.close()


# How a step's record combines its micro-batches' values (keys not named:
# the last micro-batch's).
_SUMMED = ("rollout_wait_s", "rollout_generate_s", "reissued_rows",
           "misaligned_tokens")
_LARGEST = ("staleness", "weights_wait_s", "weights_get_s",
            "weights_install_s", "is_weight_max", "is_weight_max_dev_aligned")
_SMALLEST = ("policy_version", "is_weight_min")


def _merge_parts(earlier: Mapping[str, Any], part: Mapping[str, Any],
                 earlier_tokens: int, part_tokens: int) -> dict[str, Any]:
  """One step's DA fields from those of its micro-batches so far and the
  next one (`earlier_tokens`, `part_tokens`: their completion tokens, which
  weight `is_weight_mean`)."""
  out = {**earlier, **part}
  for key in part.keys() & earlier.keys():
    if key in _SUMMED:
      out[key] = earlier[key] + part[key]
    elif key in _LARGEST:
      out[key] = max(earlier[key], part[key])
    elif key in _SMALLEST:
      out[key] = min(earlier[key], part[key])
    elif key == "is_weight_mean":
      total = earlier_tokens + part_tokens
      out[key] = (float(earlier[key]) if not total else
                  (earlier[key] * earlier_tokens + part[key] * part_tokens)
                  / total)
  return out
