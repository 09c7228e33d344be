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

"""Truncated importance weights of the disaggregated mode."""

import numpy as np
import pytest

from tunix_mcjax.da import importance


def test_weights_by_hand():
  prox = np.log(np.array([[0.5, 0.2, 0.9], [0.1, 0.3, 0.3]]))
  sampler = np.log(np.array([[0.5, 0.4, 0.1], [0.2, 0.3, 0.6]]))
  mask = np.array([[1, 1, 1], [1, 1, 0]])
  w = importance.truncated_weights(prox, sampler, mask, cap=2.0)
  # 0.5/0.5, 0.2/0.4, min(9, 2); 0.1/0.2, 0.3/0.3, masked -> 1.
  np.testing.assert_allclose(w, [[1.0, 0.5, 2.0], [0.5, 1.0, 1.0]],
                             rtol=1e-6)
  assert w.dtype == np.float32


def test_equal_policies_weigh_one():
  rng = np.random.default_rng(0)
  logps = np.log(rng.uniform(0.01, 1.0, (4, 7)))
  w = importance.truncated_weights(logps, logps, np.ones((4, 7)), cap=2.0)
  np.testing.assert_array_equal(w, np.ones((4, 7), np.float32))


def test_far_off_token_gets_the_cap_not_inf():
  w = importance.truncated_weights(np.array([[0.0]]), np.array([[-1e4]]),
                                   np.array([[1]]), cap=3.0)
  assert float(w[0, 0]) == 3.0


def test_shapes_must_agree():
  with pytest.raises(ValueError, match="shapes differ"):
    importance.truncated_weights(np.zeros((2, 3)), np.zeros((2, 4)),
                                 np.ones((2, 3)), cap=2.0)


def test_sampler_logps_padded_to_the_completion_width():
  out = importance.padded_sampler_logps([[-1.0, -2.0], [-3.0, -4.0, -5.0,
                                                          -6.0]], width=3)
  np.testing.assert_array_equal(out, [[-1, -2, 0], [-3, -4, -5]])


def test_weight_stats_over_completion_tokens_only():
  stats = importance.weight_stats(np.array([[0.5, 2.0, 9.0]]),
                                  np.array([[1, 1, 0]]))
  assert stats == {"is_weight_mean": 1.25, "is_weight_min": 0.5,
                   "is_weight_max": 2.0}


def test_tokens_after_a_sampled_pad_are_not_aligned():
  ids = np.array([[5, 0, 6, 7, 0, 0], [5, 6, 7, 8, 9, 3]])
  mask = ids != 0
  aligned = importance.context_aligned(ids, mask, pad_id=0)
  np.testing.assert_array_equal(
      aligned, [[1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1]])
  w = np.ones((2, 6))
  w[0, 2] = 1.5  # After the inner pad: not counted as aligned.
  w[1, 3] = 0.99
  stats = importance.weight_stats(w, mask, aligned)
  # assertAlmostEqual's default: equal when rounded to 7 places.
  assert round(stats["is_weight_max_dev_aligned"] - 0.01, 7) == 0
  assert stats["misaligned_tokens"] == 2
  assert stats["is_weight_max"] == 1.5
