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

"""Publication: the engine gets exactly the trainer, at one copy's memory.

Across real processes: a 2-host x 2-device job (real multi-process JAX on
CPU) trains nothing but perturbs the FSDP-sharded trainer parameters,
publishes them into each host's native engine, and checks on every host
that the engine's parameters equal the gathered trainer parameters and that
the engine's next-token logits equal the trainer model's on the same
tokens.

In this process (4 CPU devices, one host): what a publication holds. A
bfloat16 gather holds no float32 copy (XLA:CPU widens bfloat16 collectives;
publication gathers the bits), values arrive bit for bit, and a publication
given the engine's previous weights (`reuse`) writes the new ones into
their buffers: no second copy of the engine's weights is ever alive.
"""

import pathlib

from flax import nnx
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec
import launch_utils
import numpy as np
import pytest

from tunix_mcjax import publication
from tunix_mcjax import runtime

multihost = pytest.mark.multihost

# Runs on each of 2 hosts; prints the host's RESULT record.
_PROGRAM = pathlib.Path(__file__).resolve().parent / "support" / (
    "publication_host.py")


@pytest.fixture(scope="module")
def results():
  return launch_utils.run_on_hosts(_PROGRAM)


@multihost
def test_engine_params_equal_gathered_trainer_params(results):
  for rec in results.values():
    assert rec["names_equal"]
    assert rec["num_sharded"] > 0  # The trainer really was FSDP-sharded.
    assert rec["on_local"]  # Engine arrays live on this host's devices only.
    assert rec["param_diff"] == 0.0


@multihost
def test_engine_logits_equal_trainer_logits_and_are_fresh(results):
  for rec in results.values():
    assert rec["logit_diff"] < 1e-5
    assert rec["logit_change"] > 1e-3  # Not the stale, pre-update weights.
    assert rec["no_wait_diff"] < 1e-5  # Without waiting for the gather.


@multihost
def test_publication_reports_bytes_and_seconds(results):
  for rec in results.values():
    assert rec["stats"]["bytes"] == rec["expected_bytes"] > 0
    assert rec["stats"]["seconds"] > 0
    assert rec["stats"]["num"] > 1


@multihost
def test_mismatches_name_the_parameter(results):
  for rec in results.values():
    assert "wk" in rec["errors"]["missing"]
    assert "wk" in rec["errors"]["shape"]
    assert "(2, 3)" in rec["errors"]["shape"]


# --- Memory: one process, 4 CPU devices --------------------------------------

# A parameter tree big enough that buffers, not bookkeeping, dominate.
_SHAPES = {"embed": (512, 256), "w1": (256, 512), "w2": (512, 256),
           "norm": (256,)}


def _trainer_tree(scale: float) -> dict[str, jax.Array]:
  """bfloat16 parameters FSDP-sharded over the global mesh (as a trainer
  holds them)."""
  gm = runtime.global_mesh()
  out = {}
  for i, (name, shape) in enumerate(sorted(_SHAPES.items())):
    spec = PartitionSpec("fsdp") if shape[0] % gm.size == 0 else (
        PartitionSpec())
    out[name] = jax.jit(
        lambda s=shape, i=i: (scale * jnp.sin(
            jnp.arange(np.prod(s), dtype=jnp.float32) + i)).reshape(s).astype(
                jnp.bfloat16),
        out_shardings=NamedSharding(gm, spec))()
  return out


def _publisher() -> publication.Publisher:
  lm = runtime.local_mesh()
  rep = NamedSharding(lm, PartitionSpec())
  dst = {n: jax.ShapeDtypeStruct(s, jnp.bfloat16, sharding=rep)
         for n, s in _SHAPES.items()}
  return publication.Publisher(dst=dst, local_mesh=lm)


def _pointers(tree) -> list[int]:
  return [s.data.unsafe_buffer_pointer() for x in jax.tree.leaves(tree)
          for s in x.addressable_shards]


