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

"""Benchmark arms, workloads and the two modes (quick, full)."""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import tunix_mcjax

# The baseline: Tunix exactly as a Tunix user runs it.
BASELINE = "tunix-stock"
# Stock Tunix cluster with mcjax's placement-invariant engine: draws the same
# samples as the mcjax arms (the equivalence-style comparison).
INVARIANT = "tunix-invariant"
# Disaggregated (docs/disaggregated.md): trainer and rollout hosts apart.
DA_BACKEND = "mcjax_da"
# The registered cluster backends (tunix_mcjax.backends), not a copy.
BACKENDS = tuple(tunix_mcjax.backend_names())
# GSM8K's training split in the shared data folder beside the checkout.
GSM8K_TRAIN = (pathlib.Path(__file__).resolve().parents[3] / "shared" / "data"
               / "gsm8k" / "train.jsonl")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Arm:
  """One configuration of the GRPO job, run as its own launcher invocation.

  Attributes:
    name: label in the report.
    backend: "tunix" (Tunix's stock `RLCluster`, single controller, one
      process over all devices), "mcjax" (one process per host) or
      "mcjax_da" (disaggregated: trainer and rollout hosts apart, on Ray;
      docs/disaggregated.md).
    num_hosts: simulated hosts (1 for "tunix"; for "mcjax_da" trainer plus
      rollout hosts, each with `devices_per_host` devices).
    devices_per_host: fake CPU devices per host.
    profile: mcjax host optimizations ("base" or "optimized"); None for
      "tunix".
    stock_rollout: "tunix" only. True: Tunix's own vanilla rollout, which
      shares the actor's weights (no copy per step) and draws one random
      stream per batch, exactly as a Tunix user runs it (`--engine=vanilla`).
      False: mcjax's placement-invariant native engine inside the stock
      cluster (per-row sampling keys, one weight copy per step), which draws
      the same samples as the mcjax arms.
    max_seq_token_per_tpu: mcjax only: sequence packing into rows of this
      many tokens (`tunix_mcjax.packing`); None: unpacked.
    trainer_hosts: mcjax_da only: the trainer hosts (T).
    rollout_hosts: mcjax_da only: the rollout hosts (R, a multiple of T).
    max_staleness: mcjax_da only: K (0: synchronous).
    predicted_from: mcjax_da only: the colocated ("mcjax") arm of the same
      mode whose phase times the report feeds to the placement advisor to
      predict this arm's step time (None: no prediction).
  """

  name: str
  backend: str
  num_hosts: int
  devices_per_host: int
  profile: str | None = None
  stock_rollout: bool = False
  max_seq_token_per_tpu: int | None = None
  trainer_hosts: int | None = None
  rollout_hosts: int | None = None
  max_staleness: int | None = None
  predicted_from: str | None = None

  def __post_init__(self):
    if self.backend not in BACKENDS:
      raise ValueError(
          f"backend must be one of {BACKENDS}, got {self.backend}.")
    da_fields = (self.trainer_hosts, self.rollout_hosts, self.max_staleness)
    if self.backend == DA_BACKEND:
      self._check_da()
    elif any(x is not None for x in da_fields) or self.predicted_from:
      raise ValueError(
          f"Arm {self.name}: trainer_hosts, rollout_hosts, max_staleness and"
          f" predicted_from belong to backend {DA_BACKEND}; drop them or use"
          " that backend.")
    if self.num_hosts < 1 or self.devices_per_host < 1:
      raise ValueError("num_hosts and devices_per_host must be >= 1.")
    if self.backend == "tunix" and (self.num_hosts != 1 or self.profile):
      raise ValueError("The tunix arm is one process and has no profile.")
    if (self.backend in ("mcjax", DA_BACKEND)
        and self.profile not in ("base", "optimized")):
      raise ValueError(f"{self.backend} arm {self.name} needs a profile.")
    if self.stock_rollout and self.backend != "tunix":
      raise ValueError("stock_rollout is Tunix's own rollout: backend tunix.")
    if self.max_seq_token_per_tpu is not None and self.backend != "mcjax":
      raise ValueError(f"Arm {self.name}: packing (max_seq_token_per_tpu)"
                       " runs under mcjax only; use backend mcjax.")

  def _check_da(self) -> None:
    t, r, k = self.trainer_hosts, self.rollout_hosts, self.max_staleness
    if t is None or r is None or k is None:
      raise ValueError(
          f"{DA_BACKEND} arm {self.name} needs trainer_hosts, rollout_hosts"
          " and max_staleness.")
    if t < 1 or r < 1 or r % t:
      raise ValueError(
          f"{DA_BACKEND} arm {self.name}: rollout_hosts ({r}) must be a"
          f" positive multiple of trainer_hosts ({t}), both >= 1.")
    if k < 0:
      raise ValueError(f"{DA_BACKEND} arm {self.name}: max_staleness must be"
                       f" >= 0, got {k}.")
    if self.num_hosts != t + r:
      raise ValueError(
          f"{DA_BACKEND} arm {self.name}: num_hosts ({self.num_hosts}) must"
          f" be trainer_hosts + rollout_hosts = {t + r} (every host has"
          " devices_per_host devices).")
    if self.predicted_from == self.name:
      raise ValueError(f"Arm {self.name} cannot be predicted from itself;"
                       " name a colocated (mcjax) arm.")

  def describe(self) -> str:
    """One line for the report: what this arm runs."""
    if self.backend == "tunix":
      return ("Tunix RLCluster + " + (
          "its vanilla rollout sharing the actor's weights (stock)"
          if self.stock_rollout else
          "mcjax's placement-invariant engine (weight copy per step)"))
    if self.backend == DA_BACKEND:
      return (f"mcjax_da (Ray), {self.trainer_hosts} trainer +"
              f" {self.rollout_hosts} rollout host(s), max_staleness"
              f" {self.max_staleness}, profile {self.profile}")
    packed = ("" if self.max_seq_token_per_tpu is None else
              f", packed into rows of {self.max_seq_token_per_tpu} tokens")
    return (f"mcjax, {self.num_hosts} host(s), profile {self.profile}"
            + packed)

  @property
  def total_devices(self) -> int:
    return self.num_hosts * self.devices_per_host

  def job_flags(self) -> list[str]:
    if self.backend == DA_BACKEND:
      # The example's DA flags (every host gets devices_per_host devices);
      # it ignores --num_hosts under mcjax_da, so none is passed.
      return [f"--backend={self.backend}",
              f"--trainer_hosts={self.trainer_hosts}",
              f"--rollout_hosts={self.rollout_hosts}",
              f"--devices_per_host={self.devices_per_host}",
              f"--max_staleness={self.max_staleness}",
              f"--profile={self.profile}", "--engine=native"]
    flags = [f"--backend={self.backend}", f"--num_hosts={self.num_hosts}",
             f"--devices_per_host={self.devices_per_host}"]
    if self.profile:
      flags.append(f"--profile={self.profile}")
    flags.append("--engine=" + ("vanilla" if self.stock_rollout else "native"))
    if self.max_seq_token_per_tpu is not None:
      flags.append(f"--max_seq_token_per_tpu={self.max_seq_token_per_tpu}")
    return flags


