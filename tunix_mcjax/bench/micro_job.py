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

r"""Host entry point of the micro-benchmarks (see `micro`).

  python -m tunix_mcjax.launch --num_hosts 2 --devices_per_host 2 -- \
      python -m tunix_mcjax.bench.micro_job --part=hosts --out=DIR
  python -m tunix_mcjax.launch --num_hosts 1 --devices_per_host 4 -- \
      python -m tunix_mcjax.bench.micro_job --part=single --out=DIR

Writes DIR/<part>_host<i>.json on every host.
"""

from collections.abc import Sequence
import json
import pathlib
from typing import Any

from absl import app
from absl import flags

from tunix_mcjax.bench import micro

_PART = flags.DEFINE_enum("part", "hosts", ["hosts", "single"],
                          "Which micro-benchmarks this job runs.")
_OUT = flags.DEFINE_string("out", "runs/bench/micro", "Output folder.")
_LAYERS = flags.DEFINE_integer(
    "layers", 28, "Layers of the Qwen3-0.6B-shaped tree (28 = the model).")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed repeats (median).")
_ROWS = flags.DEFINE_integer("rows", 32, "Decode rows in all (all hosts).")
_MAX_TOKENS = flags.DEFINE_integer("max_tokens", 32, "Decode budget.")


def main(argv: Sequence[str]) -> None:
  del argv
  from tunix_mcjax import runtime  # pylint: disable=g-import-not-at-top

  info = runtime.initialize()
  out = pathlib.Path(_OUT.value)
  out.mkdir(parents=True, exist_ok=True)
  result: dict[str, Any] = {"part": _PART.value, "host": info.process_index,
                            "num_hosts": info.process_count}
  if _PART.value == "hosts":
    result["publication"] = micro.publication_bench(
        layers=_LAYERS.value, repeats=_REPEATS.value)
  result["decode"] = micro.decode_bench(
      rows=_ROWS.value, max_tokens=_MAX_TOKENS.value, repeats=_REPEATS.value)
  path = out / f"{_PART.value}_host{info.process_index}.json"
  path.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
  app.run(main)
