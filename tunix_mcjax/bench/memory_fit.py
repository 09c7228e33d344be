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

"""What a colocated mcjax host holds, per device: does a model fit?

Every device of a host holds (docs/memory.md):

- its FSDP shard of the trainer state: parameters, Adam's two moments (in
  the parameters' dtype, as Tunix's optax.adam keeps them) and, during the
  train step, gradients: (1 + 2 + 1) x P x bytes / N, N = all devices;
  during the step also the all-gathered parameters, P x bytes x (1 - 1/N);
- any further copies the measurement found (`Calibration`'s extra copies);
- its shard of the reference model (same mesh): P x bytes / N;
- the rollout engine's weights: a full copy per device, or 1/tp of one
  with a tensor-parallel engine of width tp; and its KV cache;
- transients, the largest of: the train step's (float32 logits of its rows,
  [rows, seq or chunk, vocab], times a measured factor for the copies the
  log-softmax, entropy and their gradients make, plus activations, a
  measured bytes-per-token-per-layer-per-width factor), generation's KV
  cache, or publication's (its gather's temporaries: the new weights are
  written into the buffers of the old ones, `Calibration.publish_copies`).

Besides, in host memory ("pinned_host"), Tunix's RLCluster keeps a snapshot
of the actor's state, P x bytes / N per device (`Breakdown.host_snapshot`):
not on an accelerator's devices, but in the same memory on CPU.

The two transient factors are calibrated from the scale run's two arms
(unchunked and chunked log-probs; `calibrate`); everything else is
arithmetic. Imports no JAX.
"""

from __future__ import annotations

import dataclasses
from typing import Any

GIB = 2**30


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelShape:
  """A dense Qwen3's widths."""

  name: str
  layers: int
  embed: int
  mlp: int
  heads: int
  kv_heads: int
  head_dim: int
  vocab: int
  tied: bool

  def __post_init__(self):
    if min(self.layers, self.embed, self.mlp, self.heads, self.kv_heads,
           self.head_dim, self.vocab) < 1:
      raise ValueError(f"{self.name}: every width must be >= 1.")

  @property
  def params(self) -> int:
    """Parameter count (Tunix's Qwen3 layout, as `micro.qwen3_shapes`)."""
    d, h = self.embed, self.head_dim
    attn = d * self.heads * h * 2 + d * self.kv_heads * h * 2 + 2 * h
    layer = attn + 3 * d * self.mlp + 2 * d
    head = 0 if self.tied else d * self.vocab
    return self.vocab * d + head + self.layers * layer + d


QWEN3_0P6B = ModelShape(name="Qwen3-0.6B", layers=28, embed=1024, mlp=3072,
                        heads=16, kv_heads=8, head_dim=128, vocab=151_936,
                        tied=True)
QWEN3_1P7B = ModelShape(name="Qwen3-1.7B", layers=28, embed=2048, mlp=6144,
                        heads=16, kv_heads=8, head_dim=128, vocab=151_936,
                        tied=True)
QWEN3_8B = ModelShape(name="Qwen3-8B", layers=36, embed=4096, mlp=12288,
                      heads=32, kv_heads=8, head_dim=128, vocab=151_936,
                      tied=False)
MODELS = (QWEN3_0P6B, QWEN3_1P7B, QWEN3_8B)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Host:
  """One host: its accelerators and each one's memory (decimal GB)."""

  name: str
  devices: int
  device_gb: float

  @property
  def device_bytes(self) -> float:
    return self.device_gb * 1e9


