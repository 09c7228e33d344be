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

"""Host-side optimizations of the step, each a switch (LoCoJAX O1-O4).

`HostOptimizations` names the four switches; `PROFILES` holds the two
measured settings, "base" (all off: what an upstream recipe does) and
"optimized" (all on). Two of them need host machinery, kept here so that it
can be tested without a cluster:

- O1 `MetricsExporter`: metrics formatting and I/O (console, JSONL, Tunix's
  metrics logger) on one background thread instead of the step's path.
- O2 `GcPolicy`: `gc.freeze()` after the warm-up step, and Tunix's own
  `gc.collect()` calls on the step path skipped.

O3 (prompt admission balanced by length) lives in `admission.py`, O4
(publication in one call vs one call per parameter) in `publication.py` and
the cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
import dataclasses
import gc
import queue
import threading
import time
import types
from typing import Any

from absl import logging

from tunix_mcjax.compat import gc_hooks


@dataclasses.dataclass(frozen=True, kw_only=True)
class HostOptimizations:
  """The host-side optimizations O1-O4 (each independent).

  Attributes:
    async_metrics: O1. Host 0 formats and writes the per-step metrics
      (console line, JSONL, Tunix's metrics logger) on a background thread,
      and the per-step cross-host metrics all-gather is dispatched without
      waiting for it: no host blocks at the end of a step for metrics. Off:
      every host waits for the gathered numbers and host 0 writes them before
      the next step starts.
    freeze_gc: O2. After the first (warm-up) step, collect once and
      `gc.freeze()` the survivors (model, compiled programs, ...), so later
      collections no longer traverse them; full `gc.collect()` calls on the
      step path (ours and Tunix's) are skipped. Off: no explicit collection
      per step, which is what the stock recipes do with the pinned versions
      (see `GcPolicy`): only Python's automatic collection runs.
    balance_admission: O3. Deal each global batch's prompts to hosts by
      prompt length (snake order over prompts sorted by token count), so
      that hosts get similar amounts of prompt work. Same prompts overall,
      same number per host, groups intact, deterministic. Off: contiguous (or
      micro-batch interleaved) blocks in dataset order.
    publish_in_one_call: O4. Publish all weights with one jitted all-gather
      and one engine update call. Off: one gather and one engine update call
      per parameter.
  """

  async_metrics: bool = False
  freeze_gc: bool = False
  balance_admission: bool = False
  publish_in_one_call: bool = True

  def __post_init__(self):
    for f in dataclasses.fields(self):
      if not isinstance(getattr(self, f.name), bool):
        raise TypeError(
            f"HostOptimizations.{f.name} must be a bool, got"
            f" {getattr(self, f.name)!r}."
        )

  def as_dict(self) -> dict[str, bool]:
    return dataclasses.asdict(self)


SWITCHES = tuple(f.name for f in dataclasses.fields(HostOptimizations))

# "base" is everything off (the upstream behaviour each switch replaces);
# "optimized" is everything on. The defaults of `HostOptimizations` keep
# one-call publication, which the project had before the switches existed.
PROFILES: dict[str, HostOptimizations] = {
    "base": HostOptimizations(
        async_metrics=False,
        freeze_gc=False,
        balance_admission=False,
        publish_in_one_call=False,
    ),
    "optimized": HostOptimizations(
        async_metrics=True,
        freeze_gc=True,
        balance_admission=True,
        publish_in_one_call=True,
    ),
}


def from_profile(
    profile: str | None, **overrides: bool | None
) -> HostOptimizations:
  """A profile ("base", "optimized", None = defaults) with switch overrides.

  Args:
    profile: a key of `PROFILES`, or None for `HostOptimizations()`.
    **overrides: switch name -> bool; None leaves the profile's value.

  Returns:
    The resulting switches.
  """
  if profile is None:
    base = HostOptimizations()
  elif profile in PROFILES:
    base = PROFILES[profile]
  else:
    raise ValueError(
        f"Unknown profile {profile!r}; choose one of {sorted(PROFILES)}."
    )
  unknown = sorted(set(overrides) - set(SWITCHES))
  if unknown:
    raise ValueError(f"Unknown switch(es) {unknown}; known: {SWITCHES}.")
  return dataclasses.replace(
      base, **{k: v for k, v in overrides.items() if v is not None}
  )


# --- O1: metrics export off the step path ------------------------------------


class MetricsExporter:
  """Runs metrics work now (synchronous) or on one background thread (O1).

  Jobs run in submission order. `submit` never blocks in asynchronous mode
  (the queue is unbounded: a step never waits for the writer). `close`
  drains the queue and joins the thread, so nothing submitted is lost at
  exit; the first error a job raised is re-raised by `flush`/`close` rather
  than swallowed.

  Attributes:
    asynchronous: whether jobs run on the background thread.
    submitted: number of jobs submitted.
    completed: number of jobs that finished (successfully or not).
  """

  _STOP = object()

  def __init__(self, *, asynchronous: bool, name: str = "mcjax-metrics"):
    self.asynchronous = asynchronous
    self.submitted = 0
    self.completed = 0
    self._error: BaseException | None = None
    self._closed = False
    self._queue: queue.Queue[Any] = queue.Queue()
    self._thread: threading.Thread | None = None
    if asynchronous:
      # A daemon thread cannot keep a crashed job alive; an orderly exit
      # goes through close(), which drains the queue first.
      self._thread = threading.Thread(target=self._run, name=name, daemon=True)
      self._thread.start()

  def submit(self, job: Callable[[], None]) -> None:
    if self._closed:
      raise RuntimeError("MetricsExporter is closed.")
    self.submitted += 1
    if not self.asynchronous:
      try:
        job()
      finally:
        self.completed += 1
      return
    self._queue.put(job)

  def pending(self) -> int:
    return self.submitted - self.completed

  def _run(self) -> None:
    while True:
      job = self._queue.get()
      try:
        if job is self._STOP:
          return
        job()
      except BaseException as e:  # pylint: disable=broad-exception-caught
        # Keep exporting later steps; the error surfaces at flush/close.
        logging.exception("mcjax metrics export failed")
        if self._error is None:
          self._error = e
      finally:
        if job is not self._STOP:
          self.completed += 1
        self._queue.task_done()

  def _raise_error(self) -> None:
    if self._error is not None:
      error, self._error = self._error, None
      raise RuntimeError("A metrics export job failed.") from error

  def flush(self) -> None:
    """Waits until every submitted job has run."""
    if self.asynchronous and self._thread is not None:
      self._queue.join()
    self._raise_error()

  def close(self) -> None:
    """Runs what is queued, stops the thread; idempotent."""
    if self._closed:
      return
    self._closed = True
    if self._thread is not None:
      self._queue.put(self._STOP)
      self._thread.join()
      self._thread = None
    self._raise_error()


# --- O2: garbage collection policy --------------------------------------------


class _NoFullCollect(types.ModuleType):
  """Stands in for the `gc` module inside patched modules: collect() is a no-op.

  Everything else (freeze, get_count, ...) is the real `gc`.
  """

  def __init__(self, policy: GcPolicy):
    super().__init__("gc")
    self._policy = policy

  def collect(self, generation: int = 2) -> int:
    del generation
    self._policy.skipped_collects += 1
    return 0

  def __getattr__(self, name: str) -> Any:
    return getattr(gc, name)


class GcPolicy:
  """Garbage-collection policy of a training process (O2 on or off).

  Off (`freeze=False`): `after_step` collects nothing, as the stock recipes
  with the pinned versions (google-tunix 0.1.7, MaxText's RL trainer) do per
  step; line by line, their full collections are:
  - Tunix `rl/rl_cluster.py`: `RLCluster.__init__` (once, after building
    the models) and `_load_model` (once per resharded model): start-up only;
  - Tunix `get_actor_per_token_logps` (a collect per call): GRPO, DAPO and
    Dr.GRPO never call it (only the agentic learners do);
  - Tunix `sft/utils.show_hbm_usage`: once, at `RLLearner.__init__`;
  - Tunix `generate/utils.transfer_state_with_mappings`: only the vLLM and
    SGLang-JAX samplers' weight sync, not the vanilla rollout;
  - MaxText `gc_collect_after_weight_sync` (rl.yml default true, "effective
    once the tunix pin declares it"): `train_rl.py` forwards it through
    `_kwargs_supported_by`, which drops it for Tunix 0.1.7's
    `ClusterConfig`, so no collect runs.
  On: `start` swaps the `gc` module seen by Tunix's
  modules (`compat.gc_hooks.TUNIX_GC_MODULES`) for a stand-in whose
  `collect()` only counts; `after_step` after the warm-up step collects once
  (so the warm-up's garbage is not frozen) and calls `gc.freeze()`; later
  steps collect nothing explicitly. `stop` undoes both (modules restored,
  `gc.unfreeze()`). Modules that cannot be hooked (not importable, or
  without the real `gc` as a module attribute) are listed by
  `unhooked_modules()`.
  Python's automatic generational collection stays on in both modes; after
  the freeze it no longer traverses the frozen objects.

  Attributes:
    freeze: whether O2 is on.
    warmup_steps: steps before the freeze.
    explicit_collects: full collections this policy ran.
    skipped_collects: `gc.collect()` calls by patched modules that were
      skipped.
    frozen: whether objects are frozen now (between the freeze and `stop`).
    froze_after_step: the step after which `gc.freeze()` ran, if it did.
  """

  def __init__(
      self,
      *,
      freeze: bool,
      warmup_steps: int = 1,
      modules: Iterable[str] = gc_hooks.TUNIX_GC_MODULES,
  ):
    if warmup_steps < 1:
      raise ValueError(f"warmup_steps must be >= 1, got {warmup_steps}.")
    self.freeze = freeze
    self.warmup_steps = warmup_steps
    self.explicit_collects = 0
    self.skipped_collects = 0
    self.frozen = False
    self.froze_after_step: int | None = None
    self._module_names = tuple(modules)
    self._patched: list[types.ModuleType] = []
    self._unhooked: list[str] = []
    self._proxy = _NoFullCollect(self)

  def start(self) -> None:
    """Installs the no-op collect in Tunix's modules (O2 only)."""
    if not self.freeze or self._patched:
      return
    self._patched, self._unhooked = gc_hooks.hook_gc(
        self._proxy, self._module_names
    )
    if self._unhooked:
      logging.warning(
          "O2 (freeze_gc) could not hook gc.collect() in %s; their"
          " collections still run.", self._unhooked,
      )

  def after_step(self, step: int) -> float:
    """End-of-step collection work; returns its duration in seconds.

    Args:
      step: the 1-based number of the step that just ended.
    """
    t0 = time.perf_counter()
    if self.freeze and not self.frozen and step >= self.warmup_steps:
      gc.collect()
      self.explicit_collects += 1
      gc.freeze()
      self.frozen = True
      self.froze_after_step = step
    return time.perf_counter() - t0

  def stop(self) -> None:
    """Restores the patched modules and unfreezes; idempotent.

    `gc.unfreeze()` also releases objects frozen by others before (Python
    has no partial unfreeze); they merely become collectable again. Without
    it, garbage frozen with a finished job could never be freed.
    """
    gc_hooks.unhook_gc(self._proxy, self._patched)
    self._patched = []
    if self.frozen:
      gc.unfreeze()
      self.frozen = False

  def patched_modules(self) -> list[str]:
    """Modules whose `gc.collect()` is a no-op now (O2 started)."""
    return [m.__name__ for m in self._patched]

  def unhooked_modules(self) -> list[str]:
    """Modules `start` was asked to hook but could not."""
    return list(self._unhooked)


def full_collections() -> int:
  """Full (generation-2) collections this process has run so far."""
  return int(gc.get_stats()[2]["collections"])
