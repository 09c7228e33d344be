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

"""What the prepared GPU run carries (scripts/device_wheels.py) and the
import check it makes there (scripts/bench_device.py). Downloading needs the
package index, so it is not run here; the record it reads is checked against
the lock file and this environment."""

import importlib.util
import json
import pathlib
import subprocess
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def _script(name):
  spec = importlib.util.spec_from_file_location(
      name, REPO_ROOT / "scripts" / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_the_record_matches_the_lock_file():
  # A lock bump without `device_wheels.py --record` would carry stale pins.
  wheels = _script("device_wheels")
  job = json.loads(wheels.JOB_FILE.read_text())
  lock = wheels.pinned()
  assert job["distributions"], "empty record"
  stale = {n: (v, lock.get(n)) for n, v in job["distributions"].items()
           if lock.get(n) != v}
  assert not stale, f"record differs from main.lock: {stale}; run --record"
  assert "google-tunix" in job["distributions"]
  assert "tunix.rl.grpo.grpo_learner" in job["modules"]


def test_what_is_carried_and_what_the_image_keeps():
  wheels = _script("device_wheels")
  job = {"distributions": {"jax": "1", "jaxlib": "1", "flax": "2",
                           "google-tunix": "3", "pyarrow": "4"}}
  # JAX is never fetched: the image's build has the CUDA plugin.
  assert wheels.to_carry(job, []) == {"flax": "2", "google-tunix": "3",
                                      "pyarrow": "4"}
  image = {"flax", "pyarrow", "google-tunix"}
  keep = wheels.use_image
  # Compiled wheels the image has are its own; pure ones are ours.
  assert keep("pyarrow-4-cp312-cp312-manylinux_2_28_x86_64.whl", image, [])
  assert not keep("pyarrow-4-cp312-cp312-manylinux_2_28_x86_64.whl", image,
                  ["pyarrow"])
  assert not keep("flax-2-py3-none-any.whl", image, [])
  assert not keep("zstandard-1-cp312-cp312-manylinux2014_x86_64.whl", image,
                  [])


def test_every_recorded_module_imports_with_the_device_probe():
  # The check bench_device.py makes on the GPU machine, run in this
  # environment: it must pass here, and it names the module that fails.
  bench = _script("bench_device")
  job = json.loads((REPO_ROOT / "requirements" / "device-job.json")
                   .read_text())
  ok = subprocess.run([sys.executable, "-c", bench._PROBE, *job["modules"]],  # pylint: disable=protected-access
                      capture_output=True, text=True, cwd=REPO_ROOT,
                      check=False)
  assert ok.returncode == 0, ok.stderr
  assert ok.stdout.startswith("jax ")
  bad = subprocess.run([sys.executable, "-c", bench._PROBE, "json",  # pylint: disable=protected-access
                        "no_such_module_xyz"], capture_output=True, text=True,
                       check=False)
  assert bad.returncode != 0
  assert "import no_such_module_xyz: ModuleNotFoundError" in bad.stderr
