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

"""A MaxText actor from a Tunix CLI model section (`cli.maxtext_actor`).

In-process on 4 fake CPU devices (tests/conftest.py). The section is the
MaxText recipe's (run_qwen3_8b_disagg_maxtext.sh: MaxText's qwen3-8b, its
model_config.kwargs) at tiny widths. Checked: the kwargs reach MaxText (Tunix
0.1.7's create_model would drop them), and the engines' Qwen3 computes the
actor's logits, padded rows included, within 1e-5 (fp32 on both sides in a
different op order, as tests/maxtext/test_maxtext_models.py). The whole
recipe runs in tests/cli/test_recipe_agentic_disagg.py.
"""

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("maxtext")

# pylint: disable=g-import-not-at-top
from tunix_mcjax import publication
from tunix_mcjax import runtime
from tunix_mcjax.cli import maxtext_actor
from tunix_mcjax.engines import base as engines_base
# pylint: enable=g-import-not-at-top

VOCAB = 99
SECTION = {
    "model_name": "qwen3-8b",
    "model_source": "maxtext",
    "rng_seed": 42,
    # The recipe's own three, then the tiny widths (MaxText settings).
    "kwargs": {
        "base_emb_dim": 64, "sparse_matmul": True, "remat_policy": "minimal",
        "override_model_config": True, "base_num_query_heads": 4,
        "base_num_kv_heads": 2, "head_dim": 32, "base_mlp_dim": 128,
        "base_num_decoder_layers": 2, "vocab_size": VOCAB,
        "dtype": "float32", "matmul_precision": "highest",
    },
}


@pytest.fixture(scope="module")
def built():
  config = maxtext_actor.config(SECTION)
  mesh = maxtext_actor.mesh(config)
  actor = maxtext_actor.create(config, mesh, pad_id=0,
                               rng_seed=SECTION["rng_seed"])
  return config, mesh, actor


def test_kwargs_are_maxtext_settings(built):
  config, mesh, _ = built
  assert maxtext_actor.is_maxtext(SECTION)
  assert not maxtext_actor.is_maxtext({"model_source": "huggingface"})
  assert config.model_name == "qwen3-8b"
  assert (config.base_emb_dim, config.base_num_decoder_layers,
          config.vocab_size, config.head_dim) == (64, 2, VOCAB, 32)
  assert config.remat_policy == "minimal" and config.sparse_matmul
  # FSDP over every device.
  assert dict(zip(mesh.axis_names, mesh.devices.shape))["fsdp"] == (
      jax.device_count())
  assert maxtext_actor.describe(config).startswith(
      "model_source=maxtext: MaxText's qwen3-8b (2 layers, width 64,"
      " vocabulary 99)")


def test_engine_model_computes_the_actors_logits(built):
  config, mesh, actor = built
  spec = maxtext_actor.engine_spec(config)
  local = runtime.local_mesh(axis_names=spec.axis_names)
  engine = publication.build_engine_model(
      spec, nnx.state(actor, nnx.Param), local)
  rng = np.random.RandomState(0)
  tokens = rng.randint(3, VOCAB, (2, 12)).astype(np.int32)
  tokens[1, :4] = 0  # A left-padded row, as Tunix batches prompts.
  valid = tokens != 0
  positions = np.maximum(np.cumsum(valid, 1) - 1, 0).astype(np.int32)
  mask = np.tril(np.ones((2, 12, 12), bool)) & valid[:, None, :]
  args = (jnp.asarray(tokens), jnp.asarray(positions), None,
          jnp.asarray(mask))
  with jax.set_mesh(mesh):
    want, _ = actor(*args)
  with engines_base.use_mesh(local):
    got, _ = engine(*args)
  want, got = np.asarray(want), np.asarray(got)
  assert np.abs(want).max() > 0.1  # Not a degenerate all-zero model.
  np.testing.assert_allclose(got[0], want[0], atol=1e-5, rtol=0)
  np.testing.assert_allclose(got[1, 4:], want[1, 4:], atol=1e-5, rtol=0)


def test_rollout_host_model_is_the_engines_with_zero_weights(built):
  config, _, _ = built
  local = runtime.local_mesh()
  model = maxtext_actor.engine_model_on(config, local)
  leaves = jax.tree.leaves(nnx.state(model, nnx.Param))
  assert leaves and all(not np.asarray(x).any() for x in leaves)
  assert model.config.embed_dim == 64 and model.config.vocab_size == VOCAB
