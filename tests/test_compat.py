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

"""tunix_mcjax.compat against the installed Tunix: the touch-point table,
the rule that only compat reaches those names, and the fixes."""

import importlib
import io
import logging
import pathlib
import subprocess
import sys
import textwrap
import tokenize
import types

import jax
import jax.numpy as jnp
import pytest
from tunix.rl import utils as rl_utils

from tunix_mcjax import compat
from tunix_mcjax.compat import jax_runtime
from tunix_mcjax.compat import ray_cluster
from tunix_mcjax.compat import reaches
from tunix_mcjax.compat import touch_points
from tunix_mcjax.compat import vllm_engine
from tunix_mcjax.recipes import models

_PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "tunix_mcjax"
# Imports modules in a fresh interpreter and fails if that imported any of
# the packages named: `light_imports.py HEAVY MODULE...`.
_LIGHT_IMPORTS = (pathlib.Path(__file__).resolve().parent / "support" /
                  "light_imports.py")


def _row_id(row: touch_points.TouchPoint) -> str:
  where = f"{row.module}.{row.attr}" if row.attr else row.module
  return f"{where}:{row.needle}" if row.needle else where


@pytest.mark.parametrize("row", touch_points.TOUCH_POINTS, ids=_row_id)
def test_touch_point_holds_in_installed_packages(row):
  if row.optional_dependency is not None:
    try:
      importlib.import_module(row.optional_dependency)
    except ImportError:
      pytest.skip(f"optional dependency {row.optional_dependency!r} is not"
                  " importable in this environment.")
  assert touch_points.problem(row) is None, (row.why, touch_points.problem(row))


def test_touch_point_rows_are_unique_and_documented():
  keys = [(r.module, r.attr, r.kind, r.needle)
          for r in touch_points.TOUCH_POINTS]
  assert len(set(keys)) == len(keys)
  for row in touch_points.TOUCH_POINTS:
    assert row.wrapper.startswith("compat"), row
    assert row.why, row


def _private_accesses(source: str, names: set[str]) -> list[tuple[int, str]]:
  """(line, name) where code reaches `names` other than via self/super().

  Attribute accesses (`x._name`) and imports count; definitions, accesses on
  `self`/`cls`/`super()` (overrides in subclasses), strings and comments do
  not.
  """
  skip = (tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT,
          tokenize.STRING)
  tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
            if t.type not in skip]
  hits = []
  in_import = False
  at_start = True
  for i, t in enumerate(tokens):
    if t.type == tokenize.NEWLINE:
      in_import, at_start = False, True
      continue
    if at_start:
      in_import = t.string in ("import", "from")
      at_start = False
    if t.type != tokenize.NAME or t.string not in names:
      continue
    if i and tokens[i - 1].string == ".":
      owner = tokens[i - 2].string if i >= 2 else ""
      via_super = (i >= 4 and tokens[i - 2].string == ")"
                   and tokens[i - 3].string == "("
                   and tokens[i - 4].string == "super")
      if owner in ("self", "cls") or via_super:
        continue
      hits.append((t.start[0], t.string))
    elif in_import:
      hits.append((t.start[0], t.string))
  return hits


def test_private_names_are_reached_only_through_compat():
  names = set()
  for row in touch_points.TOUCH_POINTS:
    names |= touch_points.private_names(row)
  assert "_SamplingState" in names and "_model_runner" in names
  offenders = []
  for path in sorted(_PACKAGE.rglob("*.py")):
    if (_PACKAGE / "compat") in path.parents:
      continue
    for line, name in _private_accesses(path.read_text(), names):
      offenders.append(f"{path.relative_to(_PACKAGE.parent)}:{line}: {name}")
  assert not offenders, (
      "Private upstream names reached outside tunix_mcjax/compat (wrap them"
      f" in compat and list them in compat/touch_points.py): {offenders}"
  )


def test_private_access_scan_finds_what_it_should():
  names = {"_sample", "_SamplingState"}
  source = (
      "from tunix.generate.sampler import _SamplingState\n"
      "x = sampler._sample(1)\n"
      "from m import (\n    a,\n    _sample,\n)\n"
      "y = self._sample(1)\n"
      "z = super()._sample(1)\n"
      "def _sample(self):\n"
      "  '''sampler._sample in a docstring'''\n"
      "  return 1  # sampler._sample in a comment\n"
  )
  assert _private_accesses(source, names) == [
      (1, "_SamplingState"), (2, "_sample"), (5, "_sample")]