def _live_bytes() -> int:
  """This process's live device bytes, each buffer counted once."""
  seen = {}
  for a in jax.live_arrays():
    for s in a.addressable_shards:
      seen[s.data.unsafe_buffer_pointer()] = s.data.nbytes
  return sum(seen.values())


def test_a_bfloat16_gather_holds_no_float32_copy():
  pub = _publisher()
  src = _trainer_tree(1.0)
  mem = pub.memory_analysis(src, reuse=False)
  one_copy = sum(int(np.prod(s)) * 2 for s in _SHAPES.values())
  # (The output also holds the tuple's table of pointers.)
  assert 0 <= mem.output_size_in_bytes - one_copy < 1024
  # XLA:CPU gathers bfloat16 as float32: the shards and the gathered
  # arrays widened, 2.5 copies of temporaries here. As bits: at most the
  # gathered bits before they become the output.
  assert mem.temp_size_in_bytes <= one_copy, mem
  assert pub.memory_analysis(src).temp_size_in_bytes <= one_copy
  compiled = pub._gather.lower(  # pylint: disable=protected-access
      pub._flat(src)).compile()  # pylint: disable=protected-access
  gathers = [l for l in compiled.as_text().splitlines() if " all-gather(" in l]
  assert gathers and not any("f32[" in l for l in gathers), gathers[:2]


def test_values_arrive_bit_for_bit():
  pub = _publisher()
  src = _trainer_tree(3.0)
  special = jnp.array([0.0, -0.0, jnp.inf, -jnp.inf, jnp.nan, 1e-40, -1e-40,
                       3.0e38], jnp.float32).astype(jnp.bfloat16)
  # A NaN with a payload of its own, as bits.
  bits = np.asarray(jax.lax.bitcast_convert_type(special, jnp.uint16)).copy()
  bits[4] = 0x7FC5
  special = jax.lax.bitcast_convert_type(jnp.asarray(bits), jnp.bfloat16)
  src["norm"] = jax.device_put(
      jnp.tile(special, 32), src["norm"].sharding)
  out = pub(src)
  for name, x in out.items():
    got = np.asarray(x).view(np.uint16)
    want = np.asarray(src[name]).view(np.uint16)
    np.testing.assert_array_equal(got, want, err_msg=name)
  assert out["norm"].dtype == jnp.bfloat16


def test_reuse_writes_the_new_weights_into_the_old_buffers():
  pub = _publisher()
  engine = pub(_trainer_tree(1.0))
  old = _pointers(engine)
  src = _trainer_tree(2.0)
  before = _live_bytes()
  new = pub(src, reuse=engine)
  # No second copy: the new weights occupy the old ones' buffers (every
  # replica on every local device), which are gone as arrays.
  assert _pointers(new) == old
  assert all(x.is_deleted() for x in jax.tree.leaves(engine))
  del engine
  assert _live_bytes() == before
  for name, x in new.items():
    np.testing.assert_array_equal(np.asarray(x), np.asarray(src[name]))
  # Every output aliases its donated input in the program itself.
  mem = pub.memory_analysis(src)
  assert mem.alias_size_in_bytes == sum(
      int(np.prod(s)) * 2 for s in _SHAPES.values())
  # And again from the arrays it just wrote (a step's publication).
  again = pub(_trainer_tree(0.5), reuse=jax.tree.leaves(new))
  assert _pointers(again) == old


def test_reuse_must_be_the_engines_layout():
  pub = _publisher()
  engine = pub(_trainer_tree(1.0))
  src = _trainer_tree(2.0)
  with pytest.raises(ValueError, match="3 arrays"):
    pub(src, reuse=list(engine.values())[:3])
  wrong = dict(engine, w1=jnp.zeros((256, 512), jnp.float32))
  with pytest.raises(ValueError, match="w1"):
    pub(src, reuse=wrong)
  # Nothing was donated by a refused call.
  assert not any(x.is_deleted() for x in jax.tree.leaves(engine))
