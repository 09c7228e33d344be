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

"""Host programs of tests/test_runtime.py (run by path under the launcher):

  runtime_host.py meshes OUT   on 2 hosts x 2 devices: the global, hybrid,
      local and publication meshes lay devices out by host as documented;
      prints "MESH OK";
  runtime_host.py train OUT    a 3-step FSDP train step of a small MLP, each
      host feeding its own rows; saves the losses and gathered parameters to
      OUT/params_<hosts>x<devices>_host<i>.npz and prints "TRAIN OK".
"""

import functools
import pathlib
import sys

from tunix_mcjax import runtime


def meshes(info: runtime.RuntimeInfo) -> None:
  """Asserts the meshes' device layouts (2 hosts x 2 devices)."""
  # pylint: disable=g-import-not-at-top
  import jax
  from jax.sharding import NamedSharding
  from jax.sharding import PartitionSpec as P
  import numpy as np
  from tunix_mcjax import publication
  # pylint: enable=g-import-not-at-top

  me = info.process_index
  assert info.source == "launcher" and info.process_count == 2, info
  assert runtime.initialize() is info

  def hosts(devices):
    return [d.process_index for d in np.asarray(devices).flat]

  expected = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
  gm = runtime.global_mesh()
  assert gm.axis_names == ("fsdp", "tp") and gm.devices.shape == (4, 1)
  assert list(gm.devices.flat) == expected
  assert hosts(gm.devices) == [0, 0, 1, 1]

  gm2 = runtime.global_mesh(tp=2)
  assert gm2.devices.shape == (2, 2)
  assert [hosts(row) for row in gm2.devices] == [[0, 0], [1, 1]]
  for bad_tp in (3, 4):
    try:
      runtime.global_mesh(tp=bad_tp)
    except ValueError as e:
      assert "must divide the number of devices per host (2)" in str(e), e
    else:
      raise AssertionError(f"tp={bad_tp} was accepted")

  # Hybrid sharding: one data row per host, fsdp within it.
  hm = runtime.global_mesh(kind="hsdp")
  assert (hm.axis_names == ("data", "fsdp", "tp")
          and hm.devices.shape == (2, 2, 1))
  assert list(hm.devices.flat) == expected
  assert [set(hosts(block)) for block in hm.devices] == [{0}, {1}]
  assert runtime.global_mesh(kind="hsdp", tp=2).devices.shape == (2, 1, 2)
  assert runtime.local_mesh(axis_names=hm.axis_names).devices.shape == (
      1, 2, 1)

  lm = runtime.local_mesh()
  assert lm.devices.shape == (2, 1)
  assert list(lm.devices.flat) == sorted(jax.local_devices(),
                                         key=lambda d: d.id)
  assert hosts(lm.devices) == [me, me]
  assert runtime.local_mesh(tp=2).devices.shape == (1, 2)

  # The publication's host view: every host's block laid out like its local
  # mesh, hosts on a leading axis.
  view1 = publication.host_view_mesh(lm)
  assert view1.axis_names == ("host", "fsdp", "tp")
  assert view1.devices.shape == (2, 2, 1)
  assert [set(hosts(block)) for block in view1.devices] == [{0}, {1}]
  assert list(view1.devices[me].flat) == list(lm.devices.flat)

  # What the view is for: replicated over hosts, sharded within a host, so
  # each host holds a full copy laid out over its own devices.
  full = np.arange(8 * 3, dtype=np.float32).reshape(8, 3)
  x = jax.make_array_from_callback(
      full.shape, NamedSharding(gm, P("fsdp")), lambda idx: full[idx])
  per_host = jax.jit(
      lambda a: a, out_shardings=NamedSharding(view1, P("fsdp")))(x)
  shards = sorted(per_host.addressable_shards, key=lambda s: s.index[0].start)
  assert len(shards) == 2
  np.testing.assert_array_equal(
      np.concatenate([np.asarray(s.data) for s in shards]), full)
  print("MESH OK")


