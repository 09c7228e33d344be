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

"""A program that re-runs itself as local hosts (tests/test_launch.py).

`relaunching.py OUT` (by path, or `-m relaunching` with tests/support on
PYTHONPATH): outside a job it relaunches itself as 2 hosts x 3 devices with
OUT as a fresh file; each host appends "HOST DEVICES ARGV SPEC" to OUT, SPEC
being the module name it ran under (None when run by path). The name of
this file is part of what the test checks.
"""

import os
import sys

from tunix_mcjax import launch
from tunix_mcjax import runtime


def main() -> None:
  out = sys.argv[1]
  if not runtime.in_multi_controller_environment():
    sys.exit(launch.relaunch_as_local_hosts(
        sys.argv[1:], num_hosts=2, devices_per_host=3, timeout_s=60,
        fresh_files=[out, None], note="demo"))
  host = os.environ[runtime.ENV_HOST_ID]
  with open(out, "a") as f:
    f.write(f"{host} {os.environ[runtime.ENV_DEVICES_PER_HOST]}"
            f" {sys.argv[1:]} {__spec__.name if __spec__ else None}\n")


if __name__ == "__main__":
  main()
