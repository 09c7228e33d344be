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

"""Single-process start-ups of tunix_mcjax.runtime (tests/test_runtime.py;
run by path in a fresh interpreter, outside any job):

  runtime_start.py idempotent      initialize() twice returns the same info,
      a different config is refused; prints "SINGLE OK";
  runtime_start.py taken_port PORT  starts a 2-process job whose coordinator
      port PORT another process holds (fails, quickly);
  runtime_start.py after_jax_use   initialize() after JAX was used (fails).
"""

import sys

from tunix_mcjax import runtime


def idempotent() -> None:
  info = runtime.initialize(runtime.RuntimeConfig(local_device_count=3))
  assert info == runtime.RuntimeInfo(
      process_index=0, process_count=1, local_device_count=3,
      global_device_count=3, source="single"), info
  assert runtime.initialize() is info
  try:
    runtime.initialize(runtime.RuntimeConfig(local_device_count=2))
  except RuntimeError as e:
    assert "cannot be re-run" in str(e), e
  else:
    raise AssertionError("a different config was accepted")
  print("SINGLE OK")


def taken_port(port: int) -> None:
  runtime.initialize(runtime.RuntimeConfig(
      coordinator_address=f"127.0.0.1:{port}", num_processes=2,
      process_id=0, initialization_timeout_s=100))


def after_jax_use() -> None:
  import jax  # pylint: disable=g-import-not-at-top

  jax.devices()
  runtime.initialize(runtime.RuntimeConfig(local_device_count=2))


def main(argv: list[str]) -> None:
  if argv[1] == "idempotent":
    idempotent()
  elif argv[1] == "taken_port":
    taken_port(int(argv[2]))
  elif argv[1] == "after_jax_use":
    after_jax_use()
  else:
    sys.exit(f"unknown start-up {argv[1]!r}")


if __name__ == "__main__":
  main(sys.argv)