def train(info: runtime.RuntimeInfo, out: pathlib.Path) -> None:
  """Trains a small MLP with FSDP for 3 steps; saves losses and params."""
  # pylint: disable=g-import-not-at-top
  import jax
  from jax.experimental import multihost_utils
  import jax.numpy as jnp
  from jax.sharding import NamedSharding
  from jax.sharding import PartitionSpec as P
  import numpy as np
  import optax
  # pylint: enable=g-import-not-at-top

  steps, batch, d_in, d_h, d_out = 3, 16, 8, 16, 4
  rng = np.random.default_rng(0)
  init = {
      "w1": rng.normal(size=(d_in, d_h)).astype(np.float32) * 0.5,
      "b1": rng.normal(size=(d_h,)).astype(np.float32) * 0.1,
      "w2": rng.normal(size=(d_h, d_out)).astype(np.float32) * 0.5,
      "b2": np.zeros((d_out,), np.float32),
  }
  xs = rng.normal(size=(steps, batch, d_in)).astype(np.float32)
  ys = rng.normal(size=(steps, batch, d_out)).astype(np.float32)

  mesh = runtime.global_mesh()
  specs = {"w1": P("fsdp", None), "b1": P("fsdp"), "w2": P("fsdp", None),
           "b2": P()}
  param_sh = {k: NamedSharding(mesh, s) for k, s in specs.items()}
  batch_sh = NamedSharding(mesh, P("fsdp", None))
  params = {k: jax.make_array_from_callback(v.shape, param_sh[k],
                                            lambda idx, v=v: v[idx])
            for k, v in init.items()}
  opt = optax.adam(1e-2)
  # opt.init alone would leave the step count on one device; give every
  # state leaf an explicit global sharding (moments like their parameter,
  # which the distinct shapes identify) and pin it in the step's in/out
  # shardings.
  spec_by_shape = {v.shape: specs[k] for k, v in init.items()}
  assert len(spec_by_shape) == len(init)
  state_sh = jax.tree.map(
      lambda leaf: NamedSharding(mesh, spec_by_shape.get(leaf.shape, P())),
      jax.eval_shape(opt.init, params))
  opt_state = jax.jit(opt.init, out_shardings=state_sh)(params)

  def loss_fn(p, x, y):
    h = jnp.tanh(x @ p["w1"] + p["b1"])
    return jnp.mean((h @ p["w2"] + p["b2"] - y) ** 2)

  @functools.partial(
      jax.jit,
      in_shardings=(param_sh, state_sh, batch_sh, batch_sh),
      out_shardings=(param_sh, state_sh, NamedSharding(mesh, P())))
  def train_step(p, s, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
    updates, s = opt.update(grads, s, p)
    return optax.apply_updates(p, updates), s, loss

  # Each host feeds only its own rows: host h owns rows [h*per, (h+1)*per).
  per = batch // info.process_count
  rows = slice(info.process_index * per, (info.process_index + 1) * per)
  losses = []
  for step in range(steps):
    x = jax.make_array_from_process_local_data(batch_sh, xs[step][rows],
                                               xs[step].shape)
    y = jax.make_array_from_process_local_data(batch_sh, ys[step][rows],
                                               ys[step].shape)
    params, opt_state, loss = train_step(params, opt_state, x, y)
    losses.append(float(loss))
  final = {k: np.asarray(multihost_utils.process_allgather(v, tiled=True))
           for k, v in params.items()}
  np.savez(out / f"params_{info.process_count}x{info.local_device_count}"
           f"_host{info.process_index}.npz", losses=np.array(losses), **final)
  print("TRAIN OK")


def main(argv: list[str]) -> None:
  info = runtime.initialize()
  if argv[1] == "meshes":
    meshes(info)
  elif argv[1] == "train":
    train(info, pathlib.Path(argv[2]))
  else:
    sys.exit(f"unknown program {argv[1]!r}")


if __name__ == "__main__":
  main(sys.argv)