@dataclasses.dataclass(frozen=True, kw_only=True)
class Workload:
  """The identical work every arm does (global sizes).

  Attributes:
    steps: batches per pass; the job runs them `passes` times and the
      report scores the last pass.
    passes: passes over the same batches (the protocol uses 2).
    batch_size: prompts per step.
    num_generations: samples per prompt.
    max_new_tokens: completion budget.
    learning_rate: Adam step size.
    seed: model, data and sampling seed.
    dataset: "toy" or "gsm8k:PATH".
    max_prompt_length: tokens the sampler pads prompts to.
    learner: Tunix's learner ("grpo", "dapo": token-mean, which packing
      needs; "drgrpo").
    skip_long_prompts: drop prompts longer than max_prompt_length from the
      dataset (GSM8K) instead of refusing them.
  """

  steps: int
  passes: int = 2
  batch_size: int = 16
  num_generations: int = 8
  max_new_tokens: int = 8
  learning_rate: float = 5e-3
  seed: int = 0
  dataset: str = "toy"
  max_prompt_length: int = 4
  learner: str = "grpo"
  skip_long_prompts: bool = False

  def __post_init__(self):
    if self.steps < 1 or self.passes < 1:
      raise ValueError("steps and passes must be >= 1.")

  def job_flags(self) -> list[str]:
    # Every field is a GrpoJobConfig field of the same name (checked by
    # tests/bench), hence a flag of examples/grpo_qwen3.py.
    return [f"--{f.name}={getattr(self, f.name)}"
            for f in dataclasses.fields(self)]

  def scored(self, step: int) -> bool:
    """Whether a (1-based) step belongs to the scored (last) pass."""
    return step > self.steps * (self.passes - 1)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MicroConfig:
  """Sizes of the micro-benchmarks."""

  layers: int = 28
  devices_per_host: int = 2
  repeats: int = 3
  rows: int = 32
  max_tokens: int = 32
  admission_prompts: int = 128
  admission_hosts: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchMode:
  """A benchmark mode: arms, their shared workload, micro-benchmarks."""

  name: str
  arms: tuple[Arm, ...]
  workload: Workload
  micro: MicroConfig | None
  arm_timeout_s: int = 900
  # Launches per arm (the paper's verdict needs 3); arms are interleaved
  # launch by launch so that drift in the machine's load hits all of them.
  launches: int = 1
  # Record a JAX profiler trace of one step per launch (the last step of the
  # first, unscored pass) for the step breakdown (`traces`).
  trace: bool = True

  def __post_init__(self):
    if self.launches < 1:
      raise ValueError(f"launches must be >= 1, got {self.launches}.")
    names = [a.name for a in self.arms]
    if len(set(names)) != len(names):
      raise ValueError(f"Arm names must be unique: {names}.")
    totals = {a.total_devices for a in self.arms}
    if len(totals) != 1:
      raise ValueError(f"Arms must have equal total devices, got {totals}.")
    w = self.workload
    by_name = {a.name: a for a in self.arms}
    for a in self.arms:
      if a.backend == DA_BACKEND:
        self._check_da_arm(a, by_name)
        continue
      prompts, rem = divmod(w.batch_size, a.num_hosts)
      if rem or (prompts * w.num_generations) % a.devices_per_host:
        raise ValueError(
            f"Arm {a.name}: batch {w.batch_size} x {w.num_generations} does"
            f" not divide over {a.num_hosts} hosts x {a.devices_per_host}"
            " devices."
        )

  def _check_da_arm(self, a: Arm, by_name: dict[str, Arm]) -> None:
    """A DA arm: the trainer hosts' split of the batch; its reference."""
    w = self.workload
    prompts, rem = divmod(w.batch_size, a.trainer_hosts)
    if rem or (prompts * w.num_generations) % a.devices_per_host:
      raise ValueError(
          f"Arm {a.name}: batch {w.batch_size} x {w.num_generations} does"
          f" not divide over {a.trainer_hosts} trainer hosts x"
          f" {a.devices_per_host} devices.")
    ref = by_name.get(a.predicted_from) if a.predicted_from else None
    # A reference left out (e.g. by --arms) gives no prediction, not an
    # error; one that is present must be a colocated run of equal hosts.
    if ref is not None and (ref.backend != "mcjax"
                            or ref.devices_per_host != a.devices_per_host):
      raise ValueError(
          f"Arm {a.name} is predicted from {ref.name}, which must be an"
          f" mcjax (colocated) arm with {a.devices_per_host} devices per"
          f" host; got {ref.backend} with {ref.devices_per_host}.")

  def as_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


