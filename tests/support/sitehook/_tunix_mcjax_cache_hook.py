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

"""The suite's compilation cache serves every simulated host, not only host 0.

Test infrastructure only: loaded by sitecustomize.py (next to this file) when
TUNIX_MCJAX_TEST_SHARE_CPU_CACHE is set, which tests/conftest.py does while
the suite's cache is on. Two things of JAX 0.12 keep hosts 1..N-1 of a CPU
job from ever reading the cache (docs/testing.md):
- a CPU cache key holds the process's own topology fingerprint (its local
  devices and process index), so host 1's key for the global program all
  hosts share differs from host 0's; here a key over CPU devices holds
  this machine's CPU and the program's device layout over processes (each
  device's kind and process relative to the first), and leaves the device
  assignment out, as JAX's keys do on GPU (the executable is loaded onto
  the reader's devices): the same in every host, for the global programs
  and for each host's local ones (its engine's, on its own devices);
- only process 0 writes entries; here every host writes.
And one compile per program and run: a process that misses takes the key's
lock (a file in `<cache dir>.locks/`) and looks again before it compiles,
so processes that need the same program at the same time (a job's hosts,
the rollout hosts of a DA job, separate JAX programs of the same devices)
compile it once; the others read what the first wrote.
JAX's own `jax_share_binary_between_hosts` stays off: its first host
serializes what `_compile_and_write_cache` returns, which here may be an
executable read from the cache, and XLA:CPU (jaxlib 0.12) serializes a
deserialized executable without its kernels, so the other hosts got a
program that fails with "Function ... not found" (seen in a warm `make
test`). The lock already makes the other hosts read the first one's entry.
"""

import fcntl
import hashlib
import os
import platform
import warnings

ENV = "TUNIX_MCJAX_TEST_SHARE_CPU_CACHE"

_installed = []


def _machine_id() -> bytes:
  """What XLA's CPU compiles depend on besides the program: the CPU."""
  digest = hashlib.sha256(platform.machine().encode())
  try:
    with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
      for line in f:
        if line.startswith(("model name", "flags")):
          digest.update(line.encode())
        elif not line.strip():
          break  # the first processor's block is enough
  except OSError:
    pass
  return digest.digest()


def _lock_file(cache_dir, key: str) -> int | None:
  """An open lock file for `key` beside a local cache dir, or None."""
  if not cache_dir or "://" in str(cache_dir):
    return None
  try:
    locks = f"{os.path.abspath(cache_dir)}.locks"
    os.makedirs(locks, exist_ok=True)
    return os.open(os.path.join(locks, key), os.O_RDWR | os.O_CREAT, 0o644)
  except OSError:
    return None


def install(seconds=None) -> None:
  """Patches JAX's key and write rule for CPU programs, once per process."""
  del seconds
  if _installed:
    return
  # pylint: disable=g-import-not-at-top
  from jax._src import cache_key
  from jax._src import compilation_cache
  from jax._src import compiler
  from jax._src import config
  from jax._src import distributed
  from jax._src import monitoring
  # pylint: enable=g-import-not-at-top

  machine = _machine_id()
  hash_accelerator_config = cache_key._hash_accelerator_config  # pylint: disable=protected-access
  hash_compile_options = cache_key._hash_serialized_compile_options  # pylint: disable=protected-access
  cache_write = compiler._cache_write  # pylint: disable=protected-access

  def shared_hash(hash_obj, accelerators):
    devices = list(accelerators.flat)
    if not devices or any(d.platform != "cpu" for d in devices):
      return hash_accelerator_config(hash_obj, accelerators)
    hash_obj.update(machine)
    first = min(d.process_index for d in devices)
    for d in devices:
      hash_obj.update(f"{d.device_kind}|{d.process_index - first};".encode())
    return None

  def hash_options(hash_obj, compile_options_obj,
                   strip_device_assignment=False):
    del strip_device_assignment  # Always, as JAX does on GPU.
    return hash_compile_options(hash_obj, compile_options_obj,
                                strip_device_assignment=True)

  def write_every_host(key, compile_time_secs, module_name, backend,
                       executable):
    if not distributed.global_state.process_id:
      return cache_write(key, compile_time_secs, module_name, backend,
                         executable)
    # JAX writes from process 0 only; the others' entries go in here.
    if compile_time_secs < config.persistent_cache_min_compile_time_secs.value:
      return None
    try:
      compilation_cache.put_executable_and_time(
          key, module_name, executable, backend, int(compile_time_secs))
    except Exception as ex:  # pylint: disable=broad-exception-caught
      warnings.warn(f"Error writing persistent compilation cache entry for"
                    f" '{module_name}': {type(ex).__name__}: {ex}")
    return None

  compile_and_write = compiler._compile_and_write_cache  # pylint: disable=protected-access

  def compile_once(backend, computation, executable_devices, compile_options,
                   host_callbacks, module_name, key):
    # A miss: one process of the suite compiles a key at a time, and one
    # that waited reads what the other wrote instead of compiling it again.
    lock = _lock_file(config.compilation_cache_dir.value, key)
    try:
      if lock is not None:
        fcntl.flock(lock, fcntl.LOCK_EX)
        executable, _ = compiler._cache_read(  # pylint: disable=protected-access
            module_name, key, compile_options, backend, executable_devices,
            host_callbacks)
        if executable is not None:
          monitoring.record_event("/jax/compilation_cache/cache_hits")
          return executable
      return compile_and_write(backend, computation, executable_devices,
                               compile_options, host_callbacks, module_name,
                               key)
    finally:
      if lock is not None:
        os.close(lock)  # releases the lock

  cache_key._hash_accelerator_config = shared_hash  # pylint: disable=protected-access
  cache_key._hash_serialized_compile_options = hash_options  # pylint: disable=protected-access
  compiler._cache_write = write_every_host  # pylint: disable=protected-access
  compiler._compile_and_write_cache = compile_once  # pylint: disable=protected-access
  _installed.append(True)


def start() -> None:
  """sitecustomize's entry point; never raises."""
  try:
    import _tunix_mcjax_jax_watch  # pylint: disable=g-import-not-at-top

    _tunix_mcjax_jax_watch.after_jax_import(install)
  except Exception:  # pylint: disable=broad-exception-caught
    pass
