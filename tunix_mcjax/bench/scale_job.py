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

r"""Host entry point of `bench --mode=scale`: one GRPO job, memory probed.

  python -m tunix_mcjax.launch --num_hosts 2 --devices_per_host 1 -- \
      python -m tunix_mcjax.bench.scale_job --spec=SPEC.json --out=DIR

SPEC.json (written by `bench.scale`): {"job": GrpoJobConfig fields,
"model": tiny_qwen3_config overrides (the Qwen3-0.6B shape), "floor_repeats":
N}. The job is `recipes.grpo_job.run`, unchanged, with the tiny model's
config replaced by the spec's shape (random init, no download). Probes:

- a thread sampling this process's resident memory (VmRSS) every 20 ms,
  keeping the largest value seen in each step phase (the phase running
  then, `StepClock.current`), and VmHWM (the kernel's peak) at the end;
- at the end of each phase, the live JAX buffers (`jax.live_arrays()`):
  their total and the largest ones, named by the tree they belong to
  (actor parameters, optimizer state, reference, engine weights);
- after the job (and before freeing anything it used, VmHWM is read
  first): XLA's memory plan of the job's publication program, then
  publication of a tree of the actor's shapes vs the floor of one raw
  all-gather of the same bytes plus one copy (`micro.publication_bench`).

Writes DIR/host<i>.json on every host.
"""

from __future__ import annotations

from collections.abc import Sequence
import contextlib
import functools
import gc
import json
import pathlib
import threading
import time
from typing import Any

from absl import app
from absl import flags

_SPEC = flags.DEFINE_string("spec", None, "Scale job spec (JSON file).")
_OUT = flags.DEFINE_string("out", None, "Output folder.")
_TOP = 12  # Largest buffers listed per snapshot.


def proc_status_bytes(key: str) -> int:
  """A `/proc/self/status` memory field (VmRSS, VmHWM) in bytes."""
  for line in pathlib.Path("/proc/self/status").read_text().splitlines():
    if line.startswith(key + ":"):
      return int(line.split()[1]) * 1024
  raise KeyError(key)


def _buffer_key(a: Any) -> int | None:
  """The address of an array's first local buffer: names it whichever
  Python object holds it (trees and `live_arrays` may hold different ones)."""
  try:
    return a.addressable_shards[0].data.unsafe_buffer_pointer()
  except Exception:  # pylint: disable=broad-exception-caught
    return None


def _tree(name: str) -> str:
  return name.split("[", 1)[0].split(".", 1)[0]


def _local_bytes(a: Any) -> int:
  try:
    return sum(s.data.nbytes for s in a.addressable_shards)
  except Exception:  # pylint: disable=broad-exception-caught
    return 0  # Deleted while we looked.


class MemoryProbe:
  """Samples resident memory by phase; snapshots live buffers at phase ends."""

  def __init__(self, period_s: float = 0.02):
    self.period_s = period_s
    self.out: pathlib.Path | None = None
    self.clock = None
    self.cluster = None
    self.named: dict[int, str] = {}
    self.step = 0
    self.phase_rss: dict[str, int] = {}
    self.snapshots: list[dict[str, Any]] = []
    self.baseline_rss = proc_status_bytes("VmRSS")
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._run, daemon=True)

  def start(self) -> None:
    self._thread.start()

  def stop(self) -> None:
    self._stop.set()
    self._thread.join()

  def _phase_name(self) -> str:
    current = getattr(self.clock, "current", None)
    # By step: the first step's peaks include compilation, later ones not.
    return (f"step {self.step}: " + ("outside phases" if current is None
                                     else current[0]))

  def _run(self) -> None:
    while not self._stop.wait(self.period_s):
      rss = proc_status_bytes("VmRSS")
      name = self._phase_name()
      if rss > self.phase_rss.get(name, 0):
        self.phase_rss[name] = rss

  def name_trees(self, trees: dict[str, Any]) -> None:
    """Maps each buffer of `trees` (label -> pytree) to label/path."""
    import jax  # pylint: disable=g-import-not-at-top

    self.named = {}
    for label, tree in trees.items():
      if tree is None:
        continue
      for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if isinstance(leaf, jax.Array):
          key = _buffer_key(leaf)
          if key is not None:
            self.named[key] = label + jax.tree_util.keystr(path)

  def snapshot(self, label: str) -> dict[str, Any]:
    """Live buffers now: total bytes and the largest ones, named."""
    import jax  # pylint: disable=g-import-not-at-top

    self._refresh_names()
    arrays, seen = [], set()
    for a in jax.live_arrays():
      # Two Python arrays may share one buffer: count it once.
      key = _buffer_key(a)
      if key is None or key not in seen:
        seen.add(key)
        arrays.append(a)
    # This host's bytes: its shards, a replica on each local device counted
    # once per device (each is its own buffer); `nbytes` is the global size.
    sizes = sorted(((_local_bytes(a), a) for a in arrays),
                   key=lambda t: -t[0])
    by_tree: dict[str, int] = {}
    for n, a in sizes:
      tree = _tree(self.named.get(_buffer_key(a), "other"))
      by_tree[tree] = by_tree.get(tree, 0) + n
    snap = {
        "label": label, "step": self.step,
        "rss_bytes": proc_status_bytes("VmRSS"),
        "live_bytes": int(sum(n for n, _ in sizes)),
        "live_count": len(sizes),
        "by_tree": by_tree,
        "largest": [{"name": self.named.get(_buffer_key(a), "other"),
                     "shape": list(a.shape), "dtype": str(a.dtype),
                     "bytes": int(n)} for n, a in sizes[:_TOP]],
    }
    self.snapshots.append(snap)
    if self.out is not None:
      # As they come: a host killed for memory still leaves its trail.
      with open(self.out / f"host{jax.process_index()}.snapshots.jsonl",
                "a") as f:
        f.write(json.dumps({**snap, "phase_peak_rss_bytes":
                            dict(self.phase_rss)}) + "\n")
    return snap

  def _refresh_names(self) -> None:
    c = self.cluster
    if c is None:
      return
    from flax import nnx  # pylint: disable=g-import-not-at-top

    trees = {}
    # Tunix's RLCluster snapshots the actor's whole state once, in
    # "pinned_host" memory (host RAM on an accelerator; on CPU the same
    # memory as the devices'). Named first: a tree below sharing a buffer
    # with it names that buffer.
    anchor = getattr(c, "_anchor_policy_state", None)
    if anchor is not None:
      trees["anchor"] = anchor
    trainer = getattr(c, "actor_trainer", None)
    if trainer is not None:
      trees["actor"] = nnx.state(trainer.model, nnx.Param)
      trees["optimizer"] = nnx.state(trainer.optimizer, nnx.optimizer.OptState)
    ref = getattr(self, "reference", None)
    try:
      ref = c.inference_worker.get_model("reference")
    except Exception:  # pylint: disable=broad-exception-caught
      pass
    if ref is not None:
      trees["reference"] = nnx.state(ref, nnx.Param)
    try:
      engine = c.rollout.model()
      trees["engine"] = nnx.state(engine, nnx.Param)
    except Exception:  # pylint: disable=broad-exception-caught
      pass
    self.name_trees(trees)


