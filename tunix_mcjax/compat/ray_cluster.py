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

"""The private Ray names that keep a local head on loopback (da/ray_local).

`ray.init` turns a loopback node IP into the machine's routable address
unless Ray's cluster mode is off, which Ray reads from
RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER once, at import, into
`ray._private.ray_constants.ENABLE_RAY_CLUSTER`; `loopback_node_ip` turns it
off for one `ray.init` even when ray was imported before the variable was
set. `ray.init`'s temp dir is the private keyword `_temp_dir`; Ray's notice
that token authentication is on comes from a private module's logger. Each
has a row in `touch_points.TOUCH_POINTS` (ray 2.60). Upstream: a public
`node_ip_address`/`temp_dir` of `ray.init` that stays on loopback.

Importing this module does not import ray.
"""

from __future__ import annotations

from collections.abc import Iterator
import contextlib
import logging
from typing import Any

# The logger of Ray's token-authentication set-up (its start-up notice).
AUTH_SETUP_LOGGER = "ray._private.authentication.authentication_token_setup"


def temp_dir_kwargs(temp_dir: str) -> dict[str, Any]:
  """`ray.init` keyword arguments that put a local head's files in temp_dir."""
  return {"_temp_dir": temp_dir}


@contextlib.contextmanager
def loopback_node_ip(active: bool = True) -> Iterator[None]:
  """Keeps ray.init's node IP on loopback while the block runs.

  Args:
    active: False does nothing (a remote cluster keeps Ray's own choice).

  Yields:
    None; Ray's flag is restored on the way out, exceptions included.
  """
  if not active:
    yield
    return
  from ray._private import ray_constants  # pylint: disable=g-import-not-at-top

  saved = ray_constants.ENABLE_RAY_CLUSTER
  ray_constants.ENABLE_RAY_CLUSTER = False
  try:
    yield
  finally:
    ray_constants.ENABLE_RAY_CLUSTER = saved


@contextlib.contextmanager
def quiet_auth_notice() -> Iterator[None]:
  """Shows Ray's token-authentication set-up messages from ERROR up only."""
  auth_logger = logging.getLogger(AUTH_SETUP_LOGGER)
  level = auth_logger.level
  auth_logger.setLevel(logging.ERROR)
  try:
    yield
  finally:
    auth_logger.setLevel(level)
