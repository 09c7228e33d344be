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

"""Options of the vLLM engine, and the process set-up it needs.

`VllmEngineOptions` is what a user sets beyond Tunix's rollout config;
`import_vllm` sets the environment variables an in-process vLLM engine
needs on these machines (before vLLM reads them at import) and imports
vLLM and PyTorch, with a message naming the environment that has them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
import contextlib
import dataclasses
import glob
import os
import signal
from typing import Any

from absl import logging

from tunix_mcjax.compat import vllm_engine as compat_vllm
from tunix_mcjax.rules import vllm_keys

TRANSFERS = ("dlpack", "host")
# Where neither the options nor the rollout config set them: Tunix's default
# of rollout_vllm_hbm_utilization, and vLLM's concurrent sequences.
DEFAULT_GPU_MEMORY_UTILIZATION = vllm_keys.DEFAULT_HBM_UTILIZATION
DEFAULT_MAX_NUM_SEQS = 256
DTYPES = ("float32", "bfloat16", "float16")

# The engine core stays in this process: with it in a process of its own,
# tensors passed through collective_rpc fail to pickle (docs/platform-notes.md,
# "vLLM on CPU"); its executor's tp workers take them (`parallel_settings`).
_REQUIRED_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
# Defaults a user may override from the environment.
_DEFAULT_ENV = {
    "VLLM_HOST_IP": "127.0.0.1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    # vLLM logs a warm-up traceback (it renders a chat template without a
    # tokenizer) and per-request INFO lines; keep the console to errors.
    "VLLM_LOGGING_LEVEL": "ERROR",
    "VLLM_CONFIGURE_LOGGING": "1",
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class VllmEngineOptions:
  """Options of `VllmEngine` beyond Tunix's rollout config.

  Attributes:
    dtype: vLLM compute and staging dtype ("float32", "bfloat16",
      "float16"). None: `RolloutConfig.data_type` if set, else the policy's
      parameter dtype.
    keep_kv_cache: keep the KV-cache memory allocated across publications
      (see the module docstring); False needs vLLM sleep mode (GPU).
    enable_prefix_caching: share the KV of a prompt between its G samples.
      The prefix cache is reset after every publication either way.
    forbid_pad_token: never sample the pad id (unless it is a stop token).
      Tunix's learner and trainer treat a pad id inside a completion as
      padding (masked out of attention and loss), whereas vLLM attends to
      it; forbidding it keeps the sampled sequence exactly the one the
      trainer scores. The native engine has no such option; its sampler
      masks generated pad ids out of attention instead.
    transfer: "dlpack" (zero-copy JAX -> torch on the same device) or "host"
      (copy through NumPy; for setups where JAX and torch devices differ).
    max_model_len: longest prompt + completion; None: from the rollout
      config (its kv_cache_size, or max_prompt_length +
      max_tokens_to_generate if larger).
    max_num_seqs: vLLM's maximum number of concurrent sequences; None: the
      rollout config's rollout_vllm_max_num_seqs, else 256.
    gpu_memory_utilization: fraction of GPU memory vLLM may take (GPU only;
      the trainer shares the device: `device_memory`); None: the rollout
      config's rollout_vllm_hbm_utilization, else 0.2.
    cpu_kv_cache_space_gib: KV-cache size on CPU (sets
      VLLM_CPU_KVCACHE_SPACE unless already set).
    config_dir: where to write config.json; None: a temporary directory
      removed when the engine is closed.
    engine_kwargs: extra keyword arguments for `vllm.LLM` (override ours;
      Tunix's rollout_vllm_kwargs are its own vLLM rollout's, not these).
  """

  dtype: str | None = None
  keep_kv_cache: bool = True
  enable_prefix_caching: bool = True
  forbid_pad_token: bool = True
  transfer: str = "dlpack"
  max_model_len: int | None = None
  max_num_seqs: int | None = None
  gpu_memory_utilization: float | None = None
  cpu_kv_cache_space_gib: int = 1
  config_dir: str | None = None
  engine_kwargs: tuple[tuple[str, Any], ...] = ()

  def __post_init__(self):
    if self.dtype is not None and self.dtype not in DTYPES:
      raise ValueError(f"dtype must be one of {DTYPES} or None; got"
                       f" {self.dtype!r}.")
    if self.transfer not in TRANSFERS:
      raise ValueError(f"transfer must be one of {TRANSFERS}; got"
                       f" {self.transfer!r}.")
    if self.max_model_len is not None and self.max_model_len < 2:
      raise ValueError(f"max_model_len must be >= 2; got {self.max_model_len}.")
    if self.max_num_seqs is not None and self.max_num_seqs < 1:
      raise ValueError(f"max_num_seqs must be >= 1; got {self.max_num_seqs}.")
    if (self.gpu_memory_utilization is not None
        and not 0.0 < self.gpu_memory_utilization <= 1.0):
      raise ValueError("gpu_memory_utilization must be in (0, 1]; got"
                       f" {self.gpu_memory_utilization}.")
    if self.cpu_kv_cache_space_gib < 1:
      raise ValueError("cpu_kv_cache_space_gib must be >= 1; got"
                       f" {self.cpu_kv_cache_space_gib}.")
    if isinstance(self.engine_kwargs, dict):
      # Accept a dict for convenience; store it hashable (frozen dataclass).
      object.__setattr__(self, "engine_kwargs",
                         tuple(sorted(self.engine_kwargs.items())))
    for item in self.engine_kwargs:
      if not (isinstance(item, tuple) and len(item) == 2
              and isinstance(item[0], str)):
        raise ValueError("engine_kwargs must be a dict or (name, value)"
                         f" pairs; got {item!r}.")


def llm_settings(options: VllmEngineOptions, rollout_config: Any,
                 *, on_cpu: bool) -> dict[str, Any]:
  """`vllm.LLM` keyword arguments from Tunix's honoured rollout_vllm_* keys
  and `options` (which win where set); logs the set keys it does not use.

  Raises:
    ValueError: a rollout_vllm_* key the engine does not take is set
      (`rules.vllm_keys`, the same check the CLI makes before hosts start).
  """
  problem = vllm_keys.vllm_keys(rollout_config, prefix="RolloutConfig.")
  if problem is not None:
    raise ValueError(problem.message)
  unused = vllm_keys.unused_keys(rollout_config)
  if unused is not None:
    logging.warning("%s", unused)
  keys = vllm_keys.engine_settings(rollout_config)
  out: dict[str, Any] = dict(
      max_num_seqs=options.max_num_seqs or keys.get("max_num_seqs")
      or DEFAULT_MAX_NUM_SEQS)
  if "max_num_batched_tokens" in keys:
    out["max_num_batched_tokens"] = keys["max_num_batched_tokens"]
  if not on_cpu:
    out["gpu_memory_utilization"] = (
        options.gpu_memory_utilization or keys.get("gpu_memory_utilization")
        or DEFAULT_GPU_MEMORY_UTILIZATION)
  out.update(dict(options.engine_kwargs))
  return out


def parallel_settings(engine_tp: int) -> dict[str, Any]:
  """`vllm.LLM`'s parallelism from the engine mesh's tp axis size.

  Engine tp 1: one in-process worker (vLLM's "uni" executor), whose
  `reload_weights` the engine calls directly. Engine tp N > 1: vLLM's
  multiprocess executor with N workers (`tensor_parallel_size=N`), each
  reloaded through `LLM.collective_rpc` (the engine core stays in this
  process: `VLLM_ENABLE_V1_MULTIPROCESSING=0`).

  Raises:
    ValueError: engine_tp is not a positive integer.
  """
  if isinstance(engine_tp, bool) or not isinstance(engine_tp, int) or (
      engine_tp < 1):
    raise ValueError(f"VllmEngine's engine tp must be an integer >= 1, got"
                     f" {engine_tp!r}.")
  return dict(tensor_parallel_size=engine_tp,
              distributed_executor_backend="uni" if engine_tp == 1 else "mp")


def worker_environment(engine_tp: int, *, on_cpu: bool, rpc_dir: str,
                       environ: Mapping[str, str] | None = None,
                       cpus: Sequence[int] | None = None) -> dict[str, str]:
  """Environment variables vLLM's tp workers need, beyond the user's.

  The workers are spawned, never forked: this process runs JAX's threads.
  Their sockets go in `rpc_dir` (the engine's own directory, removed at
  close: vLLM leaves them behind). On CPU each worker binds its OpenMP
  threads to cores of its own (`VLLM_CPU_OMP_THREADS_BIND`, "0|1" for two);
  vLLM's automatic binding wants a NUMA node per worker. A variable the
  user set is kept.

  Args:
    engine_tp: vLLM's tensor_parallel_size.
    on_cpu: vLLM's platform is the CPU.
    rpc_dir: where vLLM's processes put their sockets.
    environ: the process environment (default `os.environ`).
    cpus: the cores this process may use (default its affinity).
  """
  environ = os.environ if environ is None else environ
  if engine_tp == 1:
    return {}
  # PYTHONFAULTHANDLER: a worker that `generate` aborts prints its stacks.
  out = {"VLLM_WORKER_MULTIPROC_METHOD": "spawn",
         "VLLM_RPC_BASE_PATH": rpc_dir, "PYTHONFAULTHANDLER": "1"}
  if on_cpu:
    cpus = sorted(os.sched_getaffinity(0) if cpus is None else cpus)
    if len(cpus) >= engine_tp:  # Contiguous cores per worker.
      per = len(cpus) // engine_tp
      groups = [cpus[i * per:(i + 1) * per] for i in range(engine_tp)]
    else:  # Fewer cores than workers: workers share them in turn.
      groups = [[cpus[i % len(cpus)]] for i in range(engine_tp)]
    out["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(
        ",".join(str(c) for c in g) for g in groups)
  return {k: v for k, v in out.items() if k not in environ}


# In an engine's own directory: the names its tp workers' shared memory
# takes (`note_shared_memory`).
SHM_NAMES_FILE = ".vllm_dist_names"


def note_shared_memory(engine_dir: str) -> None:
  """Records, once the engine has started, the names of its rendezvous
  files in `engine_dir` (workers that exit normally remove them)."""
  names = [e.name for e in os.scandir(engine_dir)
           if e.name.startswith("vllm_dist_")]
  with open(os.path.join(engine_dir, SHM_NAMES_FILE), "w") as f:
    f.write("".join(f"{name}\n" for name in names))


def remove_shared_memory(engine_dir: str,
                         shm_dir: str = "/dev/shm") -> list[str]:
  """Removes the CPU all-reduce segments of the engine whose own directory
  is `engine_dir`; returns their paths.

  vLLM's CPU workers at tp > 1 name them after the rendezvous file in the
  engine's temp dir (`<vllm_dist_uuid>-<group>-cpushm_<rank>`, 4 MiB each)
  and unlink them only on a normal exit: workers that the engine's shutdown
  timeout ends, or that lose their host to SIGKILL, leave them behind.
  Only names under this engine's own uuid (`note_shared_memory`) are
  touched.
  """
  try:
    with open(os.path.join(engine_dir, SHM_NAMES_FILE)) as f:
      idents = f.read().split()
  except OSError:
    return []
  removed = []
  for ident in idents:
    for path in glob.glob(os.path.join(shm_dir, glob.escape(ident) + "-*")):
      with contextlib.suppress(OSError):
        os.unlink(path)
        removed.append(path)
  return removed


def generate(llm: Any, inputs: Any, params: Any) -> Any:
  """`llm.generate(inputs, params)`. When vLLM gives up waiting for its tp
  workers (its execute-model timeout), the log first gets the file locks
  held on the machine (`held_file_locks`) and every worker thread's stack
  (`abort_workers`): where they hung, and on whose lock if they wait on
  one."""
  try:
    return llm.generate(inputs, params, use_tqdm=False)
  except TimeoutError:
    # Before the abort, which releases what the workers hold.
    locks = held_file_locks()
    if locks:
      logging.error("File locks held when vLLM timed out (a worker waiting"
                    " on one shows it in its stack):\n%s", "\n".join(locks))
    abort_workers()
    raise


def held_file_locks(proc: str = "/proc", limit: int = 20) -> list[str]:
  """One line per file lock held on this machine (`/proc/locks`, at most
  `limit`): the file and the processes that have it open, where their
  descriptors show it, and the process that took the lock. A lock outlives
  its taker in a child forked meanwhile: then the taker is "gone"."""
  held = {}  # (major, minor, inode) -> (kind, taker's pid)
  try:
    with open(os.path.join(proc, "locks")) as f:
      for fields in (line.split() for line in f):
        if len(fields) < 6 or fields[1] == "->":  # "->": a waiter.
          continue
        major, minor, inode = fields[5].split(":")
        held[(int(major, 16), int(minor, 16), int(inode))] = (
            fields[1], int(fields[4]))
  except (OSError, ValueError):
    return []
  open_in = {}  # key -> {(pid, path)}
  for fd in glob.glob(os.path.join(proc, "[0-9]*", "fd", "*")) if held else ():
    try:
      st = os.stat(fd)
      key = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
      if key in held:
        open_in.setdefault(key, set()).add(
            (int(fd.split(os.sep)[-3]), os.readlink(fd)))
    except (OSError, ValueError):  # Gone meanwhile.
      continue

  def command(pid: int) -> str:
    line = _cmdline(pid, proc)
    if line is None:
      return "gone"
    return line.replace(b"\0", b" ").decode(errors="replace")[:120]

  lines = []
  for key, (kind, taker) in sorted(held.items())[:limit]:
    holders = sorted(open_in.get(key, ()))
    paths = sorted({path for _, path in holders}) or [
        "inode {}:{}:{}".format(*key)]
    lines.append(
        f"{', '.join(paths)}: {kind} lock taken by pid {taker}"
        f" ({command(taker)}); open in "
        + (", ".join(f"pid {pid} ({command(pid)})" for pid, _ in holders)
           or "no process found"))
  return lines


def _cmdline(pid: int, proc: str = "/proc") -> bytes | None:
  """`pid`'s command line as the kernel keeps it; None once it is gone."""
  try:
    with open(os.path.join(proc, str(pid), "cmdline"), "rb") as f:
      return f.read()
  except OSError:
    return None


def abort_workers(pid: int | None = None) -> list[int]:
  """Sends SIGABRT to the vLLM workers among the children of `pid` (default
  this process); returns their pids. Started with PYTHONFAULTHANDLER
  (`worker_environment`), each prints every thread's Python stack, even
  from native code, then ends."""
  pid = os.getpid() if pid is None else pid
  children = set()
  for task in glob.glob(f"/proc/{pid}/task/*/children"):
    with contextlib.suppress(OSError), open(task) as f:
      children.update(int(c) for c in f.read().split())
  aborted = []
  for child in sorted(children):
    line = _cmdline(child)
    if line is None or not line.startswith(compat_vllm.WORKER_TITLE_PREFIX):
      continue
    try:
      os.kill(child, signal.SIGABRT)
    except OSError:  # Gone meanwhile.
      continue
    aborted.append(child)
  if aborted:
    logging.error("vLLM timed out waiting for its workers; aborted %s to"
                  " print their stacks (above/below in this log).", aborted)
  return aborted


def check_cpu_head_dim(head_dim: int) -> None:
  """Refuses a head_dim vLLM's CPU attention has no kernel for."""
  supported = compat_vllm.cpu_attention_head_sizes()
  if supported is None:  # Other vLLM versions: let it try.
    return
  if head_dim not in supported:
    raise ValueError(
        f"vLLM's CPU attention does not support head_dim={head_dim}; it"
        f" supports {supported}. Use a model config with one of those"
        " (e.g. models.tiny_qwen3_config(head_dim=32)).")


@contextlib.contextmanager
def environment(values: Mapping[str, str]) -> Iterator[None]:
  """`values` set in the process environment inside the block only."""
  saved = {k: os.environ.get(k) for k in values}
  os.environ.update(values)
  try:
    yield
  finally:
    for k, v in saved.items():
      if v is None:
        os.environ.pop(k, None)
      else:
        os.environ[k] = v


def import_vllm() -> Any:
  """Sets the process environment vLLM needs here, then imports it.

  Returns:
    (vllm, torch), the modules.
  """
  for name, value in _REQUIRED_ENV.items():
    if os.environ.get(name, value) != value:
      logging.warning("VllmEngine sets %s=%s (was %s): weight reloads need an"
                      " in-process engine.", name, value, os.environ[name])
    os.environ[name] = value
  for name, value in _DEFAULT_ENV.items():
    os.environ.setdefault(name, value)
  try:
    import torch  # pylint: disable=g-import-not-at-top
    import vllm  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(
        "The 'vllm' engine needs vLLM and PyTorch, which the main environment"
        " does not have (vLLM's CPU build needs Python 3.11). Use the vLLM"
        " environment: `make venv-vllm`, then run with .venv-vllm/bin/python"
        f" (see docs/environments.md). Import error: {e}"
    ) from e
  return vllm, torch
