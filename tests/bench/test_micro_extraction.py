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

"""GSM8K answer extraction is linear in the completion's length."""

from tunix_mcjax.bench import micro


def test_extraction_of_100kb_completions_is_linear():
  got = micro.gsm8k_extraction_scaling(sizes=(10_000, 100_000), repeats=5)
  assert set(got["shapes"]) == set(micro._EXTRACTION_SHAPES)  # pylint: disable=protected-access
  # Linear: ~10x for 10x the text (a quadratic pattern gives ~100x); the
  # bounds leave room for a busy machine.
  assert got["worst_growth"] < 40, got
  assert got["largest_s"] < 0.25, got
