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

"""Micro-benchmarks with a floor (run as hosts by `micro_job`).

--part=hosts (every host of a multi-host job):
- publication of a Qwen3-0.6B-shaped parameter tree (bf16, FSDP over all
  devices) into a replicated host-local layout: in one call (O4) and
  parameter by parameter, against the floor of one raw all-gather of the
  same bytes as a single buffer plus one device copy of them;
- decode iterations of a host-local engine (this host's rows on this host's
  devices).
--part=single: decode iterations of one engine over all devices (the
single-controller arrangement), on the same total rows.
Admission time vs number of hosts needs no devices: `admission_vs_hosts`.

`micro_job` writes each host's results as JSON; `harness` combines them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
import statistics
import time
from typing import Any

import numpy as np

# Qwen3-0.6B (Hugging Face config): tied embeddings, GQA.
QWEN3_0P6B = dict(vocab=151_936, embed=1_024, mlp=3_072, layers=28,
                  heads=16, kv_heads=8, head_dim=128)


def qwen3_shapes(layers: int | None = None) -> dict[str, tuple[int, ...]]:
  """Parameter shapes of Qwen3-0.6B in Tunix's layout (name -> shape).

  Args:
    layers: keep only this many of the 28 layers (same per-layer shapes).

  Returns:
    Flat name -> shape, 11 parameters per layer plus embedding and norm.
  """
  c = QWEN3_0P6B
  d, n, k, h, f = c["embed"], c["heads"], c["kv_heads"], c["head_dim"], c[
      "mlp"]
  shapes = {"embedder/input_embedding": (c["vocab"], d), "final_norm/w": (d,)}
  for i in range(c["layers"] if layers is None else layers):
    p = f"layers/{i}"
    shapes |= {
        f"{p}/attn/q_proj/w": (d, n, h),
        f"{p}/attn/k_proj/w": (d, k, h),
        f"{p}/attn/v_proj/w": (d, k, h),
        f"{p}/attn/o_proj/w": (n, h, d),
        f"{p}/attn/q_norm/w": (h,),
        f"{p}/attn/k_norm/w": (h,),
        f"{p}/input_layernorm/w": (d,),
        f"{p}/post_attention_layernorm/w": (d,),
        f"{p}/mlp/gate_proj/kernel": (d, f),
        f"{p}/mlp/up_proj/kernel": (d, f),
        f"{p}/mlp/down_proj/kernel": (f, d),
    }
  return shapes


def _median_time(fn: Callable[[], Any], repeats: int) -> tuple[float, list]:
  fn()  # Warm-up: compilation and first-touch allocation.
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return statistics.median(times), times


def publication_bench(
    *, layers: int | None, repeats: int,
    shapes: dict[str, tuple[int, ...]] | None = None,
) -> dict[str, Any]:
  """Publication one-call / per-parameter vs the all-gather + copy floor.

  Args:
    layers: layers of the Qwen3-0.6B-shaped tree (None: all 28).
    repeats: timed repeats (median).
    shapes: name -> shape of another tree instead (smoke runs).
  """
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from jax.sharding import NamedSharding, PartitionSpec  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import publication, runtime  # pylint: disable=g-import-not-at-top

  gm, lm = runtime.global_mesh(), runtime.local_mesh()
  fsdp = gm.shape["fsdp"]
  shapes = qwen3_shapes(layers) if shapes is None else shapes
  dtype = jnp.bfloat16

  def trainer_sharding(shape):
    spec = PartitionSpec("fsdp") if shape[0] % fsdp == 0 else PartitionSpec()
    return NamedSharding(gm, spec)

  src = {}
  for i, (name, shape) in enumerate(sorted(shapes.items())):
    # Every process computes exactly its shards (no host transfer).
    src[name] = jax.jit(
        lambda s=shape, i=i: jnp.full(s, 0.001 * (i % 97), dtype),
        out_shardings=trainer_sharding(shape),
    )()
  replicated = NamedSharding(lm, PartitionSpec())
  dst = {n: jax.ShapeDtypeStruct(s, dtype, sharding=replicated)
         for n, s in shapes.items()}
  pub = publication.Publisher(dst=dst, local_mesh=lm)

  one_s, one_all = _median_time(lambda: pub(src), repeats)
  num_bytes = pub.last_stats.bytes
  sink = []

  def per_parameter():
    sink.clear()  # The engine would drop the previous weights.
    pub.publish_each(src, lambda i, x: sink.append(x))

  each_s, each_all = _median_time(per_parameter, repeats)
  calls = pub.last_stats.num_params
  # Free the tree before the floor allocates the same bytes again.
  sink.clear()
  del src

  # Floor: the same bytes as one flat buffer, FSDP-sharded like the trainer,
  # all-gathered into the same replicated host-local layout, then copied once.
  total = sum(int(np.prod(s)) for s in shapes.values())
  total += -total % gm.size
  flat = jax.jit(lambda: jnp.zeros((total,), dtype),
                 out_shardings=NamedSharding(gm, PartitionSpec("fsdp")))()
  view = publication.host_view_mesh(lm)
  whole = NamedSharding(view, PartitionSpec())
  # As publication gathers (raw bits on CPU, where XLA would widen a
  # bfloat16 all-gather to float32).
  gather = jax.jit(lambda x: publication.gather_bits(x, whole),
                   out_shardings=whole)

  def to_local():
    g = gather(flat)
    local = jax.make_array_from_single_device_arrays(
        g.shape, replicated, [s.data for s in g.addressable_shards])
    return jax.block_until_ready(local)

  gather_s, _ = _median_time(to_local, repeats)
  local = to_local()
  del flat
  copy = jax.jit(jnp.copy, out_shardings=replicated)
  copy_s, _ = _median_time(lambda: jax.block_until_ready(copy(local)),
                           repeats)
  floor = gather_s + copy_s
  return {
      "num_params": len(shapes),
      "bytes": int(num_bytes),
      "layers": layers if layers is not None else QWEN3_0P6B["layers"],
      "repeats": repeats,
      "one_call_s": one_s,
      "per_parameter_s": each_s,
      "per_parameter_calls": calls,
      "floor_allgather_s": gather_s,
      "floor_copy_s": copy_s,
      "floor_s": floor,
      "one_call_over_floor": one_s / floor,
      "per_parameter_over_floor": each_s / floor,
      "one_call_times": one_all,
      "per_parameter_times": each_all,
  }


def decode_bench(
    *, rows: int, max_tokens: int, repeats: int
) -> dict[str, Any]:
  """Generate time / decode iterations of a NativeEngine on local devices.

  The engine decodes in one jitted loop, so the time per decode iteration
  is the whole generate call (tokenization and prefill included) divided by
  its iterations (the longest completion).
  """
  import jax  # pylint: disable=g-import-not-at-top
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from tunix.rl.rollout import base_rollout  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import publication, runtime  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.recipes import models  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.engines import base as engine_base  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.engines import native  # pylint: disable=g-import-not-at-top

  gm, lm = runtime.global_mesh(), runtime.local_mesh()
  hosts, host = jax.process_count(), jax.process_index()
  if rows % hosts:
    raise ValueError(f"rows={rows} must divide over {hosts} hosts.")
  local_rows = rows // hosts
  actor = models.create_tiny_model(models.tiny_qwen3_config(), seed=0,
                                   mesh=gm)
  graphdef, state = nnx.split(actor)
  init = publication.Publisher(
      dst=publication.replicated_like(state, lm), local_mesh=lm)
  cfg = base_rollout.RolloutConfig(
      max_tokens_to_generate=max_tokens, max_prompt_length=4,
      temperature=1.0, top_p=1.0)

  class _Ids:
    """The same row identities every call: identical work per repeat."""

    def take(self, n):
      start = host * local_rows
      return np.stack([np.arange(start, start + n), np.zeros(n, int)], 1)

  engine = native.NativeEngine(
      tokenizer=models.ToyTokenizer(), rollout_config=cfg,
      context=engine_base.EngineContext(
          engine_mesh=lm, initial_model=nnx.merge(graphdef, init(state)),
          row_ids=_Ids(), seed=0))
  prompts = [f"{'abcdefgh'[i % 8]}:" for i in range(local_rows)]
  out = {}

  def gen():
    out["result"] = engine.generate(prompts, cfg)

  gen_s, times = _median_time(gen, repeats)
  iters = max(len(t) for t in out["result"].tokens)
  return {
      "hosts": hosts,
      "devices": len(lm.devices.flat),
      "rows": local_rows,
      "iterations": iters,
      "generate_s": gen_s,
      "decode_iter_s": gen_s / max(iters, 1),
      "times": times,
  }


def admission_vs_hosts(
    prompts: Sequence[str],
    *,
    hosts: Sequence[int],
    num_generations: int,
    repeats: int = 5,
) -> list[dict[str, Any]]:
  """Per-host admission time (tokenization included) vs number of hosts.

  Each host admits its share of the same global batch (in parallel on a real
  cluster, so one host's time is the step's admission time); a single
  controller admits all of it. Both the dataset-order deal and the balanced
  deal (O3, which measures every prompt on every host) are timed.
  """
  from tunix_mcjax import admission  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.recipes import models  # pylint: disable=g-import-not-at-top

  tok = models.ToyTokenizer(models.PRINTABLE_ALPHABET)
  length_fn = lambda ps: [len(tok.encode(p)) for p in ps]
  batch = {"prompts": list(prompts)}
  out = []
  for h in hosts:
    if len(prompts) % h:
      continue
    row = {"hosts": h, "prompts": len(prompts)}
    for name, balanced in (("base_s", False), ("balanced_s", True)):
      adm = admission.Admission(
          admission.AdmissionConfig(num_hosts=h, host_index=0,
                                    num_generations=num_generations,
                                    balance_by_length=balanced),
          length_fn=length_fn)
      ds = adm.shard([batch])
      times = []
      for _ in range(repeats):
        before = ds.admission_seconds
        list(ds)
        times.append(ds.admission_seconds - before)
        adm.row_ids.take(adm.row_ids.pending())
      row[name] = statistics.median(times)
    out.append(row)
  return out


# Completions that stress a number-extracting regex: long digit runs with
# separators (greedy quantifiers), many near-matches, many markers, an
# unclosed \boxed{ and no number at all.
_EXTRACTION_SHAPES = {
    "digits_commas": "1,2" + "3," * 50,
    "dotted": "1.2.3." * 20,
    "minus_no_digit": "- -- -" * 20,
    "markers": "#### x " * 20,
    "unclosed_boxed": "\\boxed{ {1 " * 10,
    "prose": "The answer is 12 apples and 3.5 pears. " * 3,
}


def gsm8k_extraction_scaling(
    sizes: Sequence[int] = (10_000, 100_000), repeats: int = 5
) -> dict[str, Any]:
  """Seconds of `tasks.extract_final_number` per completion size and shape.

  Linear extraction takes ~10x longer for a 10x longer completion; a
  quadratic one ~100x. Each time is the fastest of `repeats` (the least
  disturbed by other work on the machine).
  """
  from tunix_mcjax.recipes import tasks  # pylint: disable=g-import-not-at-top

  out: dict[str, Any] = {"sizes": list(sizes), "shapes": {}}
  for name, unit in _EXTRACTION_SHAPES.items():
    row = {}
    for n in sizes:
      text = (unit * (n // len(unit) + 1))[:n]
      best = float("inf")
      for _ in range(repeats):
        t0 = time.perf_counter()
        tasks.extract_final_number(text)
        best = min(best, time.perf_counter() - t0)
      row[str(n)] = best
    out["shapes"][name] = row
  lo, hi = str(min(sizes)), str(max(sizes))
  out["largest_s"] = max(r[hi] for r in out["shapes"].values())
  out["worst_growth"] = max(r[hi] / max(r[lo], 1e-9)
                            for r in out["shapes"].values())
  return out
