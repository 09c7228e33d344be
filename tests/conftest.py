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

"""Gives single-process tests four CPU devices.

JAX reads these variables when its backend starts (first device query), not
at import, so they must be set before any test touches a device.
"""

import os
import pathlib
import sys

# Shared test helpers (launch_utils, example_runs, ...) live in tests/support.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "support"))

os.environ.setdefault("JAX_PLATFORMS", "cpu")
_DEVICE_FLAG = "--xla_force_host_platform_device_count"
if _DEVICE_FLAG not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (
      os.environ.get("XLA_FLAGS", "") + f" {_DEVICE_FLAG}=4"
  ).strip()
