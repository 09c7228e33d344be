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

"""The Tunix hooks and fixes in tunix_mcjax.compat, on the installed Tunix."""

import jax
import jax.numpy as jnp
from tunix.rl import utils as rl_utils

from tunix_mcjax import compat
from tunix_mcjax.recipes import models

def test_compat_hooks_exist_in_installed_tunix():
  for name in compat.REQUIRED_CLUSTER_MEMBERS:
    assert hasattr(compat.RLCluster, name), name
  from tunix.sft import peft_trainer  # pylint: disable=g-import-not-at-top

  buf = peft_trainer.MetricsBuffer(step=0, losses=[1.0, 3.0])
  assert hasattr(buf, "additional_metrics")
  fake = type("T", (), {"_prev_buffered_train_metrics": buf})()
  assert compat.last_train_metrics(fake) == {"loss": 2.0}


# Tunix's own function, whatever install_fixes() did to the module since.
rl_utils_is_sharing_weights = compat._is_sharing_weights  # pylint: disable=protected-access


def _tiny(seed: int, **overrides):
  return models.create_tiny_model(models.tiny_qwen3_config(**overrides),
                                  seed=seed)


def test_is_sharing_weights_is_false_for_different_structures():
  two, three = _tiny(0), _tiny(0, num_layers=3)
  # Tunix's own version raises on models of different structure.
  try:
    stock = rl_utils_is_sharing_weights(two, three)
  except ValueError:
    stock = "raised"
  assert stock == "raised"
  assert compat.is_sharing_weights(two, three) is False
  assert not compat.is_sharing_weights(two, _tiny(0))
  assert compat.is_sharing_weights(two, two)
  assert compat.is_sharing_weights(two, None) is False


def test_install_fixes_replaces_tunix_is_sharing_weights():
  compat.install_fixes()
  compat.install_fixes()  # Idempotent.
  assert rl_utils.is_sharing_weights is compat.is_sharing_weights


def test_put_on_memory_kind_moves_arrays_and_keeps_prng_keys():
  state = {"w": jnp.ones((4, 2)), "key": jax.random.key(0),
           "b": jnp.zeros((3,))}
  moved = compat.put_on_memory_kind(state, "pinned_host")
  assert moved["key"] is state["key"]
  for name in ("w", "b"):
    assert moved[name].sharding.memory_kind == "pinned_host", name
    assert (jax.device_get(moved[name]) == jax.device_get(state[name])).all()
  # Without keys it is Tunix's own function.
  plain = compat.put_on_memory_kind({"w": jnp.ones((2,))}, "pinned_host")
  assert plain["w"].sharding.memory_kind == "pinned_host"