def _install(probe: MemoryProbe, model_overrides: dict[str, Any]) -> None:
  """Points the job's tiny model at the spec's shape; hooks the probe in."""
  import tunix_mcjax  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.recipes import models  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.telemetry import clock  # pylint: disable=g-import-not-at-top

  original_config = models.tiny_qwen3_config

  def config(**overrides):
    return original_config(**{**model_overrides, **overrides})

  models.tiny_qwen3_config = config

  original_phase = clock.StepClock.phase

  @contextlib.contextmanager
  def phase(self, name, cross_host=None):
    probe.clock = self
    if name == "generate":
      probe.step += 1  # One generate phase per step (one mini-batch).
    with original_phase(self, name, cross_host):
      yield
    probe.snapshot(f"after {name}")

  clock.StepClock.phase = phase

  create = tunix_mcjax.create_rl_cluster

  @functools.wraps(create)
  def create_and_keep(backend, **kwargs):
    cluster = create(backend, **kwargs)
    probe.cluster = cluster
    probe.reference = kwargs.get("reference")
    probe.snapshot("models built")
    return cluster

  tunix_mcjax.create_rl_cluster = create_and_keep


def main(argv: Sequence[str]) -> None:
  del argv
  spec = json.loads(pathlib.Path(_SPEC.value).read_text())
  out = pathlib.Path(_OUT.value)
  out.mkdir(parents=True, exist_ok=True)
  probe = MemoryProbe()
  probe.out = out
  probe.start()
  _install(probe, spec.get("model", {}))

  from tunix_mcjax.recipes import grpo_job  # pylint: disable=g-import-not-at-top

  job = dict(spec["job"])
  job["trace_steps"] = tuple(job.get("trace_steps", ()))
  cfg = grpo_job.GrpoJobConfig(**job)
  t0 = time.perf_counter()
  summary = grpo_job.run(cfg)
  job_s = time.perf_counter() - t0
  probe.stop()
  hwm = proc_status_bytes("VmHWM")
  import jax  # pylint: disable=g-import-not-at-top

  from tunix_mcjax.bench import micro  # pylint: disable=g-import-not-at-top

  shapes, plan = {}, None
  if probe.cluster is not None:
    from flax import nnx  # pylint: disable=g-import-not-at-top

    params = nnx.state(probe.cluster.actor_trainer.model, nnx.Param)
    shapes = {jax.tree_util.keystr(p): tuple(x.shape) for p, x in
              jax.tree_util.tree_flatten_with_path(params)[0]}
    publisher = getattr(probe.cluster, "publisher", None)
    if publisher is not None:
      # XLA's plan of the job's own publication program (compiled, not
      # run): what it holds beside the engine's weights.
      mem = publisher.memory_analysis(params)
      plan = {"temp_bytes": mem.temp_size_in_bytes,
              "output_bytes": mem.output_size_in_bytes,
              "alias_bytes": mem.alias_size_in_bytes}
    del params
  # Free the job's buffers before the floor allocates the tree again.
  probe.cluster = probe.reference = None
  probe.named = {}
  gc.collect()
  floor = micro.publication_bench(
      layers=None, repeats=int(spec.get("floor_repeats", 2)), shapes=shapes)
  result = {
      "host": jax.process_index(), "num_hosts": jax.process_count(),
      "local_devices": jax.local_device_count(),
      "logps_chunk_size": cfg.logps_chunk_size,
      "job_s": job_s,
      "baseline_rss_bytes": probe.baseline_rss,
      "peak_rss_bytes": hwm,
      "phase_peak_rss_bytes": probe.phase_rss,
      "snapshots": probe.snapshots,
      "records": summary["records"],
      "publication": floor,
      "publication_plan": plan,
  }
  path = out / f"host{jax.process_index()}.json"
  path.write_text(json.dumps(result, indent=1, default=str))
  print(f"[scale] host {jax.process_index()}: peak RSS"
        f" {hwm / 2**30:.2f} GiB, job {job_s:.0f} s; wrote {path}", flush=True)


if __name__ == "__main__":
  flags.mark_flags_as_required(["spec", "out"])
  app.run(main)
