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

r"""One process of the device benchmark (scripts/bench_device.py).

  python -m tunix_mcjax.bench.device_job --shape=qwen3-0.6b \
      --job='{"backend": "mcjax", "profile": "optimized", ...}'
  python -m tunix_mcjax.bench.device_job --shape=qwen3-0.6b --micro=DIR

Runs on this machine's default JAX devices (a GPU where there is one), as
one process: no launcher, no simulated hosts. `--job` runs the GRPO job
(`grpo_job.run`) with the given `GrpoJobConfig` fields; `--micro` runs the
publication (whole tree vs the all-gather + copy floor) and decode
micro-benchmarks and writes DIR/hosts_host0.json.

`--shape=qwen3-0.6b` gives the job's tiny model Qwen3-0.6B's shape (28
layers, embed 1024, MLP 3072, 16 x 128 query heads, 8 KV heads, vocabulary
151,936, tied embeddings, bfloat16), randomly initialised: no download. The
toy tokenizer only emits a few ids; the model still computes over the whole
vocabulary. `--shape=tiny` keeps the tiny model (the CPU smoke run).
"""

from collections.abc import Sequence
import dataclasses
import functools
import json
import pathlib

from absl import app
from absl import flags

_JOB = flags.DEFINE_string("job", None, "GrpoJobConfig fields as JSON.")
_MICRO = flags.DEFINE_string("micro", None, "Run the micro-benchmarks into"
                             " this folder instead of a job.")
_SHAPE = flags.DEFINE_enum("shape", "tiny", ["tiny", "qwen3-0.6b"],
                           "Model shape (random weights).")
_LAYERS = flags.DEFINE_integer("layers", None, "Micro: tree layers (default:"
                               " the shape's).")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Micro: timed repeats.")
_ROWS = flags.DEFINE_integer("rows", 16, "Micro: decode rows.")
_MAX_TOKENS = flags.DEFINE_integer("max_tokens", 32, "Micro: decode budget.")


def qwen3_0p6b_overrides() -> dict:
  """`tiny_qwen3_config` fields that give Qwen3-0.6B's shape."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.bench import micro  # pylint: disable=g-import-not-at-top

  c = micro.QWEN3_0P6B
  return dict(num_layers=c["layers"], vocab_size=c["vocab"],
              embed_dim=c["embed"], hidden_dim=c["mlp"],
              num_heads=c["heads"], head_dim=c["head_dim"],
              num_kv_heads=c["kv_heads"], rope_theta=1_000_000,
              use_tied_embedding=True, dtype=jnp.bfloat16,
              param_dtype=jnp.bfloat16)


def _use_shape(shape: str) -> None:
  """Makes the job's tiny model this shape (this process only)."""
  if shape == "tiny":
    return
  from tunix_mcjax.recipes import models  # pylint: disable=g-import-not-at-top

  tiny = models.tiny_qwen3_config
  models.tiny_qwen3_config = functools.partial(tiny, **qwen3_0p6b_overrides())


def main(argv: Sequence[str]) -> None:
  del argv
  from tunix_mcjax import runtime  # pylint: disable=g-import-not-at-top

  runtime.initialize()
  _use_shape(_SHAPE.value)
  if _MICRO.value:
    from tunix_mcjax.bench import micro  # pylint: disable=g-import-not-at-top

    out = pathlib.Path(_MICRO.value)
    out.mkdir(parents=True, exist_ok=True)
    layers = _LAYERS.value
    if layers is None and _SHAPE.value == "tiny":
      layers = 1
    result = {
        "part": "hosts", "host": 0, "num_hosts": 1,
        "publication": micro.publication_bench(
            layers=layers, repeats=_REPEATS.value,
            # The tiny shape publishes a tiny tree (CPU smoke runs).
            shapes=({"w": (256, 64), "b": (64,)} if _SHAPE.value == "tiny"
                    else None)),
        "decode": micro.decode_bench(rows=_ROWS.value,
                                     max_tokens=_MAX_TOKENS.value,
                                     repeats=_REPEATS.value),
    }
    (out / "hosts_host0.json").write_text(json.dumps(result, indent=1))
    return
  from tunix_mcjax.recipes import grpo_job  # pylint: disable=g-import-not-at-top

  fields = json.loads(_JOB.value or "{}")
  if "trace_steps" in fields:
    fields["trace_steps"] = tuple(fields["trace_steps"])
  known = {f.name for f in dataclasses.fields(grpo_job.GrpoJobConfig)}
  unknown = sorted(set(fields) - known)
  if unknown:
    raise app.UsageError(f"--job has unknown GrpoJobConfig fields {unknown}.")
  summary = grpo_job.run(grpo_job.GrpoJobConfig(**fields))
  print(f"[device_job] {fields.get('backend')}: {summary['steps']} steps in"
        f" {summary['wall_s']:.1f} s", flush=True)


if __name__ == "__main__":
  app.run(main)
