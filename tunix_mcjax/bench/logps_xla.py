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

r"""XLA's planned memory of the log-prob gradient, unchunked vs chunked.

  python -m tunix_mcjax.bench.logps_xla --rows=8 --prompt=64 --completion=448

Compiles (never runs) the gradient of sum(log-probs) + sum(entropy), as
Tunix's GRPO loss computes them, for a Qwen3-0.6B-shaped bf16 model on one
device, with Tunix's `compute_per_token_logps` and with the chunked one
(`compat.chunked_logps`), and prints XLA's temporary bytes
(`memory_analysis`) for each: the train step's logits peak at sizes the
CPU machine cannot run, without allocating it. Parameters and inputs are
abstract (no weights are made).
"""

from collections.abc import Sequence
import json

from absl import app
from absl import flags

_ROWS = flags.DEFINE_integer("rows", 8, "Rows (one device's batch).")
_PROMPT = flags.DEFINE_integer("prompt", 64, "Prompt width.")
_COMPLETION = flags.DEFINE_integer("completion", 448, "Completion width.")
_CHUNKS = flags.DEFINE_list("chunks", ["0", "64"],
                            "Chunk sizes to compile; 0 = Tunix's own.")


def temp_bytes(model_overrides: dict, *, rows: int, prompt: int,
               completion: int, chunk: int | None) -> dict:
  """XLA's memory analysis of the log-prob gradient (compiled only)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from tunix.models.qwen3 import model as qwen3_lib  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.compat import chunked_logps  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.recipes import models  # pylint: disable=g-import-not-at-top

  cfg = models.tiny_qwen3_config(**model_overrides, dtype=jnp.bfloat16,
                                 param_dtype=jnp.bfloat16)
  abstract = nnx.eval_shape(lambda: qwen3_lib.Qwen3(cfg, rngs=nnx.Rngs(0)))
  graphdef, state = nnx.split(abstract)
  fn = (chunked_logps.tunix_compute_per_token_logps if chunk is None
        else chunked_logps.make_compute_per_token_logps(chunk))

  def loss(state, p, c):
    logps, ent = fn(graphdef, state, p, c, pad_id=0, eos_id=2,
                    stop_gradient=False, return_logits=True)
    return jnp.sum(logps) + jnp.sum(
        chunked_logps.compute_entropy_from_logits(ent))

  tokens = lambda n: jax.ShapeDtypeStruct((rows, n), jnp.int32)
  compiled = jax.jit(jax.grad(loss)).lower(
      state, tokens(prompt), tokens(completion)).compile()
  m = compiled.memory_analysis()
  return {"chunk": chunk, "rows": rows, "prompt": prompt,
          "completion": completion,
          "temp_bytes": int(m.temp_size_in_bytes),
          "argument_bytes": int(m.argument_size_in_bytes),
          "output_bytes": int(m.output_size_in_bytes),
          "logits_bytes": 4 * rows * completion
                          * model_overrides["vocab_size"]}


def main(argv: Sequence[str]) -> None:
  del argv
  from tunix_mcjax.bench import scale  # pylint: disable=g-import-not-at-top

  for c in _CHUNKS.value:
    r = temp_bytes(scale.QWEN3_0P6B_MODEL, rows=_ROWS.value,
                   prompt=_PROMPT.value, completion=_COMPLETION.value,
                   chunk=int(c) or None)
    print(json.dumps(r), flush=True)


if __name__ == "__main__":
  app.run(main)
