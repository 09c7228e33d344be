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

"""The example's job (one tiny step) whose reward hangs on host 1.

Run as each host of a launched job: `reward_fault_job.py WORKERS TIMEOUT_S`
(`--reward_workers`, `--reward_timeout_s`). The toy task's reward is
replaced by `hangs_on_host_1`, which sleeps far past the limit on host 1;
an input error is reported as the example reports it (one line, exit 2).
"""

import os
import sys
import time

from tunix_mcjax.recipes import tasks

_TOY_REWARD = tasks.toy_match_reward


def hangs_on_host_1(prompts, completions, **kwargs):
  """The toy reward, except that it hangs on host 1."""
  if os.environ.get("TUNIX_MCJAX_HOST_ID") == "1":
    time.sleep(600)
  return _TOY_REWARD(prompts, completions, **kwargs)


def main(argv: list[str]) -> None:
  from tunix_mcjax import launch  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.recipes import grpo_job  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.recipes import job_config  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.recipes import validation  # pylint: disable=g-import-not-at-top

  tasks.toy_match_reward = hangs_on_host_1
  cfg = job_config.GrpoJobConfig(
      backend="mcjax", steps=1, batch_size=2, num_generations=2,
      max_new_tokens=4, reward_workers=int(argv[1]),
      reward_timeout_s=float(argv[2]))
  try:
    grpo_job.run(cfg)
  except validation.InputError as e:  # As examples/grpo_qwen3.py does.
    print(f"reward_fault_job.py: error: {e}", file=sys.stderr, flush=True)
    launch.exit_host(2)


if __name__ == "__main__":
  main(sys.argv)