def test_no_private_upstream_name_is_reached_outside_compat():
  found = reaches.private_reaches(_PACKAGE)
  assert not found, (
      "Private upstream names (jax._src, ray._private, vLLM internals, ...)"
      " reached outside tunix_mcjax/compat: wrap each in a compat function"
      " and add its row to compat/touch_points.py:\n" + "\n".join(found))


def test_private_reach_scan_finds_what_it_should(tmp_path):
  root = tmp_path / "pkg"
  bad = """
      import jax._src.clusters
      from ray._private import ray_constants
      from tunix.generate.sampler import _SamplingState
      from vllm.platforms import current_platform
      import logging

      def f(llm, ray, sampler):
        w = llm.llm_engine.model_executor.driver_worker
        ray.init(_temp_dir="/tmp/x")
        logging.getLogger("ray._private.authentication")
        getattr(sampler, "_sample")
        return self._sample, super()._log_metrics, "jax._src is private"
      """
  files = {
      "__init__.py": "",
      "bad.py": bad,
      # Allowed: compat itself, public names, own private names, overrides.
      "compat/__init__.py": "",
      "compat/wrap.py": bad,
      "good.py": """
          import jax
          from jax import numpy as jnp
          from pkg import _own
          from ray.util import placement_group

          def f(x):
            return x._own_attr, getattr(x, "_own_attr"), jax.devices()
          """,
  }
  for name, text in files.items():
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
  assert reaches.private_reaches(root) == [
      "pkg/bad.py:2: import jax._src.clusters",
      "pkg/bad.py:3: from ray._private import ray_constants",
      "pkg/bad.py:4: from tunix.generate.sampler import _SamplingState",
      "pkg/bad.py:5: from vllm.platforms import current_platform",
      "pkg/bad.py:9: .driver_worker",
      "pkg/bad.py:9: .llm_engine",
      "pkg/bad.py:9: .model_executor",
      "pkg/bad.py:10: _temp_dir=",
      "pkg/bad.py:11: 'ray._private.authentication'",
      "pkg/bad.py:12: getattr(..., '_sample')",
  ]


def test_internal_names_are_named_by_rows():
  text = " ".join(f"{r.module} {r.attr} {r.needle}"
                  for r in touch_points.TOUCH_POINTS)
  unnamed = sorted(n for n in reaches.INTERNAL_NAMES if n not in text)
  assert not unnamed, unnamed
  for row in touch_points.TOUCH_POINTS:
    if reaches.is_private_upstream(row.module):
      # A private module is reached through compat only.
      assert row.wrapper.startswith("compat."), row


def test_light_compat_modules_import_neither_tunix_nor_jax():
  # runtime.py reads compat.jax_runtime before JAX starts.
  subprocess.run([sys.executable, str(_LIGHT_IMPORTS), "jax,tunix,ray,vllm",
                  "tunix_mcjax.compat.jax_runtime",
                  "tunix_mcjax.compat.ray_cluster",
                  "tunix_mcjax.compat.reaches",
                  "tunix_mcjax.compat.vllm_engine"], check=True)


def test_jax_runtime_reads_the_installed_jax():
  detectors = jax_runtime.cluster_detectors()
  names = [name for name, _ in detectors]
  assert "SlurmCluster" in names
  # Opt-in detectors (mpi4py) are left out.
  assert "Mpi4pyCluster" not in names
  assert all(callable(probe) for _, probe in detectors)
  assert isinstance(jax_runtime.running_in_cloud_tpu_vm(), bool)
  assert jax_runtime.backends_are_initialized() in (True, False)


def test_ray_cluster_flags_are_restored():
  pytest.importorskip("ray")  # Not in .venv-vllm.
  from ray._private import ray_constants  # pylint: disable=g-import-not-at-top

  before = ray_constants.ENABLE_RAY_CLUSTER
  with pytest.raises(KeyError):
    with ray_cluster.loopback_node_ip():
      assert ray_constants.ENABLE_RAY_CLUSTER is False
      raise KeyError("on the way out")
  assert ray_constants.ENABLE_RAY_CLUSTER == before
  with ray_cluster.loopback_node_ip(active=False):
    assert ray_constants.ENABLE_RAY_CLUSTER == before
  auth = importlib.import_module(ray_cluster.AUTH_SETUP_LOGGER)
  assert logging.getLogger(ray_cluster.AUTH_SETUP_LOGGER) is auth.logger
  level = auth.logger.level
  with ray_cluster.quiet_auth_notice():
    assert auth.logger.level == logging.ERROR
  assert auth.logger.level == level
  assert ray_cluster.temp_dir_kwargs("/tmp/t") == {"_temp_dir": "/tmp/t"}


