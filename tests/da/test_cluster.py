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

"""The disaggregated cluster's admission ahead of the learner."""

from absl.testing import absltest
from absl.testing import parameterized

from tunix_mcjax import admission
from tunix_mcjax.da import cluster


def _batches(n: int, size: int = 4):
  return [{"prompts": [f"p{b}-{i}" for i in range(size)],
           "answers": [str(i) for i in range(size)]} for b in range(n)]


class LookaheadTest(parameterized.TestCase):

  @parameterized.parameters(0, 1, 2)
  def test_ledger_holds_exactly_the_buffered_batches(self, depth):
    ledger = admission.StepLedger()
    sharded = admission.Admission(
        admission.AdmissionConfig(num_hosts=2, host_index=1,
                                  num_generations=2),
        ledger=ledger,
    ).shard(_batches(4))
    ahead = cluster._Lookahead(sharded, depth)  # pylint: disable=protected-access
    seen = []
    for batch in ahead:
      seen.append(batch["prompts"])
      # The learner's batch is the oldest open entry; the rest are buffered.
      untaken = ledger.entries[1:]
      self.assertLen(untaken, len(ahead.buffered()))
      self.assertLessEqual(len(ahead.buffered()), depth)
      for entry, buffered in zip(untaken, ahead.buffered()):
        # Host 1 of 2 takes prompts 2, 3 of each batch of 4: row ids name
        # the global prompt index.
        self.assertEqual(buffered["prompts"][0].split("-")[1], "2")
        self.assertEqual(entry.row_ids[0, 0] % 4, 2)
      ledger.take(ledger.entries[0].row_ids.shape[0])
      ledger.close_step()
    self.assertEqual(seen, [b["prompts"][2:] for b in _batches(4)])
    self.assertEmpty(ledger.entries)


if __name__ == "__main__":
  absltest.main()
