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

"""A reward module for the CLI tests, loaded by path through Tunix's config.

Tunix's `reward_functions` takes every public function of this file as a
reward. The one below scores the characters a random tiny model emits (so
that rewards, and hence advantages, vary within a group) and records every
scored row, per host, under $CLI_TEST_RECORD_DIR.
"""

import json
import os


def char_mix_reward(prompts, completions, **kwargs):
  del kwargs
  rewards = [
      sum(c in "aeiouAEIOU" for c in text) + 0.1 * len(set(text))
      for text in completions
  ]
  _record(prompts, completions, rewards)
  return rewards


def _record(prompts, completions, rewards):
  directory = os.environ.get("CLI_TEST_RECORD_DIR")
  if not directory:
    return
  host = os.environ.get("TUNIX_MCJAX_HOST_ID", "0")
  with open(os.path.join(directory, f"rows_host{host}.jsonl"), "a") as f:
    f.write(json.dumps({
        "prompts": list(prompts),
        "completions": list(completions),
        "rewards": [float(r) for r in rewards],
    }) + "\n")