def test_vllm_engine_reaches_the_worker_and_its_lm_head():
  calls = []
  head = types.SimpleNamespace()
  head.quant_method = types.SimpleNamespace(
      process_weights_after_loading=lambda layer: calls.append(layer))
  worker = types.SimpleNamespace(
      reload_weights=lambda weights_iterator: calls.append(
          list(weights_iterator)),
      model_runner=types.SimpleNamespace(
          get_model=lambda: types.SimpleNamespace(lm_head=head)))
  engine = types.SimpleNamespace(
      model_executor=types.SimpleNamespace(driver_worker=worker))
  llm = types.SimpleNamespace(llm_engine=engine)
  assert vllm_engine.engine_worker(llm) is worker
  vllm_engine.load_tensors(worker, iter([("w", 1)]))
  vllm_engine.reprocess_tied_lm_head(worker)
  assert calls == [[("w", 1)], head]
  vllm_engine.shutdown(llm)  # This engine has no shutdown: nothing to do.
  engine.shutdown = lambda: calls.append("shutdown")
  vllm_engine.shutdown(llm)
  assert calls[-1] == "shutdown"


def test_compat_hooks_exist_in_installed_tunix():
  for name in compat.REQUIRED_CLUSTER_MEMBERS:
    assert hasattr(compat.RLCluster, name), name
  from tunix.sft import peft_trainer  # pylint: disable=g-import-not-at-top

  buf = peft_trainer.MetricsBuffer(step=0, losses=[1.0, 3.0])
  assert hasattr(buf, "additional_metrics")
  fake = type("T", (), {"_prev_buffered_train_metrics": buf})()
  assert compat.last_train_metrics(fake) == {"loss": 2.0}


def _tiny(seed: int, **overrides):
  return models.create_tiny_model(models.tiny_qwen3_config(**overrides),
                                  seed=seed)


def test_is_sharing_weights_is_false_for_different_structures():
  two, three = _tiny(0), _tiny(0, num_layers=3)
  # Tunix's own version raises on models of different structure.
  try:
    stock = compat.tunix_is_sharing_weights(two, three)
  except ValueError:
    stock = "raised"
  assert stock == "raised"
  assert compat.is_sharing_weights(two, three) is False
  assert not compat.is_sharing_weights(two, _tiny(0))
  assert compat.is_sharing_weights(two, two)
  assert compat.is_sharing_weights(two, None) is False


def test_install_fixes_replaces_tunix_is_sharing_weights_until_undone():
  assert rl_utils.is_sharing_weights is compat.tunix_is_sharing_weights
  first = compat.install_fixes()
  second = compat.install_fixes()  # Nests.
  assert rl_utils.is_sharing_weights is compat.is_sharing_weights
  first.undo()
  first.undo()  # Idempotent: does not release the second holder.
  assert rl_utils.is_sharing_weights is compat.is_sharing_weights
  second.undo()
  assert rl_utils.is_sharing_weights is compat.tunix_is_sharing_weights
  with compat.install_fixes() as handle:
    assert handle.active
    assert rl_utils.is_sharing_weights is compat.is_sharing_weights
  assert not handle.active
  assert rl_utils.is_sharing_weights is compat.tunix_is_sharing_weights


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


def test_key_safe_memory_moves_is_undone():
  original = rl_utils.put_params_on_memory_kind
  with compat.key_safe_memory_moves():
    assert rl_utils.put_params_on_memory_kind is compat.put_on_memory_kind
  assert rl_utils.put_params_on_memory_kind is original


def test_hooked_sampler_routes_tunix_step_through_sample_step():
  from tunix.generate import sampler as sampler_lib  # pylint: disable=g-import-not-at-top

  assert issubclass(compat.HookedSampler, sampler_lib.Sampler)
  calls = []

  class Probe(compat.HookedSampler):

    def __init__(self):  # pylint: disable=super-init-not-called
      pass

    def sample_step(self, logits, eos, cache, sampler_state):
      calls.append((logits, eos, cache, sampler_state))
      return "state"

  # Tunix's decode loop calls the step with keywords.
  out = getattr(Probe(), "_sample")(logits=1, eos=2, cache=3, sampler_state=4)
  assert out == "state" and calls == [(1, 2, 3, 4)]