HOSTS = (
    Host(name="v5e host (8 x 16 GB)", devices=8, device_gb=16),
    # As the issue states it; a v5p chip's published HBM is 95 GB, so this
    # row is the conservative (v4-like) case.
    Host(name="v5p host (4 x 32 GB)", devices=4, device_gb=32),
    Host(name="H200 (1 x 141 GB)", devices=1, device_gb=141),
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Workload:
  """Per device: rows trained and generated, their lengths, the chunk."""

  train_rows: int
  engine_rows: int
  seq: int
  kv_len: int
  chunk: int | None = None

  def __post_init__(self):
    if min(self.train_rows, self.engine_rows, self.seq, self.kv_len) < 1:
      raise ValueError("rows and lengths must be >= 1.")
    if self.chunk is not None and self.chunk < 1:
      raise ValueError(f"chunk must be >= 1, got {self.chunk}.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Calibration:
  """Measured factors of the train step's transients.

  Attributes:
    logits_copies: transient bytes per byte of one float32 logits tensor.
    act_bytes_per_token_layer_width: activation bytes per (token x layer x
      hidden width).
    sharded_extra_copies: further trainer-sharded parameter trees a host
      holds beside the trainer's (measured: live buffers of no known tree).
    engine_extra_copies: further engine-sized copies held after the first
      publication (measured likewise).
    publish_copies: engine-sized bytes a publication holds beside the
      engine's weights, per engine copy: 1 when the new weights arrive
      beside the old ones; with the old ones donated to the gather (the
      native engine), its temporaries (measured: XLA's plan).
    host_snapshot_copies: trainer-sharded copies of the actor in host
      memory: Tunix's RLCluster snapshots the actor's state once
      (`_anchor_policy_state`, "pinned_host"), 1.
    source: what they were measured on.
  """

  logits_copies: float
  act_bytes_per_token_layer_width: float
  sharded_extra_copies: float = 0.0
  engine_extra_copies: float = 0.0
  publish_copies: float = 1.0
  host_snapshot_copies: float = 1.0
  source: str = ""


# Used where no scale run calibrated the factors (tests, a first guess).
DEFAULT_CALIBRATION = Calibration(logits_copies=3.0,
                                  act_bytes_per_token_layer_width=8.0,
                                  source="default guess")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Breakdown:
  """Bytes per device (and per host) of one model on one configuration."""

  trainer_state: float
  grads: float
  reference: float
  engine: float
  kv_cache: float
  train_transient: float
  publish_transient: float
  devices_per_host: int
  # In host memory, not the device's (Tunix's policy snapshot); on CPU the
  # same memory.
  host_snapshot: float = 0.0

  @property
  def static(self) -> float:
    return self.trainer_state + self.reference + self.engine

  @property
  def peak_per_device(self) -> float:
    return self.static + max(self.grads + self.train_transient,
                             self.kv_cache, self.publish_transient)

  @property
  def peak_per_host(self) -> float:
    return self.peak_per_device * self.devices_per_host


def logits_bytes(shape: ModelShape, *, rows: int, seq: int,
                 chunk: int | None = None) -> int:
  """One float32 logits tensor of `rows` x (`seq` or `chunk`) positions."""
  positions = seq if chunk is None else min(chunk, seq)
  return 4 * rows * positions * shape.vocab


def host_memory(shape: ModelShape, *, workload: Workload, hosts: int,
                devices_per_host: int, param_bytes: int = 2,
                engine_tp: int = 1, reference: bool = True,
                calibration: Calibration = DEFAULT_CALIBRATION) -> Breakdown:
  """What each device of a host holds at the step's peaks.

  Args:
    shape: the model.
    workload: per-device rows and lengths (and the log-prob chunk).
    hosts: hosts the trainer's FSDP spans (N = hosts x devices_per_host).
    devices_per_host: accelerators per host.
    param_bytes: bytes per parameter (2: bfloat16; 4: float32).
    engine_tp: tensor-parallel width of the engine (1: a full copy per
      device).
    reference: whether the host holds a reference model (beta != 0).
    calibration: the train step's transient factors.
  """
  if hosts < 1 or devices_per_host < 1 or engine_tp < 1:
    raise ValueError("hosts, devices_per_host and engine_tp must be >= 1.")
  n = hosts * devices_per_host
  p = shape.params * param_bytes
  w = workload
  kv = (w.engine_rows * w.kv_len * shape.layers * 2 * shape.kv_heads
        * shape.head_dim * param_bytes) / engine_tp
  logits = logits_bytes(shape, rows=w.train_rows, seq=w.seq, chunk=w.chunk)
  act = w.train_rows * w.seq * shape.layers * shape.embed
  extra = (calibration.sharded_extra_copies * p / n
           + calibration.engine_extra_copies * p / engine_tp)
  return Breakdown(
      trainer_state=3 * p / n + extra, grads=p / n,
      reference=p / n if reference else 0.0,
      engine=p / engine_tp, kv_cache=kv,
      # Logits and activations, plus the parameters FSDP all-gathers for
      # the forward pass and holds for the backward one.
      train_transient=(calibration.logits_copies * logits
                       + calibration.act_bytes_per_token_layer_width * act
                       + p - p / n),
      # What the gather holds beside the engine's weights.
      publish_transient=calibration.publish_copies * p / engine_tp,
      devices_per_host=devices_per_host,
      host_snapshot=calibration.host_snapshot_copies * p / n)


def calibrate(shape: ModelShape, *, workload: Workload, hosts: int,
              devices_per_host: int, param_bytes: int,
              peak_unchunked: float, peak_chunked: float,
              chunk: int) -> Calibration:
  """The transient factors from two measured per-host train-step peaks.

  Both peaks are bytes above the process's own footprint (live buffers plus
  what the step added); the arms differ only in the log-prob chunk, so
  their difference is the logits' share and the rest the activations'.
  """
  base = host_memory(shape, workload=dataclasses.replace(workload,
                                                         chunk=None),
                     hosts=hosts, devices_per_host=devices_per_host,
                     param_bytes=param_bytes,
                     calibration=Calibration(
                         logits_copies=0, act_bytes_per_token_layer_width=0))
  # Base transient: the gathered parameters, without logits or activations.
  fixed = (base.static + base.grads + base.train_transient) * devices_per_host
  full = logits_bytes(shape, rows=workload.train_rows, seq=workload.seq)
  part = logits_bytes(shape, rows=workload.train_rows, seq=workload.seq,
                      chunk=chunk)
  per_device = devices_per_host
  copies = max(0.0, (peak_unchunked - peak_chunked) / per_device
               / (full - part))
  act = (workload.train_rows * workload.seq * shape.layers * shape.embed)
  rest = peak_chunked / per_device - fixed / per_device - copies * part
  return Calibration(
      logits_copies=copies,
      act_bytes_per_token_layer_width=max(0.0, rest / act),
      source=f"{shape.name}, {hosts} hosts x {devices_per_host} device(s),"
      f" chunk {chunk}")


def calibrate_from_xla(shape: ModelShape, *, rows: int, seq: int,
                       temp_unchunked: float, temp_chunked: float,
                       chunk: int, source: str = "") -> Calibration:
  """The transient factors from XLA's temporary bytes of the log-prob
  gradient (`bench.logps_xla`) of `rows` x `seq` tokens, unchunked and
  chunked: their difference is the logits' share, the rest activations."""
  full = logits_bytes(shape, rows=rows, seq=seq)
  part = logits_bytes(shape, rows=rows, seq=seq, chunk=chunk)
  copies = max(0.0, (temp_unchunked - temp_chunked) / (full - part))
  act = rows * seq * shape.layers * shape.embed
  return Calibration(
      logits_copies=copies,
      act_bytes_per_token_layer_width=max(
          0.0, (temp_chunked - copies * part) / act),
      source=source or f"XLA temporaries, {shape.name}, {rows} x {seq},"
      f" chunk {chunk}")


# The fit table's workload per device: 4 rows of 1,024 tokens trained
# (prompt 256 + completion 768), 16 rows generated with a 1,032-slot cache.
TABLE_WORKLOAD = Workload(train_rows=4, engine_rows=16, seq=1024,
                          kv_len=1032)
TABLE_CHUNK = 256


def fit_table(calibration: Calibration = DEFAULT_CALIBRATION,
              workload: Workload = TABLE_WORKLOAD,
              hosts: int = 1) -> list[dict[str, Any]]:
  """Per model x host: per-device GB unchunked / chunked, and whether it
  fits, with a full engine per device and with an engine over the host."""
  rows = []
  for shape in MODELS:
    for host in HOSTS:
      for tp in sorted({1, host.devices}):
        row: dict[str, Any] = {"model": shape.name, "host": host.name,
                               "hosts": hosts, "engine_tp": tp,
                               "device_gb": host.device_gb}
        for label, chunk in (("unchunked", None), ("chunked", TABLE_CHUNK)):
          b = host_memory(shape, workload=dataclasses.replace(
              workload, chunk=chunk), hosts=hosts,
                          devices_per_host=host.devices, engine_tp=tp,
                          calibration=calibration)
          row[label] = {
              "trainer_gb": (b.trainer_state + b.grads) / 1e9,
              "reference_gb": b.reference / 1e9,
              "engine_gb": b.engine / 1e9, "kv_gb": b.kv_cache / 1e9,
              "transient_gb": max(b.grads + b.train_transient, b.kv_cache,
                                  b.publish_transient) / 1e9,
              "peak_gb": b.peak_per_device / 1e9,
              "host_gb": b.peak_per_host / 1e9,
              "fits": b.peak_per_device <= host.device_bytes}
        rows.append(row)
  return rows


def render_table(rows: list[dict[str, Any]]) -> str:
  """The fit table as markdown (per device, decimal GB)."""
  lines = ["| model | host | engine tp | trainer shard + grads | reference |"
           " engine | KV | peak transient (unchunked / chunked) | per device"
           " (unchunked / chunked) | fits? |",
           "|---|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    u, c = r["unchunked"], r["chunked"]
    fits = {(True, True): "yes", (False, True): "chunked only",
            (False, False): "no", (True, False): "unchunked only"}[
                (u["fits"], c["fits"])]
    lines.append(
        f"| {r['model']} | {r['host']} | {r['engine_tp']} |"
        f" {u['trainer_gb']:.2f} | {u['reference_gb']:.2f} |"
        f" {u['engine_gb']:.2f} | {u['kv_gb']:.2f} |"
        f" {u['transient_gb']:.2f} / {c['transient_gb']:.2f} |"
        f" {u['peak_gb']:.1f} / {c['peak_gb']:.1f} of {r['device_gb']:g} |"
        f" {fits} |")
  return "\n".join(lines)
