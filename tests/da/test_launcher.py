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

"""The DA launcher's actor environment (tunix_mcjax/da/launcher.py)."""

from tunix_mcjax.da import launcher


def test_actor_env_keeps_the_users_xla_flags(monkeypatch):
  # Ray actors do not inherit the driver's environment, so the launcher
  # passes XLA_FLAGS itself; it used to drop every flag but the device count.
  monkeypatch.setenv(
      "XLA_FLAGS",
      "--xla_backend_optimization_level=0"
      " --xla_force_host_platform_device_count=8")
  env = launcher._host_env(2)  # pylint: disable=protected-access
  assert env["XLA_FLAGS"] == (
      "--xla_backend_optimization_level=0"
      " --xla_force_host_platform_device_count=2")
