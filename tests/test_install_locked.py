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

"""The environment installer (scripts/install_locked.py): uv gets pip's
index settings, read through the real `pip config list`."""

import os
import sys

import repo_scripts


def _script():
  return repo_scripts.load("install_locked")


def test_uv_reads_the_index_settings_pip_uses(tmp_path, monkeypatch):
  conf = tmp_path / "pip.conf"
  conf.write_text(
      "[global]\n"
      "index-url = https://global.example/simple\n"
      "extra-index-url = file:///a/simple file:///b/simple\n"
      "cert = /etc/some-ca.pem\n"
      "timeout = 99\n"
      "[install]\n"
      "index-url = https://install.example/simple\n")
  for name in list(os.environ):
    if name.startswith("PIP_"):
      monkeypatch.delenv(name)
  monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
  # The environment overrides the files, as it does for pip.
  monkeypatch.setenv("PIP_FIND_LINKS", "/opt/local-wheels")
  installer = _script()
  config = installer.pip_config(sys.executable)
  args, env = installer.uv_arguments(
      config, ["--no-cache-dir", "--extra-index-url", "https://torch/cpu"])
  assert args == [
      "--index-strategy", "unsafe-best-match",
      "--index-url", "https://install.example/simple",
      "--extra-index-url", "file:///a/simple",
      "--extra-index-url", "file:///b/simple",
      "--find-links", "/opt/local-wheels",
      "--no-cache", "--extra-index-url", "https://torch/cpu"]
  assert env == {"SSL_CERT_FILE": "/etc/some-ca.pem", "UV_HTTP_TIMEOUT": "99"}


def test_no_index_stays_offline(tmp_path, monkeypatch):
  for name in list(os.environ):
    if name.startswith("PIP_"):
      monkeypatch.delenv(name)
  monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
  monkeypatch.setenv("PIP_NO_INDEX", "1")
  installer = _script()
  args, env = installer.uv_arguments(installer.pip_config(sys.executable), [])
  assert "--no-index" in args and "--index-url" not in args
  assert not env
