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

"""Checks of MaxText's patched RL entry point
(tests/maxtext/test_maxtext_patching.py; run by path, the patched copy, or
the environment's maxtext, first on PYTHONPATH):

  maxtext_patch_checks.py import_train_rl
      imports train_rl; prints whether tpu_inference was loaded and its file;
  maxtext_patch_checks.py validate CASES_JSON
      validate_rl_cluster_config on each case (a JSON list of config field
      overrides): one "OK" or "ERR <message>" line each, then the module
      of the mcjax cluster factory ("FACTORY <module>");
  maxtext_patch_checks.py backend_before_jax YML
      rl_cluster_backend_from_args for a config file, an override, a
      missing file and a default; then whether a JAX backend was started.
"""

import json
import sys
import types

import maxtext.trainers.post_train.rl.train_rl as t


def import_train_rl() -> None:
  print("tpu_inference" in sys.modules, t.__file__)


def validate(cases: list[dict[str, object]]) -> None:
  def cfg(**kw):
    base = dict(rl_cluster_backend="tunix", use_pathways=True,
                rl_rollout_engine="vllm")
    base.update(kw)
    return types.SimpleNamespace(**base)

  for kw in cases:
    try:
      t.validate_rl_cluster_config(cfg(**kw))
      print("OK")
    except ValueError as e:
      print("ERR", str(e).replace("\n", " "))
  print("FACTORY", t.get_rl_cluster_factory("mcjax").__module__)


def backend_before_jax(yml: str) -> None:
  # JAX imported (as by a job's script), but no backend started.
  import jax  # pylint: disable=g-import-not-at-top

  del jax
  print(t.rl_cluster_backend_from_args(["", yml]))
  print(t.rl_cluster_backend_from_args(["", yml, "rl_cluster_backend=tunix"]))
  print(t.rl_cluster_backend_from_args(["", "missing.yml"], {}))
  print(t.rl_cluster_backend_from_args([""], {"rl_cluster_backend": "x"}))
  # Reading the name must not start a JAX backend.
  from jax._src import xla_bridge  # pylint: disable=g-import-not-at-top

  print(xla_bridge.backends_are_initialized())


def main(argv: list[str]) -> None:
  if argv[1] == "import_train_rl":
    import_train_rl()
  elif argv[1] == "validate":
    validate(json.loads(argv[2]))
  elif argv[1] == "backend_before_jax":
    backend_before_jax(argv[2])
  else:
    sys.exit(f"unknown check {argv[1]!r}")


if __name__ == "__main__":
  main(sys.argv)
