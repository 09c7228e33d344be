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

"""A rollout host of the disaggregated mode, in process (no Ray): its
engine on this process's 4 CPU devices, with engine tp 1 and 2.

With `engine_tp=2` the host's engine mesh is (2, 2) and its parameters are
split over tp; published weights (the trainers' flat arrays) install into
that layout, and the host generates exactly the tokens of a tp 1 host with
the same weights (per-row sampling keys; tests/engines/test_engine_tp.py
shows the same of the engine alone). The whole job with tp 2 rollout hosts
is tests/da/test_disaggregated.py's synchronous run.
"""

import numpy as np
import pytest

from tunix_mcjax.da import rollout_host
from tunix_mcjax.recipes import da_job
from tunix_mcjax.recipes import job_config


def _source(engine_tp: int) -> da_job.GrpoJobSource:
  return da_job.GrpoJobSource(job=job_config.GrpoJobConfig(
      backend="mcjax_da", max_staleness=0, engine_tp=engine_tp, seed=3,
      max_new_tokens=6, max_prompt_length=32))


def _host(engine_tp: int) -> rollout_host.RolloutHost:
  return rollout_host.RolloutHost(_source(engine_tp), 0)


@pytest.fixture(scope="module")
def hosts():
  return {tp: _host(tp) for tp in (1, 2)}


def test_engine_mesh_follows_engine_tp(hosts):
  assert hosts[1].info()["engine_mesh"] == {"fsdp": 4, "tp": 1}
  assert hosts[2].info()["engine_mesh"] == {"fsdp": 2, "tp": 2}
  split = [path for path, (sharding, _) in
           hosts[2]._shardings.items()  # pylint: disable=protected-access
           if "tp" in str(sharding.spec)]
  assert split, "no parameter is split over tp"


def test_published_weights_install_in_the_tp_layout_and_generate_the_same(
    hosts):
  rng = np.random.default_rng(0)
  # The trainers' publication: every parameter as a flat host array, here
  # the tp 1 host's own weights, perturbed so they are no host's initial.
  layout = hosts[1]._shardings  # pylint: disable=protected-access
  flat = {path: (value + 0.05 * rng.standard_normal(value.shape)).astype(
      layout[path][1]) for path, value in _engine_params(hosts[1]).items()}
  outs = {}
  for tp, host in hosts.items():
    times = host.set_weights(0, flat)
    assert times["install_s"] >= 0
    got = _engine_params(host)
    for path, value in flat.items():
      np.testing.assert_array_equal(got[path], value, err_msg=str(path))
    outs[tp] = host.generate(["Question: 1+2?", "Question: 7*6?"],
                             np.array([[0, 10], [0, 11]], np.uint32),
                             _source(1).rollout_config(),
                             0)
  assert outs[1]["text"] == outs[2]["text"]
  for a, b in zip(outs[1]["tokens"], outs[2]["tokens"]):
    np.testing.assert_array_equal(a, b)
  for a, b in zip(outs[1]["logprobs"], outs[2]["logprobs"]):
    np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
  # Not vacuous: the two rows' completions differ.
  assert outs[1]["text"][0] != outs[1]["text"][1]


def _engine_params(host: rollout_host.RolloutHost) -> dict:
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from tunix_mcjax import tree_paths  # pylint: disable=g-import-not-at-top

  model = host._engine.model()  # pylint: disable=protected-access
  return {path: np.asarray(x) for path, x in
          tree_paths.flat_params(nnx.state(model, nnx.Param)).items()}
