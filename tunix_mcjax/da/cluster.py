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
`support.disaggregated`): one generate call and one optimizer update per
batch (mini- and micro-batch = batch, num_iterations 1), Tunix trainers, no
checkpoint resume and no sequence packing yet.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator, Mapping
import functools
from typing import Any

from flax import nnx
import jax
import numpy as np
from tunix.rl import common as rl_common
from tunix.rl import utils as rl_utils

from tunix_mcjax import cluster as cluster_lib
from tunix_mcjax.da import importance
from tunix_mcjax.da import options as options_lib
from tunix_mcjax.da import remote_engine

Role = cluster_lib.Role
Mode = cluster_lib.Mode


class _Lookahead(Iterable[dict[str, Any]]):
  """A sharded dataset admitted `depth` batches ahead of the learner.

  Admission records a batch in the ledger when it is pulled, so the ledger's
  untaken entries are exactly the batches buffered here, in order.
  """

  def __init__(self, inner: Iterable[dict[str, Any]], depth: int):
    self._inner = inner
    self._depth = depth
    self._buffer: collections.deque[dict[str, Any]] = collections.deque()

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
      yield self._buffer.popleft()

  def buffered(self) -> list[dict[str, Any]]:
    """Admitted batches the learner has not pulled yet, oldest first."""
    return list(self._buffer)


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
    self.link: remote_engine.RolloutLink | None = None
    super().__init__(**kwargs)

  # --- the engine: this trainer host's rollout hosts --------------------------

  def _engine_factory(self, name: str) -> Any:
    import ray  # pylint: disable=g-import-not-at-top

    del name  # The rollout hosts run it (see `rollout_host`).
    names = self.da.rollout_actor_names(jax.process_index())
    handles = []
    for actor_name in names:
      try:
        handles.append(ray.get_actor(actor_name, namespace=self.da.namespace))
      except ValueError as e:
        raise RuntimeError(
            f"Rollout actor {actor_name!r} (namespace {self.da.namespace!r})"
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

  # --- admission, `max_staleness` batches ahead --------------------------------

  def shard_dataset(self, global_batches: Iterable[Mapping[str, Any]], *,
                    num_generations: int, loss_agg_mode: str | None = None
                    ) -> Iterable[dict[str, Any]]:
    sharded = super().shard_dataset(global_batches,
                                    num_generations=num_generations,
                                    loss_agg_mode=loss_agg_mode)
    self._lookahead = _Lookahead(sharded, self.da.max_staleness)
    return self._lookahead

  def _upcoming(self, k: int) -> list[tuple[list[str], np.ndarray]]:
    """Prompts (G rows each) and row ids of the next `k` admitted batches."""
    if not k or self._lookahead is None:
      return []
    entries = [e for e in self.ledger.entries if e.taken == 0]
    batches = self._lookahead.buffered()
    if len(entries) != len(batches):
      raise RuntimeError(
          f"{len(entries)} admitted batches not generated yet, but"
          f" {len(batches)} buffered: the learner must generate each batch"
          " once, in admission order."
      )
    g = self._num_generations
    return [([p for p in b["prompts"] for _ in range(g)], e.row_ids)
            for e, b in list(zip(entries, batches))[:k]]

  # --- the learner's calls ------------------------------------------------------

  def get_old_per_token_logps(self, prompt_tokens, completion_tokens,
                              micro_batch_size=None):
    # No engine on this host: the trainers' own policy, over all of them.
    return self._actor_logps(prompt_tokens, completion_tokens,
                             micro_batch_size)

  def _actor_logps(self, prompt_tokens, completion_tokens,
                   micro_batch_size=None) -> np.ndarray:
    """This host's rows' log-probs under the actor (a global program)."""
    n = prompt_tokens.shape[0]
    temperature = self.get_rollout_config(mode=Mode.TRAIN).temperature
    graphdef, state = nnx.split(self.actor_trainer.model)
    outs = []
    with self.step_clock.phase("logps", cross_host="logps"), \
        self._get_mesh_and_logical_axis_rules_cm(Role.ACTOR):
      for sl in rl_utils.chunk_slices_by_size(stop=n,
                                              step=micro_batch_size or n):
        out = rl_common.compute_per_token_logps(
            graphdef, state,
            prompt_tokens=self._to_global(np.asarray(prompt_tokens[sl])),
            completion_tokens=self._to_global(
                np.asarray(completion_tokens[sl])),
            pad_id=self.rollout.pad_id(), eos_id=self.rollout.eos_id(),
            stop_gradient=True, return_logits=False,
            temperature=temperature,
        )
        outs.append(self._local_rows(out))
    return np.concatenate(outs, axis=0)

  def update_actor(self, train_ds, eval_ds, skip_jit=False):
    examples = [self._with_importance_weights(e) for e in train_ds]
    super().update_actor(examples, eval_ds, skip_jit)

  def _with_importance_weights(self, example: Any) -> Any:
    """Checks the batch's policy version; weights it when it may be stale."""
    batch = self.rollout.generated.popleft()
    staleness = self.global_steps - batch.version
    if not 0 <= staleness <= self.da.max_staleness:
      raise RuntimeError(
          f"A batch of policy version {batch.version} reached the update of"
          f" version {self.global_steps}: staleness {staleness} is outside"
          f" [0, max_staleness={self.da.max_staleness}]."
      )
    completion_ids = np.asarray(example.completion_ids)
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
        "reissued_rows": int(batch.reissued_rows),
    }
    if self.da.max_staleness == 0:
      # On-policy by construction: the sampler is the trainer's policy.
      return example
    prox = self._actor_logps(np.asarray(example.prompt_ids), completion_ids)
    sampler = importance.padded_sampler_logps(batch.logprobs,
                                              completion_ids.shape[1])
    mask = np.asarray(example.completion_mask)
    weights = importance.truncated_weights(prox, sampler, mask,
                                           self.da.is_cap)
    self._step_da.update(importance.weight_stats(
        weights, mask, importance.context_aligned(
            completion_ids, mask, self.rollout.pad_id())))
    return example.replace(sampler_is_weights=weights)

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
