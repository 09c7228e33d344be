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

"""The host program of tests/recipes/test_models.py (run by path on 2 hosts
x 2 devices): `tiny_models_host.py CHECKPOINT`.

Creates the tiny Qwen3 and loads the HF checkpoint CHECKPOINT, each both
sharded over the global mesh and unsharded; checks every addressable shard
against the unsharded copy and prints `REPORT {...}` with a digest of the
full values (which must agree across hosts) and shard counts.
"""

import hashlib
import json
import sys

from tunix_mcjax import runtime


def main(argv: list[str]) -> None:
  runtime.initialize()
  # pylint: disable=g-import-not-at-top
  from flax import nnx
  import jax
  import numpy as np
  from tunix_mcjax.recipes import models
  # pylint: enable=g-import-not-at-top

  def check(sharded, plain):
    # Every addressable shard equals the same slice of a local, unsharded
    # copy; the digest of the full values must then agree across hosts.
    ref = jax.tree_util.tree_flatten_with_path(nnx.state(plain, nnx.Param))[0]
    got = jax.tree_util.tree_leaves(nnx.state(sharded, nnx.Param))
    digest, shards, global_leaves = hashlib.sha256(), 0, 0
    for (path, want), arr in zip(ref, got):
      want = np.asarray(want)
      digest.update(jax.tree_util.keystr(path).encode())
      digest.update(want.tobytes())
      global_leaves += not arr.is_fully_addressable
      for shard in arr.addressable_shards:
        np.testing.assert_array_equal(
            np.asarray(shard.data), want[shard.index])
        shards += 1
    return {"digest": digest.hexdigest(), "shards": shards,
            "global_leaves": global_leaves, "leaves": len(got)}

  mesh = runtime.global_mesh()
  cfg = models.tiny_qwen3_config()
  report = {"tiny": check(models.create_tiny_model(cfg, seed=11, mesh=mesh),
                          models.create_tiny_model(cfg, seed=11))}
  sharded, _, _ = models.load_hf_qwen3(argv[1], mesh=mesh)
  plain, _, _ = models.load_hf_qwen3(argv[1], mesh=None)
  report["hf"] = check(sharded, plain)
  print("REPORT " + json.dumps(report), flush=True)


if __name__ == "__main__":
  main(sys.argv)
