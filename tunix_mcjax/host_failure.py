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

"""How a host of a multi-process job ends on an error it did not expect.

A host that raises keeps running JAX's exit handler, which waits at a
shutdown barrier for every other host: up to JAX's heartbeat timeout (about
100 s) when another host died, five minutes when the others wait in a
collective for this one, and then aborts with a page of C++ logs. On a
cluster no launcher stops the hosts sooner. So a host ends at once instead
(`launch.exit_host`), after saying why: when a collective failed because
another host went away (its connection reset or closed: that host died or
was cut off), one line naming the peer's address as the collective library
reported it; any other error with its traceback.
"""

from __future__ import annotations

import re
import socket
import sys
import traceback
from typing import NoReturn

from tunix_mcjax import launch

# A collective whose peer went away, as gloo (CPU) and NCCL (GPU) report it,
# and the address in the message (gloo: "[10.0.0.2]:52417").
_LOST_PEER = re.compile(
    r"(Connection reset by peer|Connection closed by peer|Broken pipe"
    r"|remote process exited|NCCL error.*(remote|unhandled system error))",
    re.IGNORECASE)
_PEER_ADDRESS = re.compile(r"\[([0-9a-fA-F:.]+)\]:(\d+)")


def lost_peer(error: BaseException) -> str | None:
  """'the host at ADDR:PORT' (or 'another host') when `error` is a
  collective that failed because its peer went away; else None."""
  text = str(error)
  if not _LOST_PEER.search(text):
    return None
  match = _PEER_ADDRESS.search(text)
  if match is None:
    return "another host"
  return f"the host at {match.group(1)}:{match.group(2)}"


def _describe(error: BaseException) -> str:
  text = " ".join(str(error).split())
  return text if len(text) <= 300 else text[:300] + "..."


def end_host(error: BaseException, *, program: str,
             host_index: int | None) -> NoReturn:
  """Reports `error` and ends this host at once (exit status 1).

  Args:
    error: what the host raised.
    program: the entry point's name, as its error lines start.
    host_index: this host's process index (None: not known yet).
  """
  host = socket.gethostname()
  who = f"host {host_index} ({host})" if host_index is not None else host
  peer = lost_peer(error)
  if peer is not None:
    print(f"{program}: error: {who}: a collective lost {peer}"
          f" ({_describe(error)}): it died or was cut off from this host;"
          " this host stops too.", file=sys.stderr, flush=True)
  else:
    traceback.print_exception(error, file=sys.stderr)
    print(f"{program}: error: {who} failed ({type(error).__name__}); it"
          " stops at once instead of waiting for the other hosts at JAX's"
          " shutdown barrier.", file=sys.stderr, flush=True)
  launch.exit_host(1)


def host_index() -> int | None:
  """This process's index in its multi-process JAX job, or None outside
  one (JAX not imported or not distributed)."""
  jax = sys.modules.get("jax")
  if jax is None or not jax.distributed.is_initialized():
    return None
  return jax.process_index()