def standard_arms(total_devices: int) -> tuple[Arm, ...]:
  """tunix-stock, tunix-invariant; mcjax base and optimized at 2 hosts;
  optimized at 1 and 4 hosts."""
  if total_devices % 4:
    raise ValueError("total_devices must be a multiple of 4.")
  return (
      Arm(name=BASELINE, backend="tunix", num_hosts=1,
          devices_per_host=total_devices, stock_rollout=True),
      Arm(name=INVARIANT, backend="tunix", num_hosts=1,
          devices_per_host=total_devices),
      Arm(name="mcjax-base", backend="mcjax", num_hosts=2,
          devices_per_host=total_devices // 2, profile="base"),
      Arm(name="mcjax-optimized", backend="mcjax", num_hosts=2,
          devices_per_host=total_devices // 2, profile="optimized"),
      Arm(name="mcjax-optimized-1host", backend="mcjax", num_hosts=1,
          devices_per_host=total_devices, profile="optimized"),
      Arm(name="mcjax-optimized-4hosts", backend="mcjax", num_hosts=4,
          devices_per_host=total_devices // 4, profile="optimized"),
  )


MODES = {
    # Under 10 minutes on a 2-core machine, start-up and compilation included.
    "quick": BenchMode(
        name="quick",
        arms=standard_arms(4),
        workload=Workload(steps=10, batch_size=16, num_generations=8,
                          max_new_tokens=8),
        micro=MicroConfig(layers=2, repeats=3, rows=32, max_tokens=32),
        arm_timeout_s=400,
    ),
    # The protocol's 20 batches, twice; the whole Qwen3-0.6B-shaped tree.
    "full": BenchMode(
        name="full",
        arms=standard_arms(8),
        workload=Workload(steps=20, batch_size=32, num_generations=16,
                          max_new_tokens=16),
        micro=MicroConfig(layers=28, repeats=5, rows=64, max_tokens=64),
        arm_timeout_s=3600,
        launches=3,
    ),
}


def packing_arms(total_devices: int, budget: int) -> tuple[Arm, ...]:
  """The same DAPO job on 2 hosts, unpacked and packed (`budget` tokens per
  packed row); the unpacked arm is the baseline of the pair."""
  return (
      Arm(name="mcjax-dapo", backend="mcjax", num_hosts=2,
          devices_per_host=total_devices // 2, profile="optimized"),
      Arm(name="mcjax-dapo-packed", backend="mcjax", num_hosts=2,
          devices_per_host=total_devices // 2, profile="optimized",
          max_seq_token_per_tpu=budget),
  )


# Packing on GSM8K prompts (char-level tokens of the tiny model: 196-987 per
# prompt, median ~345; those over 512 (8%) are dropped). Packed rows hold
# twice the unpacked row's width. Token-mean loss (DAPO), which packing
# needs; both arms run it. One device per host: K is rounded up to a host's
# data-parallel devices, and with 2 per host (8 rows each here) K = 4 rows
# of twice the width are exactly the unpacked slots (docs/benchmarks.md).
PACKING_PROMPT_LENGTH = 512
PACKING_NEW_TOKENS = 16
MODES["packing"] = BenchMode(
    name="packing",
    arms=packing_arms(
        2, budget=2 * (PACKING_PROMPT_LENGTH + PACKING_NEW_TOKENS)),
    workload=Workload(steps=4, batch_size=4, num_generations=4,
                      max_new_tokens=PACKING_NEW_TOKENS,
                      max_prompt_length=PACKING_PROMPT_LENGTH,
                      dataset=f"gsm8k:{GSM8K_TRAIN}", learner="dapo",
                      skip_long_prompts=True),
    micro=None,
    arm_timeout_s=900,
    launches=3,
)


def da_arms(devices_per_host: int, *, trainer_hosts: int = 1,
            rollout_hosts: int = 1) -> tuple[Arm, ...]:
  """Colocated mcjax-optimized vs DA at K = 0 and K = 1, equal devices.

  The DA arms split the colocated arm's hosts (T + R = its host count, the
  same devices per host), so the advisor's prediction from the colocated
  arm needs no scaling beyond its own split.
  """
  hosts = trainer_hosts + rollout_hosts
  co = Arm(name="mcjax-optimized", backend="mcjax", num_hosts=hosts,
           devices_per_host=devices_per_host, profile="optimized")
  return (co, *(
      Arm(name=f"mcjax-da-k{k}", backend=DA_BACKEND, num_hosts=hosts,
          devices_per_host=devices_per_host, profile="optimized",
          trainer_hosts=trainer_hosts, rollout_hosts=rollout_hosts,
          max_staleness=k, predicted_from=co.name)
      for k in (0, 1)))


# DA vs colocated on quick mode's workload and 4 devices: 1 trainer + 1
# rollout host x 2 devices against mcjax-optimized's 2 hosts x 2 devices.
# This split (rather than 1 + 3 hosts x 1 device) keeps each host's devices
# equal to the colocated arm's, so the advisor predicts it from that arm at
# its own host count (the paper's 1/2 share), and it runs 2 processes on the
# 2 shared cores instead of 4. No traces: DA arms are not traced (harness).
MODES["da"] = BenchMode(
    name="da",
    arms=da_arms(2),
    workload=MODES["quick"].workload,
    micro=None,
    arm_timeout_s=600,
    trace=False,
)

# Ratios reported besides "each arm vs the baseline": (baseline, other).
EXTRA_COMPARISONS = (
    (INVARIANT, "mcjax-optimized"),  # Same samples: the backend alone.
    ("mcjax-base", "mcjax-optimized"),  # What O1-O4 buy.
    ("mcjax-optimized-1host", "mcjax-optimized"),  # 1 -> 2 hosts.
    ("mcjax-optimized-1host", "mcjax-optimized-4hosts"),  # 1 -> 4 hosts.
    ("mcjax-da-k0", "mcjax-da-k1"),  # What one step of staleness buys.
)
