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

"""The trainer host's side of the split: its rollout hosts behind an engine.

`RemoteEngine` is the rollout engine of a trainer host under the "mcjax_da"
backend: Tunix's learner calls `generate` and `update_params` as on any
engine, and they become requests to this trainer host's rollout hosts
(`RolloutLink`, Ray actor calls). Rows keep their identities, so completions
equal those of a local engine with the same weights.

Schedule with bounded staleness K: when the learner asks for batch t, the
next K admitted batches are submitted too (with the last published policy),
so rollout hosts generate them while the trainers train; a rollout host runs
its calls in order, so a request submitted after a publication uses it. With
K = 0 every batch is generated after the previous update was published.
With micro-batches (gradient accumulation) the learner asks for a batch one
micro-batch at a time; the prefetched requests then cover the rest of
batch t and the next K batches in micro-batch requests, so every part of a
batch carries one policy version.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
import dataclasses
import threading
import time
from typing import Any

from flax import nnx
import jax
import numpy as np
from tunix.generate import tokenizer_adapter
from tunix.rl.rollout import base_rollout
from tunix.sft import utils as sft_utils

from tunix_mcjax import transfers
from tunix_mcjax import tree_paths
from tunix_mcjax.engines import base as engine_base

# (prompts, row ids) of the learner's next generate calls, up to the end of
# the next k admitted batches, in calls of the given number of rows.
Upcoming = Callable[[int, int], Sequence[tuple[list[str], np.ndarray]]]


# How often a trainer host asks whether a crashed rollout host is back.
_RESTART_POLL_S = 0.5


class RolloutWaitTimeout(TimeoutError):
  """A rollout host did not answer within the timeout."""


@dataclasses.dataclass
class _Request:
  prompts: list[str]
  ids: np.ndarray
  rollout_config: Any
  # (rollout host, first row, end row) per part, and its pending result.
  parts: list[tuple[int, int, int]]
  refs: list[Any]
  version: int


@dataclasses.dataclass(frozen=True)
class GeneratedBatch:
  """What the trainer keeps of a generated batch for its update."""

  tokens: list[np.ndarray]
  logprobs: list[np.ndarray]
  version: int
  rollout_wait_s: float
  generate_s: float
  weights_wait_s: float
  # The slowest of the generating rollout hosts: seconds to get the batch's
  # weights version from Ray's object store, and to install them.
  weights_get_s: float
  weights_install_s: float
  reissued_rows: int
  # Agent turns: the global step of their batch (`agent_turns`).
  step: int | None = None


class RolloutLink:
  """One trainer host's rollout hosts (Ray actor handles), in order.

  Tracks which policy version each rollout host holds (or will hold once its
  queued calls have run), so that a request always runs on the weights it
  was submitted for: a rollout host that Ray restarted after a crash gets
  them again before its re-issued rows, which keep their identities (the
  same completions as without the crash).

  Args:
    handles: the rollout hosts this trainer host owns; its rows are split
      over them in contiguous blocks.
    timeout_s: the longest wait for one rollout host's answer.
    keep_versions: published versions kept in the object store for
      re-issued requests (at least max_staleness + 1).
    max_reissues: how often one part of a batch may be re-issued after its
      rollout host died before the job stops.
  """

  def __init__(self, handles: Sequence[Any], *, timeout_s: float,
               keep_versions: int = 2, max_reissues: int = 2):
    if not handles:
      raise ValueError("A trainer host needs at least one rollout host.")
    self._handles = list(handles)
    self._timeout_s = timeout_s
    self._keep_versions = max(1, keep_versions)
    self._max_reissues = max_reissues
    self.version = -1
    self._weights: dict[int, Any] = {}
    self._installed: list[int | None] = [None] * len(self._handles)
    self._install_refs: dict[int, Any] = {}
    # (version, rollout host) -> the installation that put that version
    # there last (its get and install seconds, `RolloutHost.set_weights`).
    self._install_log: dict[tuple[int, int], Any] = {}
    self.last_publish: dict[str, float] = {}
    # Rollout-host failures this link has recovered from, over the job.
    self.failures = 0
    # Agent turns are submitted from the learner's threads while a
    # publication may run on its main thread.
    self._lock = threading.RLock()

  def publish(self, version: int, flat: dict[tuple[Any, ...], np.ndarray],
              *, install: bool = True) -> None:
    """One put into Ray's object store; each rollout host installs it next
    (with `install`; else before the first request made for it).

    The installation is queued behind the requests a host already has, and
    checked (with the timeout) at the next publication.
    """
    import ray  # pylint: disable=g-import-not-at-top

    with self._lock:
      self._check_installed()
      t0 = time.perf_counter()
      self._weights[version] = ray.put(flat)
      put_s = time.perf_counter() - t0
      for old in [v for v in self._weights
                  if v <= version - self._keep_versions]:
        del self._weights[old]
      for key in [k for k in self._install_log
                  if k[0] <= version - self._keep_versions]:
        del self._install_log[key]
      self.version = version
      for i in range(len(self._handles) if install else 0):
        self._ensure(i, version)
      self.last_publish = {
          "weights_put_s": put_s,
          "weights_bytes": float(sum(np.asarray(v).nbytes
                                     for v in flat.values())),
      }

  def _ensure(self, host: int, version: int) -> None:
    """Queues weights `version` on `host` unless it holds them already."""
    if self._installed[host] == version:
      return
    if version not in self._weights:
      raise RuntimeError(
          f"Weights version {version} are no longer kept (kept:"
          f" {sorted(self._weights)}); cannot re-issue a request made for"
          " them."
      )
    # In a list, so that Ray hands the reference over unresolved and the
    # rollout host times its own get.
    self._install_refs[host] = self._handles[host].set_weights.remote(
        version, [self._weights[version]])
    self._install_log[(version, host)] = self._install_refs[host]
    self._installed[host] = version

  def _check_installed(self) -> None:
    """The queued installations succeeded (a host that died is re-armed)."""
    import ray  # pylint: disable=g-import-not-at-top

    refs, self._install_refs = self._install_refs, {}
    for host, ref in refs.items():
      try:
        self._get(ref, what="an installation of weights", host=host)
      except ray.exceptions.RayActorError as e:
        # Restarted by Ray without weights: installed again before its next
        # request.
        self.failures += 1
        print(f"[da] rollout host {host} died ({type(e).__name__}) while"
              " installing weights; Ray restarts it and it gets them again"
              " before its next request", flush=True)
        self._await_restart(host)
        self._installed[host] = None

  def submit(self, prompts: list[str], ids: np.ndarray,
             rollout_config: Any, version: int | None = None) -> _Request:
    """Sends the rows to the rollout hosts (split in contiguous blocks), to
    be generated with policy `version` (default: the last published)."""
    if version is not None and version > self.version:
      raise RuntimeError(
          f"Rows asked for policy version {version}, but the last"
          f" published is {self.version}.")
    n = len(prompts)
    bounds = np.linspace(0, n, len(self._handles) + 1).astype(int)
    request = _Request(prompts=list(prompts), ids=np.asarray(ids),
                       rollout_config=rollout_config, parts=[], refs=[],
                       version=self.version if version is None else version)
    for host in range(len(self._handles)):
      lo, hi = int(bounds[host]), int(bounds[host + 1])
      if hi > lo:
        request.parts.append((host, lo, hi))
        request.refs.append(self._issue(request, host, lo, hi))
    return request

  def _issue(self, request: _Request, host: int, lo: int, hi: int) -> Any:
    with self._lock:
      self._ensure(host, request.version)
      return self._handles[host].generate.remote(
          request.prompts[lo:hi], request.ids[lo:hi], request.rollout_config,
          request.version)

  def wait(self, request: _Request) -> tuple[base_rollout.RolloutOutput,
                                             GeneratedBatch]:
    import ray  # pylint: disable=g-import-not-at-top

    t0 = time.perf_counter()
    parts, reissued = [], 0
    for (host, lo, hi), ref in zip(request.parts, request.refs):
      for attempt in range(self._max_reissues + 1):
        try:
          part = self._get(ref, what=f"{hi - lo} rollouts", host=host)
        except ray.exceptions.RayActorError as e:
          why = f"died ({type(e).__name__})"
          part = None
        else:
          if "holds" not in part:
            parts.append(part)
            break
          # Restarted after a crash while idle: it lost its weights.
          why = (f"was restarted (holds weights version {part['holds']},"
                 f" not {request.version})")
        if attempt == self._max_reissues:
          raise RuntimeError(
              f"Rollout host {host} of this trainer host failed"
              f" {attempt + 1} times on rows {lo}-{hi} of a batch; giving up:"
              f" it {why}."
          )
        self.failures += 1
        print(f"[da] rollout host {host} {why}; re-issuing its {hi - lo}"
              f" rows with the same identities on weights version"
              f" {request.version}", flush=True)
        self._await_restart(host)
        with self._lock:
          self._installed[host] = None
          ref = self._issue(request, host, lo, hi)
        reissued += hi - lo
    waited = time.perf_counter() - t0
    versions = {p["version"] for p in parts}
    if versions != {request.version}:
      raise RuntimeError(
          f"A batch submitted for policy version {request.version} was"
          f" generated with versions {sorted(versions)}."
      )
    got, installed = self._install_times(request)
    out = base_rollout.RolloutOutput(
        text=[t for p in parts for t in p["text"]],
        logits=[],
        tokens=[t for p in parts for t in p["tokens"]],
        left_padded_prompt_tokens=np.concatenate(
            [p["left_padded_prompt_tokens"] for p in parts], axis=0),
        logprobs=[lp for p in parts for lp in p["logprobs"]],
    )
    batch = GeneratedBatch(
        tokens=out.tokens, logprobs=out.logprobs, version=request.version,
        rollout_wait_s=waited,
        generate_s=max(p["generate_s"] for p in parts),
        weights_wait_s=max(p["idle_s"] for p in parts),
        weights_get_s=got,
        weights_install_s=installed,
        reissued_rows=reissued,
    )
    return out, batch

  def _install_times(self, request: _Request) -> tuple[float, float]:
    """Slowest get and install of the request's weights on its hosts.

    Each host ran the installation before the generation (a rollout host
    runs its calls in order), so these are done.
    """
    import ray  # pylint: disable=g-import-not-at-top

    times = []
    for host, _, _ in request.parts:
      with self._lock:
        ref = self._install_log.get((request.version, host))
      try:
        if ref is not None:
          times.append(self._get(ref, what="an installation of weights",
                                 host=host))
      except ray.exceptions.RayActorError:
        pass  # Not the installation its rows ran on (re-armed since).
    return (max((t["get_s"] for t in times), default=0.0),
            max((t["install_s"] for t in times), default=0.0))

  def _await_restart(self, host: int) -> None:
    """Waits until Ray has restarted `host` (calls fail meanwhile)."""
    import ray  # pylint: disable=g-import-not-at-top

    deadline = time.monotonic() + self._timeout_s
    while True:
      try:
        self._get(self._handles[host].info.remote(),
                  what="the restart of a crashed rollout host", host=host)
        return
      except ray.exceptions.ActorUnavailableError:
        if time.monotonic() > deadline:
          raise RolloutWaitTimeout(
              f"Rollout host {host} of this trainer host was not restarted"
              f" within {self._timeout_s:.0f} s after it crashed.") from None
        time.sleep(_RESTART_POLL_S)
      except ray.exceptions.ActorDiedError as e:
        raise RuntimeError(
            f"Rollout host {host} of this trainer host died and Ray will not"
            f" restart it again (restarts used up): {e}") from e

  def _get(self, ref: Any, *, what: str, host: int) -> Any:
    import ray  # pylint: disable=g-import-not-at-top

    ready, _ = ray.wait([ref], timeout=self._timeout_s)
    if not ready:
      raise RolloutWaitTimeout(
          f"Waited {self._timeout_s:.0f} s for {what} from rollout host"
          f" {host} of this trainer host; it is stuck or gone (see its log"
          " above)."
      )
    return ray.get(ref)

  def close(self) -> None:
    self._install_refs = {}
    self._weights = {}


class RemoteEngine(engine_base.Engine):
  """A trainer host's engine whose work runs on its rollout hosts.

  Takes Tunix's rollout arguments plus `context` (as every engine) and the
  `link`; `max_staleness` and `upcoming` give the schedule (module doc).
  `pinned_turns`: the (policy version, batch step) of the agent turns the
  calling thread generates, or None (`agent_turns.current_turns`).
  """

  def __init__(
      self,
      *,
      rollout_actor: nnx.Module | None = None,
      tokenizer: Any,
      mesh: Any = None,
      rollout_config: base_rollout.RolloutConfig | None = None,
      context: engine_base.EngineContext,
      link: RolloutLink,
      max_staleness: int,
      upcoming: Upcoming,
      pinned_turns: Callable[[], tuple[int, int] | None] = lambda: None,
  ):
    del rollout_actor, mesh, rollout_config
    if context.initial_model is None or context.engine_mesh is None:
      raise ValueError(
          "RemoteEngine needs the trainer host's local copy of the policy"
          " (context.initial_model) and its local mesh."
      )
    self._mesh = context.engine_mesh
    self._row_ids = context.row_ids
    self._tokenizer = tokenizer_adapter.TokenizerAdapter(tokenizer)
    self._link = link
    self._max_staleness = max_staleness
    self._upcoming = upcoming
    self._pinned_turns = pinned_turns
    # Whether agent turns pinned to their versions came (installs are lazy).
    self._pinned_seen = False
    self._queue: collections.deque[_Request] = collections.deque()
    self.generated: collections.deque[GeneratedBatch] = collections.deque()
    model = context.initial_model
    lora = sft_utils.is_lora_enabled(model)
    self._target = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
        nnx.state(model, nnx.LoRAParam if lora else nnx.Param),
    )
    # Version 0: the whole initial policy (base and adapters).
    link.publish(0, _to_host(nnx.state(model, nnx.Param)))

  @property
  def engine_mesh(self) -> jax.sharding.Mesh:
    return self._mesh

  def publication_target(self) -> Any:
    return self._target

  def generate(self, prompts: Sequence[str],
               rollout_config: base_rollout.RolloutConfig,
               **kwargs: Any) -> base_rollout.RolloutOutput:
    del kwargs
    # A string is one prompt (an agent turn of Tunix's agentic learner).
    prompts = [prompts] if isinstance(prompts, str) else list(prompts)
    ids = engine_base.check_row_ids(self._row_ids.take(len(prompts)))
    if getattr(self._row_ids, "is_evaluating", False):
      # Evaluation: with the latest policy, outside the training schedule.
      out, _ = self._link.wait(self._link.submit(prompts, ids,
                                                 rollout_config))
      return out
    pinned = self._pinned_turns()
    if pinned is not None:
      # Agent turns: on their batch's policy version; nothing prefetched
      # (Tunix's producer runs ahead itself).
      self._pinned_seen = True
      out, batch = self._link.wait(self._link.submit(
          prompts, ids, rollout_config, version=pinned[0]))
      self.generated.append(dataclasses.replace(batch, step=pinned[1]))
      return out
    request = self._queue.popleft() if self._queue else None
    if request is not None and (
        request.prompts != prompts or not np.array_equal(request.ids, ids)):
      raise RuntimeError(
          "The learner asked for other rows than the prefetched batch (rows"
          f" {ids[:2].tolist()}... vs {request.ids[:2].tolist()}...): the"
          " disaggregated schedule needs the learner to generate each"
          " admitted batch once, in admission order."
      )
    if request is None:
      request = self._link.submit(prompts, ids, rollout_config)
    # Generated while the trainers train on this batch.
    for next_prompts, next_ids in self._upcoming(
        self._max_staleness, len(prompts))[len(self._queue):]:
      self._queue.append(
          self._link.submit(next_prompts, next_ids, rollout_config))
    out, batch = self._link.wait(request)
    self.generated.append(batch)
    return out

  def update_params(self, params: Any,
                    filter_types: tuple[Any, ...] | None = None) -> None:
    del filter_types  # The paths say which parameters these are.
    # Pinned agent turns may still need the version before: each rollout
    # host installs a version when a request first needs it.
    self._link.publish(self._link.version + 1, _to_host(params),
                       install=not self._pinned_seen)

  def publish_restored(self, version: int, params: Any) -> None:
    """A resumed run's restored policy, published as `version`.

    Versions count the updates applied to the policy: a run resumed at
    global step s publishes the restored weights as version s (the initial
    publication, version 0, held the weights from before the restore), and
    the next update publishes s + 1. Call before any rollout.
    """
    if self._queue or self.generated or version <= self._link.version:
      raise RuntimeError(
          f"The restored policy (version {version}) must be published before"
          " any rollout and after only the initial publication (version"
          f" {self._link.version} published)."
      )
    self._link.publish(version, _to_host(params))

  def get_per_token_logps(self, prompt_tokens: Any, completion_tokens: Any):
    raise NotImplementedError(
        "Under mcjax_da the trainer hosts compute log-probs themselves.")

  def pad_id(self) -> int:
    return self._tokenizer.pad_id()

  def eos_id(self) -> int:
    return self._tokenizer.eos_id()

  def model(self) -> None:
    # Nothing on this host holds the rollout policy: the learner syncs.
    return None


def _to_host(params: Any) -> dict[tuple[Any, ...], np.ndarray]:
  """Published (replicated, host-local) arrays -> numpy, by parameter path
  (for Ray's object store: a deliberate device-to-host copy)."""
  flat = tree_paths.flat_params(params)
  with transfers.deliberate("da_publish"):
    values = jax.device_get(list(flat.values()))
  return {path: np.asarray(x) for path, x in zip(flat, values)}
