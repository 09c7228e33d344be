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

"""The backend's options and what they decide, without a cluster."""

import types

from absl import logging
import pytest

from tunix_mcjax import cluster
from tunix_mcjax import cluster_options
from tunix_mcjax import host_optimizations

ENGINES = ["native", "vllm"]


def _training(micro, mini):
  return types.SimpleNamespace(train_micro_batch_size=micro,
                               mini_batch_size=mini)


def _o3():
  return cluster_options.McJaxOptions(
      optimizations=host_optimizations.HostOptimizations(
          balance_admission=True))


def test_the_cluster_module_still_names_the_options():
  assert cluster.McJaxOptions is cluster_options.McJaxOptions


@pytest.mark.parametrize("kwargs,message", [
    (dict(trace_steps=(1,)), "needs trace_dir"),
    (dict(trace_steps=(0,), trace_dir="t"), "step numbers >= 1"),
    (dict(packing_timeout_s=0), "packing_timeout_s"),
    (dict(engine_model=object()), "EngineModelSpec"),
])
def test_bad_options_are_refused_when_made(kwargs, message):
  with pytest.raises((ValueError, TypeError), match=message):
    cluster_options.McJaxOptions(**kwargs)


def test_engine_name_from_the_options_or_tunix_config():
  given = cluster_options.McJaxOptions(engine="vllm")
  assert cluster_options.engine_name(given, "vanilla", ENGINES) == "vllm"
  default = cluster_options.McJaxOptions()
  assert cluster_options.engine_name(default, "vanilla", ENGINES) == "native"
  with pytest.raises(ValueError, match="chosen by name"):
    cluster_options.engine_name(default, object, ENGINES)


def test_admission_deals_per_host_micro_batches():
  config = cluster_options.admission_config(
      cluster_options.McJaxOptions(), _training(2, 4), num_hosts=2,
      host_index=1, num_generations=2, loss_agg_mode=None)
  assert (config.chunk_size, config.update_size) == (2, 4)
  assert not config.balance_by_length


def test_o3_with_micro_batches_checks_the_loss_mode(monkeypatch):
  kw = dict(num_hosts=2, host_index=0, num_generations=2)
  ok = cluster_options.admission_config(
      _o3(), _training(2, 4), loss_agg_mode="sequence-mean-token-mean", **kw)
  assert ok.balance_by_length
  with pytest.raises(ValueError, match="token-mean"):
    cluster_options.admission_config(
        _o3(), _training(2, 4), loss_agg_mode="token-mean", **kw)
  warnings = []
  monkeypatch.setattr(logging, "warning",
                      lambda msg, *args: warnings.append(msg % args))
  cluster_options.admission_config(_o3(), _training(2, 4),
                                   loss_agg_mode=None, **kw)
  assert len(warnings) == 1 and "balance_admission (O3)" in warnings[0]
