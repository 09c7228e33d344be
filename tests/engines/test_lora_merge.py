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


"""The LoRA merge equals the LoRA model's own forward (qwix, Tunix Qwen3)."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
import pytest
from tunix.cli.utils import model as tunix_model_lib

from tunix_mcjax import rules
from tunix_mcjax import tree_paths
from tunix_mcjax.engines import lora_merge
from tunix_mcjax.recipes import models

RANK, ALPHA = 4, 8.0


@pytest.fixture(scope="module")
def lora_model():
  base = models.create_tiny_model(models.tiny_qwen3_config(), seed=1)
  model = tunix_model_lib.apply_lora_to_model(
      base, None, {"rank": RANK, "alpha": ALPHA,
                   "module_path": rules.DEFAULT_LORA_MODULES})
  # qwix initialises B to zero (a no-op adapter): give B values so the
  # merge is tested, not the base model.
  state = nnx.state(model, nnx.LoRAParam)
  keys = iter(jax.random.split(jax.random.key(0), 100))
  state = jax.tree.map(
      lambda x: jax.random.normal(next(keys), x.shape, x.dtype) * 0.1, state)
  nnx.update(model, state)
  return base, model


def _logits(model):
  tokens = jnp.asarray([[3, 7, 11, 5, 9, 2]], jnp.int32)
  positions = jnp.arange(tokens.shape[1])[None]
  mask = jnp.tril(jnp.ones((1, tokens.shape[1], tokens.shape[1]), bool))
  logits, _ = model(tokens, positions, None, mask)
  return np.asarray(logits)


@pytest.mark.slow  # Builds and runs a LoRA model (~30-70 s on 2 cores).
def test_merged_weights_give_the_lora_models_logits(lora_model):
  base, model = lora_model
  flat = tree_paths.flat_params(nnx.state(model, nnx.Param))
  adapted = lora_merge.adapters(flat)
  assert len(adapted) == 2 * 7  # Seven projections in each of 2 layers.
  merged = lora_merge.merge(
      flat, flat, adapted, lora_merge.scale(
          {"rank": RANK, "alpha": ALPHA}, where="test"))
  base_flat = tree_paths.flat_params(nnx.state(base, nnx.Param))
  # A clone: split/merge would share the base model's Variables.
  merged_model = nnx.clone(base)
  state = nnx.state(merged_model, nnx.Param)
  new = {p: merged.get(p, x) for p, x in base_flat.items()}
  nnx.update(merged_model, jax.tree.unflatten(
      jax.tree.structure(state), [new[p] for p in tree_paths.flat_params(
          state)]))
  want, got = _logits(model), _logits(merged_model)
  # The adapters matter (else the comparison is vacuous) ...
  assert np.abs(want - _logits(base)).max() > 1e-2
  # ... and the merged base model computes the LoRA model's logits.
  np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-5)


def test_scale_needs_rank_and_alpha():
  with pytest.raises(ValueError, match="rank and alpha"):
    lora_merge.scale(None, where="rollout_vllm_lora_config")
  assert lora_merge.scale({"rank": 4, "alpha": 8.0}, where="x") == 2.0


def test_an_adapter_without_its_b_is_refused():
  with pytest.raises(ValueError, match="has no"):
    lora_merge.adapters([("l", "w"), ("l", "w_lora_a")])
