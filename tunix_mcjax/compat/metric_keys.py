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

"""Metric names that Tunix's learners log and tunix_mcjax reads.

Tunix has no public constants for them; they are string literals in
`tunix/rl/grpo/grpo_learner.py`. `compat.touch_points.TOUCH_POINTS` lists each
with the module that must contain it, so a rename upstream fails
tests/test_compat.py instead of silently emptying our records.
"""

# Mean sequence reward of the rows a learner scored (GRPOLearner).
REWARD_MEAN = "rewards/score/mean"
# Mean completion length in tokens (GRPOLearner).
COMPLETION_LEN_MEAN = "completions/mean_length"
# The same from Tunix's agentic GRPO learner (agentic_grpo_learner.py): the
# environments' trajectory rewards (what the reward manager sums with any
# reward functions'), and the completion length (every model turn).
AGENTIC_REWARD_MEAN = "trajectory_rewards/mean"
AGENTIC_COMPLETION_LEN_MEAN = "generation/completions/mean_length"
# The metrics mode Tunix buffers training metrics under.
TRAIN_MODE = "train"
