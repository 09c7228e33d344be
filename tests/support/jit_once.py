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

"""Compiles and runs one tiny jitted program (tests/test_test_timings.py;
run by path, with the stats sitehook on PYTHONPATH):

  jit_once.py [ABSENT_MODULE...]

A process that uses JAX, for the sitehook to record; fails if any
ABSENT_MODULE named was imported (the hook must stay out of processes the
suite does not ask it to watch).
"""

import sys

import jax
import jax.numpy as jnp


def main(argv: list[str]) -> None:
  jax.jit(lambda x: x + 1)(jnp.ones(3)).block_until_ready()
  for name in argv[1:]:
    assert name not in sys.modules, f"{name} imported"


if __name__ == "__main__":
  main(sys.argv)
