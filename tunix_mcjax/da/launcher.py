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

"""Starts and supervises a disaggregated job on Ray.

The job's driver (the example, on the machine where it is started) starts a
Ray session (`ray_local`: locally a head bound to 127.0.0.1), then:

1. R rollout hosts: Ray actors running `rollout_host.RolloutHost`, each a
   process with its own devices (locally `devices_per_host` fake CPU
   devices), named so that trainer hosts find them;
2. T trainer hosts: Ray actors that each run the GRPO job
   (`recipes.grpo_job.run`, backend "mcjax_da") as one process of the
   trainers' multi-controller JAX program (`jax.distributed` over the
   trainer processes only, coordinator on loopback);
3. waits for the trainers; the first failure of any actor ends the job: every
   actor is killed and Ray is shut down, and the error names the host.

Ray is the only cluster manager here: no process of ours listens or
schedules.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from tunix_mcjax import launch
from tunix_mcjax.da import options as options_lib
from tunix_mcjax.da import ray_local
from tunix_mcjax.da import rollout_host
from tunix_mcjax.da import trainer_host

_POLL_S = 0.5
# Restarts Ray grants one rollout host over the job.
ROLLOUT_RESTARTS = 3


def _log(message: str) -> None:
  print(f"[da] {message}", file=sys.stderr, flush=True)


def _rollout_env(devices: int) -> dict[str, str]:
  return {
      "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
      "JAX_PLATFORMS": "cpu",
      "PYTHONUNBUFFERED": "1",
  }


def run_local(job: Any, *, devices_per_host: int, timeout_s: float,
              session: ray_local.RaySessionConfig | None = None
              ) -> dict[str, Any]:
  """Runs `job` (backend "mcjax_da") on this machine; returns host 0's summary.

  Raises:
    RuntimeError: naming the host that failed (its traceback is printed by
      Ray above), or the timeout.
  """
  import ray  # pylint: disable=g-import-not-at-top

  da = job.da_options()
  total = da.trainer_hosts + da.rollout_hosts
  session = session or ray_local.RaySessionConfig(num_cpus=total,
                                                  namespace=da.namespace)
  t0 = time.perf_counter()
  with ray_local.RaySession(session):
    _log(f"Ray up in {time.perf_counter() - t0:.1f} s; starting"
         f" {da.rollout_hosts} rollout hosts and {da.trainer_hosts} trainer"
         f" hosts x {devices_per_host} CPU devices (max_staleness"
         f" {da.max_staleness})")
    actor_opts = dict(num_cpus=0, namespace=da.namespace)
    rollout_cls = ray.remote(rollout_host.RolloutHost)
    rollouts = [
        rollout_cls.options(
            name=f"{options_lib.ROLLOUT_ACTOR_PREFIX}{i}",
            runtime_env={"env_vars": _rollout_env(devices_per_host)},
            # A crashed rollout host is restarted; the trainer host re-issues
            # its rows (`remote_engine.RolloutLink`).
            max_restarts=ROLLOUT_RESTARTS,
            **actor_opts,
        ).remote(job, i)
        for i in range(da.rollout_hosts)
    ]
    _wait_all([r.info.remote() for r in rollouts], timeout_s=timeout_s,
              what="rollout hosts to build their engines",
              names=[f"rollout host {i}" for i in range(da.rollout_hosts)])
    coordinator = f"{launch.LOOPBACK}:{launch.free_port()}"
    trainer_cls = ray.remote(trainer_host.TrainerHost)
    trainers = [
        trainer_cls.options(
            runtime_env={"env_vars": launch.host_env(
                {"PYTHONUNBUFFERED": "1"}, coordinator=coordinator,
                num_hosts=da.trainer_hosts, host_id=i,
                devices_per_host=devices_per_host)},
            # A trainer host that dies ends the job (resume: checkpoints).
            max_restarts=0,
            **actor_opts,
        ).remote()
        for i in range(da.trainer_hosts)
    ]
    summaries = _wait_all(
        [t.run.remote(job) for t in trainers], timeout_s=timeout_s,
        what="the trainer hosts to finish the job",
        names=[f"trainer host {i}" for i in range(da.trainer_hosts)])
  return summaries[0]


def _wait_all(refs: list[Any], *, timeout_s: float, what: str,
              names: list[str]) -> list[Any]:
  """Results of every ref; the first failure or the timeout is an error."""
  import ray  # pylint: disable=g-import-not-at-top

  index = {ref: i for i, ref in enumerate(refs)}
  results: list[Any] = [None] * len(refs)
  pending = list(refs)
  deadline = time.monotonic() + timeout_s
  while pending:
    left = deadline - time.monotonic()
    if left <= 0:
      raise RuntimeError(
          f"Timed out after {timeout_s:.0f} s waiting for {what}:"
          f" {[names[index[r]] for r in pending]} did not finish."
      )
    ready, pending = ray.wait(pending, num_returns=1,
                              timeout=min(_POLL_S, left))
    for ref in ready:
      try:
        results[index[ref]] = ray.get(ref)
      except Exception as e:  # pylint: disable=broad-exception-caught
        raise RuntimeError(
            f"{names[index[ref]]} failed while waiting for {what}:"
            f" {type(e).__name__}: {_last_line(e)}"
        ) from e
  return results


def _last_line(e: BaseException) -> str:
  text = str(e).strip().splitlines()
  return text[-1] if text else ""
