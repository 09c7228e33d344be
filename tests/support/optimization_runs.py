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

"""The host program of tests/test_optimizations_e2e.py (run by path on 2
hosts x 2 devices): `optimization_runs.py OUT COMMON_JSON`.

Runs the GRPO job three times in a row with the GrpoJobConfig fields
COMMON_JSON gives, each into OUT/<name>/: "base" (every optimization off),
"o124" (the optimized profile without length balancing, a profiler trace of
step 2 into OUT/trace) and "o3" (only prompts balanced by length).
"""

import json
import sys

from absl import logging

from tunix_mcjax import runtime


def main(argv: list[str]) -> None:
  runtime.initialize()
  from tunix_mcjax.recipes import grpo_job  # pylint: disable=g-import-not-at-top

  logging.set_verbosity(logging.WARNING)
  out = argv[1]
  common = json.loads(argv[2])
  runs = {
      "base": dict(profile="base"),
      "o124": dict(profile="optimized", balance_admission=False,
                   trace_steps=(2,), trace_dir=out + "/trace"),
      "o3": dict(profile="base", balance_admission=True),
  }
  for name, kw in runs.items():
    grpo_job.run(grpo_job.GrpoJobConfig(
        backend="mcjax", dump_dir=f"{out}/{name}",
        metrics_out=f"{out}/{name}/metrics.jsonl", **common, **kw))


if __name__ == "__main__":
  main(sys.argv)
