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

"""Evaluation row identities and the combination of learner metrics (one
process; the multi-host equivalence is tests/test_eval_equivalence.py)."""

import numpy as np
import pytest
from tunix.perf import metrics as perf_metrics

from tunix_mcjax import admission
from tunix_mcjax.recipes import tasks
from tunix_mcjax.telemetry import learner_metrics


def _router(num_hosts=1, host=0, g=2):
  train, evaluation = admission.StepLedger(), admission.StepLedger()
  cfg = admission.AdmissionConfig(num_hosts=num_hosts, host_index=host,
                                  num_generations=g)
  return (admission.TrainEvalRowIds(train, evaluation),
          admission.Admission(cfg, ledger=train),
          admission.Admission(cfg, ledger=evaluation))


def _batches(n, size):
  return [{"prompts": [f"p{b}_{i}" for i in range(size)]} for b in range(n)]


def test_eval_rows_have_their_own_identities():
  ids, train_adm, eval_adm = _router()
  train = iter(train_adm.shard(_batches(2, 2)))
  evals = eval_adm.shard_eval(_batches(2, 2))
  next(train)
  base = admission.EVAL_FIRST_PROMPT_INDEX
  for _ in range(2):  # Two evaluation passes: the same identities.
    for _ in evals:  # The learner admits every eval batch, then generates.
      pass
    with ids.evaluating():
      # One call may span eval batches (Tunix merges them up to its rollout
      # size); fully taken eval batches close at once.
      got = ids.take(8)
    np.testing.assert_array_equal(
        got[:, 0], np.repeat(np.arange(base, base + 4), 2))
    assert ids.evaluation.entries == ()
  # Training rows were not taken by the evaluation pass.
  np.testing.assert_array_equal(ids.take(4)[:, 0], [0, 0, 1, 1])
  with ids.evaluating(), pytest.raises(RuntimeError,
                                       match="shard_eval_dataset"):
    ids.take(2)


def test_eval_identities_are_placement_invariant():
  batches = _batches(1, 4)
  whole = []
  for h in range(2):
    ids, _, eval_adm = _router(num_hosts=2, host=h)
    list(eval_adm.shard_eval(batches))
    with ids.evaluating():
      whole.append(ids.take(4))
  ids, _, eval_adm = _router()
  list(eval_adm.shard_eval(batches))
  with ids.evaluating():
    np.testing.assert_array_equal(np.concatenate(whole), ids.take(8))


def _buffer(metrics):
  return perf_metrics.MetricsBuffer(global_steps=3, metrics=metrics,
                                    mode="eval")


def test_combine_keeps_single_host_values_and_passes_others():
  combiner = learner_metrics.GlobalLearnerMetrics(local_mesh=None)
  buf = _buffer({
      "rewards/score/mean": ([0.5, 0.25], np.mean),
      "rewards/score/max": ([0.5, 0.75], np.max),
      "prompts": (["a", "b"], None),
      "custom": ([1.0, 3.0], lambda x: x[0]),
  })
  out = combiner.combine(buf)
  assert out.metrics["rewards/score/mean"] == ([0.375], np.mean)
  assert out.metrics["rewards/score/max"] == ([0.75], np.max)
  assert out.metrics["prompts"] == buf.metrics["prompts"]
  assert out.metrics["custom"] == buf.metrics["custom"]
  assert (out.global_steps, out.mode) == (3, "eval")


@pytest.mark.parametrize("op,expected", [
    (np.mean, 2.0), (np.max, 3.5), (np.min, 0.5), (np.sum, 6.0)])
def test_host_results_combine_per_reduction(op, expected):
  # Equal-size host shares: the mean of host means is the global mean.
  assert learner_metrics.combine_host_results(
      np.array([0.5, 3.5, 2.0]), op) == expected


def test_toy_eval_split_is_held_out():
  train = tasks.dataset_from_spec("toy", batch_size=8, num_batches=1,
                                  seed=3)[0]
  held_out = tasks.eval_dataset_from_spec("toy", batch_size=8,
                                          num_batches=1, seed=3)
  assert list(held_out[0]["prompts"]) != list(train[0]["prompts"])
  with pytest.raises(ValueError, match="train"):
    tasks.gsm8k_test_path("data/gsm.jsonl")


def test_cli_learner_gets_the_test_split_only_inside_the_block(monkeypatch):
  from tunix.rl.grpo import grpo_learner  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.compat import tunix_cli  # pylint: disable=g-import-not-at-top

  seen = []
  # Tunix's train is the boundary: record what the learner would train on.
  monkeypatch.setattr(grpo_learner.GRPOLearner, "train",
                      lambda self, train_ds, eval_ds=None, skip_jit=False:
                      seen.append((train_ds, eval_ds)))
  stock = grpo_learner.GrpoLearner
  with tunix_cli.learner_with_eval("test-split"):
    cls = grpo_learner.GrpoLearner
    assert cls is not stock and issubclass(cls, stock)
    learner = object.__new__(cls)
    learner.train("train")  # As Tunix's `_run` calls it.
    learner.train("train", "given")  # An explicit eval_ds wins.
  assert grpo_learner.GrpoLearner is stock
  assert seen == [("train", "test-split"), ("train", "given")]
