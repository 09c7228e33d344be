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

"""`bench --mode=scale`: memory of a Qwen3-0.6B GRPO job at real size.

One launch per arm (log-probs unchunked, then chunked), each a 2-host
launcher invocation of `scale_job` running `recipes.grpo_job` on a
Qwen3-0.6B-shaped random bf16 model with the real vocabulary (151,936) and
the native engine. Each host reports its peak resident memory, the peak per
step phase, its largest live buffers, the step records (phases, publication
bytes) and publication vs the all-gather floor; `memory_fit` turns the
measured breakdown into per-host predictions for other models and hosts.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
import time
from typing import Any

from tunix_mcjax.bench import harness
from tunix_mcjax.bench import memory_fit

# tiny_qwen3_config overrides: Qwen3-0.6B (memory_fit.QWEN3_0P6B).
QWEN3_0P6B_MODEL = dict(
    num_layers=28, vocab_size=151_936, embed_dim=1_024, hidden_dim=3_072,
    num_heads=16, head_dim=128, num_kv_heads=8, use_tied_embedding=True)
# A small stand-in of the same code path (the machinery's test).
TINY_MODEL = dict(num_layers=2, vocab_size=4_096, embed_dim=64,
                  hidden_dim=128, num_heads=4, head_dim=16, num_kv_heads=2,
                  use_tied_embedding=True)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScaleConfig:
  """The scale run: model shape, hosts, global GRPO sizes, arms.

  Attributes:
    name: label in the report.
    model: `tiny_qwen3_config` overrides (the shape; random init).
    num_hosts: simulated hosts.
    devices_per_host: CPU devices per host. On CPU every local device holds
      its own replica of the engine's weights, so each one adds a full
      bf16 copy of the model to the host's memory.
    steps: GRPO steps.
    batch_size: global prompts per step.
    num_generations: samples per prompt.
    max_new_tokens: completion length (every completion of a random model
      runs to the cap).
    max_prompt_length: prompt width.
    dtype: parameter and activation dtype.
    chunk_sizes: one arm per entry: None = Tunix's unchunked log-probs,
      N = `--logps_chunk_size=N`.
    floor_repeats: timed repeats of the publication floor.
    timeout_s: per arm.
  """

  name: str
  model: dict[str, Any]
  num_hosts: int = 2
  devices_per_host: int = 1
  steps: int = 2
  batch_size: int = 2
  num_generations: int = 4
  max_new_tokens: int = 64
  max_prompt_length: int = 8
  dtype: str = "bfloat16"
  # KL weight: != 0 gives each host a reference model (Tunix's default is
  # 0.04; `bench --mode=scale --beta=0.04`). 0 by default: the 0.6B run's
  # 2 hosts peak at 16.9 GiB together without one, 19.2 GiB with one.
  beta: float = 0.0
  chunk_sizes: tuple[int | None, ...] = (None, 16)
  floor_repeats: int = 2
  timeout_s: int = 1800

  def __post_init__(self):
    if self.num_hosts < 1 or self.devices_per_host < 1 or self.steps < 1:
      raise ValueError("num_hosts, devices_per_host and steps must be >= 1.")
    rows = self.batch_size * self.num_generations
    if self.batch_size % self.num_hosts or rows % (
        self.num_hosts * self.devices_per_host):
      raise ValueError(
          f"batch {self.batch_size} x {self.num_generations} does not divide"
          f" over {self.num_hosts} hosts x {self.devices_per_host} devices.")
    if not self.chunk_sizes:
      raise ValueError("chunk_sizes needs at least one arm.")

  @property
  def rows_per_host(self) -> int:
    return self.batch_size * self.num_generations // self.num_hosts

  def arm_name(self, chunk: int | None) -> str:
    return "unchunked" if chunk is None else f"chunked-{chunk}"

  def job(self, chunk: int | None, metrics: pathlib.Path) -> dict[str, Any]:
    """GrpoJobConfig fields of one arm."""
    return dict(
        backend="mcjax", engine="native", model="tiny", dataset="toy",
        steps=self.steps, batch_size=self.batch_size,
        num_generations=self.num_generations,
        max_new_tokens=self.max_new_tokens,
        max_prompt_length=self.max_prompt_length, dtype=self.dtype,
        mesh="fsdp", profile="optimized", logps_chunk_size=chunk,
        beta=self.beta,
        metrics_out=str(metrics), seed=0)

  def shape(self) -> memory_fit.ModelShape:
    m = self.model
    return memory_fit.ModelShape(
        name=self.name, layers=m["num_layers"], embed=m["embed_dim"],
        mlp=m["hidden_dim"], heads=m["num_heads"], kv_heads=m["num_kv_heads"],
        head_dim=m["head_dim"], vocab=m["vocab_size"],
        tied=m["use_tied_embedding"])


SCALE = ScaleConfig(name="Qwen3-0.6B", model=QWEN3_0P6B_MODEL)
SCALE_TINY = ScaleConfig(name="tiny", model=TINY_MODEL, max_new_tokens=16,
                         beta=0.04, chunk_sizes=(None, 4), timeout_s=600)


def load_hosts(folder: pathlib.Path, num_hosts: int) -> list[dict[str, Any]]:
  """Each host's result; for a host that did not finish (killed for
  memory, say), what its snapshot trail and the step records show."""
  hosts = []
  metrics = folder / "metrics.jsonl"
  records = ([json.loads(l) for l in metrics.read_text().splitlines() if l]
             if metrics.exists() else [])
  for i in range(num_hosts):
    done = folder / f"host{i}.json"
    if done.exists():
      hosts.append(json.loads(done.read_text()))
      continue
    trail = folder / f"host{i}.snapshots.jsonl"
    if not trail.exists():
      continue
    snaps = [json.loads(l) for l in trail.read_text().splitlines() if l]
    if not snaps:
      continue
    peaks = snaps[-1]["phase_peak_rss_bytes"]
    hosts.append({
        "host": i, "finished": False, "snapshots": snaps, "records": records,
        "baseline_rss_bytes": None,
        "peak_rss_bytes": max([*peaks.values(), *(s["rss_bytes"]
                                                  for s in snaps)]),
        "phase_peak_rss_bytes": peaks, "publication": None})
  return hosts


def run_arm(cfg: ScaleConfig, chunk: int | None,
            out: pathlib.Path) -> dict[str, Any]:
  """One launch of the scale job; its hosts' results."""
  folder = out / cfg.arm_name(chunk)
  folder.mkdir(parents=True, exist_ok=True)
  for f in [*folder.glob("host*.json"), *folder.glob("host*.jsonl")]:
    f.unlink()
  spec = {"job": cfg.job(chunk, folder / "metrics.jsonl"),
          "model": cfg.model, "floor_repeats": cfg.floor_repeats}
  (folder / "spec.json").write_text(json.dumps(spec, indent=1))
  cmd = [sys.executable, "-m", "tunix_mcjax.launch", "--num_hosts",
         str(cfg.num_hosts), "--devices_per_host", str(cfg.devices_per_host),
         "--timeout", str(cfg.timeout_s), "--", sys.executable, "-m",
         "tunix_mcjax.bench.scale_job", f"--spec={folder / 'spec.json'}",
         f"--out={folder}"]
  print(f"[bench] scale arm {cfg.arm_name(chunk)}: {cfg.num_hosts} hosts x"
        f" {cfg.devices_per_host} device(s) ...", flush=True)
  run = harness.run_command(cmd, folder / "log.txt", cfg.timeout_s)
  hosts = load_hosts(folder, cfg.num_hosts)
  print(f"[bench] scale arm {cfg.arm_name(chunk)}: exit {run['returncode']},"
        f" {run['wall_s']:.0f} s", flush=True)
  return {"chunk": chunk, "run": run, "hosts": hosts,
          "ok": run["returncode"] == 0 and len(hosts) == cfg.num_hosts}


def _gib(n: float | None) -> float | None:
  return None if n is None else n / 2**30


def summarize_host(h: dict[str, Any]) -> dict[str, Any]:
  """A host's figures: peaks, the static breakdown, phases, publication."""
  snaps = h["snapshots"]
  built = next((s for s in snaps if s["label"] == "models built"), None)
  # The largest live set at a phase end, and its biggest buffers.
  top = max(snaps, key=lambda s: s["live_bytes"]) if snaps else None
  pub = h.get("publication")
  records = h.get("records") or []
  last = records[-1] if records else {}
  return {
      "host": h["host"],
      "peak_rss_gib": _gib(h["peak_rss_bytes"]),
      "baseline_rss_gib": _gib(h.get("baseline_rss_bytes")),
      "rss_models_built_gib": _gib(built["rss_bytes"]) if built else None,
      "phase_peak_rss_gib": {k: _gib(v) for k, v in
                             sorted(h["phase_peak_rss_bytes"].items())},
      "live_by_tree_gib": ({k: _gib(v) for k, v in top["by_tree"].items()}
                           if top else {}),
      "largest_live_set": top and {
          "label": top["label"], "step": top["step"],
          "live_gib": _gib(top["live_bytes"]), "largest": top["largest"]},
      "static_live_gib": _gib(built["live_bytes"]) if built else None,
      "built_by_tree_gib": ({k: _gib(v) for k, v in built["by_tree"].items()}
                            if built else {}),
      "step_s": [r.get("step_time_s") for r in records],
      "phases_last_step": last.get("phases"),
      "publish_bytes": last.get("publish_bytes"),
      "finished": h.get("finished", True),
      "publish_s": [(r.get("phases") or {}).get("publish") for r in records],
      "publication_plan": h.get("publication_plan"),
      "publication": pub and {
          "bytes": pub["bytes"], "one_call_s": pub["one_call_s"],
          "floor_s": pub["floor_s"],
          "one_call_over_floor": pub["one_call_over_floor"],
          "floor_gbps": pub["bytes"] / pub["floor_s"] / 1e9},
  }


def _over(h: dict[str, Any], rss_gib: float) -> float:
  """Bytes of `rss_gib` above the process's footprint before its models."""
  return (rss_gib - h["rss_models_built_gib"] + h["static_live_gib"]) * 2**30


def _last_step_peak(h: dict[str, Any]) -> float:
  """Peak RSS (GiB) of the last step's phases: compiled already, so no
  compiler memory (the first step's peaks hold it)."""
  last = max((int(k.split(":")[0].split()[1])
              for k in h["phase_peak_rss_gib"] if k.startswith("step ")),
             default=None)
  return max((v for k, v in h["phase_peak_rss_gib"].items()
              if k.startswith(f"step {last}:")), default=h["peak_rss_gib"])


def _train_peak(h: dict[str, Any]) -> float:
  """Peak RSS (GiB) seen while the train step ran."""
  return max((v for k, v in h["phase_peak_rss_gib"].items()
              if ": train" in k), default=h["peak_rss_gib"])


def extra_copies(cfg: ScaleConfig, report: dict[str, Any]) -> dict[str, float]:
  """Measured copies (host 0): of no known tree, in trainer-shard and
  engine units; Tunix's policy snapshot ("anchor"), in trainer shards; and
  what the publication program holds beside the engine's weights, in
  engine copies (XLA's plan)."""
  hosts = [h for a in report["arms"].values() for h in a["hosts"]]
  if not hosts:
    return {}
  h = hosts[0]
  p = cfg.shape().params * (2 if cfg.dtype == "bfloat16" else 4)
  n = cfg.num_hosts * cfg.devices_per_host
  at_build = h["built_by_tree_gib"].get("other", 0.0) * 2**30
  most = max(h["live_by_tree_gib"].get("other", 0.0) * 2**30, at_build)
  out = {"sharded_extra_copies": round(at_build / (p / n), 2),
         "engine_extra_copies": round((most - at_build)
                                      / (p * cfg.devices_per_host), 2),
         "host_snapshot_copies": round(
             h["built_by_tree_gib"].get("anchor", 0.0) * 2**30 / (p / n), 2)}
  plan = next((x["publication_plan"] for x in hosts
               if x.get("publication_plan")), None)
  if plan:
    out["publish_copies"] = round(plan["temp_bytes"] / p, 2)
  return out


def build_report(cfg: ScaleConfig, arms: dict[str, dict[str, Any]],
                 machine: dict[str, Any],
                 xla: list[dict[str, Any]] | None = None) -> dict[str, Any]:
  """The report: per arm and host, plus the fit check and the fit table."""
  report: dict[str, Any] = {
      "mode": "scale", "config": dataclasses.asdict(cfg),
      "machine": machine, "arms": {}}
  shape = cfg.shape()
  workload = memory_fit.Workload(
      train_rows=cfg.rows_per_host // cfg.devices_per_host,
      engine_rows=cfg.rows_per_host // cfg.devices_per_host,
      seq=cfg.max_prompt_length + cfg.max_new_tokens,
      kv_len=cfg.max_prompt_length + cfg.max_new_tokens + 8)
  for name, arm in arms.items():
    hosts = [summarize_host(h) for h in arm["hosts"]]
    report["arms"][name] = {"ok": arm["ok"], "chunk": arm["chunk"],
                            "returncode": arm["run"]["returncode"],
                            "wall_s": arm["run"]["wall_s"],
                            "log": arm["run"]["log"], "hosts": hosts}
  report["logits_bytes_per_host"] = memory_fit.logits_bytes(
      shape, rows=cfg.rows_per_host, seq=workload.seq)
  # Calibrate the fit from both arms (measured peak above the process's
  # footprint before the models), then check it against each arm.
  # Bytes above the process's own footprint: the live buffers once the
  # models are built plus what resident memory grew beyond that point.
  measured, train = {}, {}
  for name, arm in report["arms"].items():
    hs = arm["hosts"]
    if hs:  # A killed arm: the phases it completed.
      measured[arm["chunk"]] = max(_over(h, _last_step_peak(h)) for h in hs)
      train[arm["chunk"]] = max(_over(h, _train_peak(h)) for h in hs)
  # The fit is checked against the last step (no compilation in it).
  report["measured_last_step_peak_over_process_bytes"] = {
      str(k): v for k, v in measured.items()}
  report["measured_train_peak_over_process_bytes"] = {
      str(k): v for k, v in train.items()}
  report["xla_logps_grad"] = xla or []
  by_chunk = {x["chunk"]: x for x in xla or []}
  cal = None
  if None in by_chunk and len(by_chunk) >= 2:
    # XLA's planned temporaries: the train step's transients without the
    # compiler's and allocator's own memory, which RSS also holds.
    chunk = next(k for k in by_chunk if k is not None)
    cal = memory_fit.calibrate_from_xla(
        shape, rows=workload.train_rows, seq=workload.seq,
        temp_unchunked=by_chunk[None]["temp_bytes"],
        temp_chunked=by_chunk[chunk]["temp_bytes"], chunk=chunk)
  elif None in train and len(train) >= 2:
    chunk = next(k for k in train if k is not None)
    cal = memory_fit.calibrate(
        shape, workload=workload,
        hosts=cfg.num_hosts, devices_per_host=cfg.devices_per_host,
        param_bytes=2 if cfg.dtype == "bfloat16" else 4,
        peak_unchunked=train[None], peak_chunked=train[chunk],
        chunk=chunk)
  if cal is not None:
    cal = dataclasses.replace(cal, **extra_copies(cfg, report))
    report["calibration"] = dataclasses.asdict(cal)
    # Per arm and step: the train phase's peak, predicted vs measured
    # (before the first publication no second engine copy exists yet; the
    # first step's peak also holds the compiler's memory).
    checks = {}
    pb = 2 if cfg.dtype == "bfloat16" else 4
    for name, arm in report["arms"].items():
      for h in arm["hosts"][:1]:
        for key, rss in sorted(h["phase_peak_rss_gib"].items()):
          if ": train" not in key:
            continue
          step = int(key.split(":")[0].split()[1])
          c = cal if step > 1 else dataclasses.replace(
              cal, engine_extra_copies=0.0)
          b = memory_fit.host_memory(
              shape, workload=dataclasses.replace(workload,
                                                  chunk=arm["chunk"]),
              hosts=cfg.num_hosts, devices_per_host=cfg.devices_per_host,
              param_bytes=pb, reference=cfg.beta != 0, calibration=c)
          # On CPU the host snapshot is in the same memory as the devices.
          pred = (b.static + b.grads + b.train_transient
                  + b.host_snapshot) * b.devices_per_host
          v = _over(h, rss)
          checks[f"{name}, step {step} train"] = {
              "predicted_bytes": pred, "measured_bytes": v,
              "difference": pred / v - 1}
    report["fit_check"] = checks
    static = memory_fit.host_memory(
        shape, workload=workload, hosts=cfg.num_hosts,
        devices_per_host=cfg.devices_per_host,
        param_bytes=2 if cfg.dtype == "bfloat16" else 4,
        reference=cfg.beta != 0, calibration=dataclasses.replace(
            cal, sharded_extra_copies=0.0, engine_extra_copies=0.0))
    d = cfg.devices_per_host
    hosts = [h for a in report["arms"].values() for h in a["hosts"]]
    report["static_check"] = {
        "predicted_bytes": {
            "actor": static.trainer_state / 3 * d,
            "optimizer": static.trainer_state * 2 / 3 * d,
            "reference": static.reference * d, "engine": static.engine * d,
            "anchor": static.host_snapshot * d},
        "measured_bytes": {k: v * 2**30 for k, v in
                           hosts[0]["built_by_tree_gib"].items()}
                          if hosts else {}}
    report["fit_table"] = memory_fit.fit_table(cal)
  return report


def render_markdown(report: dict[str, Any]) -> str:
  """The report as tables."""
  cfg = report["config"]
  lines = [
      f"# Scale run: {cfg['name']}, {cfg['num_hosts']} simulated hosts x"
      f" {cfg['devices_per_host']} CPU device(s), {cfg['dtype']}", "",
      f"{cfg['steps']} GRPO steps, {cfg['batch_size']} prompts x"
      f" {cfg['num_generations']} samples, prompt {cfg['max_prompt_length']}"
      f" + {cfg['max_new_tokens']} new tokens; native engine; random init."
      f" Float32 logits of one host's train batch:"
      f" {report['logits_bytes_per_host'] / 2**30:.2f} GiB.", "",
      "| arm | host | peak RSS GiB | RSS with models GiB | live at models"
      " GiB | step s | publish bytes | publication s (one call) | floor s |"
      " over floor |",
      "|---|---|---|---|---|---|---|---|---|---|"]
  for name, arm in report["arms"].items():
    for h in arm["hosts"]:
      p = h["publication"] or {}
      steps = ", ".join(f"{s:.1f}" for s in h["step_s"] if s is not None)
      f = lambda k, fmt: "-" if p.get(k) is None else format(p[k], fmt)
      lines.append(
          f"| {name} | {h['host']}{'' if h['finished'] else ' (killed)'} |"
          f" {h['peak_rss_gib']:.2f} |"
          f" {h['rss_models_built_gib']:.2f} | {h['static_live_gib']:.2f} |"
          f" {steps} | {h['publish_bytes']} | {f('one_call_s', '.3f')} |"
          f" {f('floor_s', '.3f')} | {f('one_call_over_floor', '.2f')} |")
    if not arm["ok"]:
      lines.append(f"| {name} | FAILED (exit {arm['returncode']}, see"
                   f" {arm['log']}) | | | | | | | | |")
  for name, arm in report["arms"].items():
    for h in arm["hosts"][:1]:
      plan = h.get("publication_plan")
      if plan:
        lines += ["", f"{name}, host {h['host']}: the publication program"
                  f" (XLA's plan) holds {plan['temp_bytes'] / 2**30:.3f} GiB"
                  " of temporaries; it writes"
                  f" {plan['alias_bytes'] / 2**30:.3f} of its"
                  f" {plan['output_bytes'] / 2**30:.3f} GiB of output into"
                  " the engine's previous weights (donated)."]
      lines += ["", f"## {name}, host {h['host']}: peak RSS by phase (GiB)",
                "", "| phase | peak RSS GiB |", "|---|---|"]
      lines += [f"| {k} | {v:.2f} |"
                for k, v in h["phase_peak_rss_gib"].items()]
      lines += ["", "Phases of the last step (s): " + ", ".join(
          f"{k} {v:.2f}" for k, v in (h["phases_last_step"] or {}).items()),
                "", "Live buffers by tree at the largest live set (GiB): "
                + ", ".join(f"{k} {v:.3f}"
                            for k, v in h["live_by_tree_gib"].items()),
                "", "| largest live buffers | shape | dtype | MiB |",
                "|---|---|---|---|"]
      top = h["largest_live_set"] or {"largest": []}
      lines += [f"| {b['name']} | {b['shape']} | {b['dtype']} |"
                f" {b['bytes'] / 2**20:.1f} |" for b in top["largest"][:8]]
  if report.get("xla_logps_grad"):
    lines += ["", "## XLA's temporaries of one host's log-prob gradient"
              " (compiled, not run)", "",
              "| chunk | rows x (prompt + completion) | temp GiB |"
              " f32 completion logits GiB |", "|---|---|---|---|"]
    for x in report["xla_logps_grad"]:
      lines.append(
          f"| {x['chunk'] or 'none'} | {x['rows']} x ({x['prompt']} +"
          f" {x['completion']}) | {x['temp_bytes'] / 2**30:.3f} |"
          f" {x['logits_bytes'] / 2**30:.3f} |")
  if "static_check" in report:
    sc = report["static_check"]
    lines += ["", "## Static breakdown, host 0 once the models are built"
              " (GiB)", "", "| tree | predicted | measured (live) |",
              "|---|---|---|"]
    for k in sorted(set(sc["predicted_bytes"]) | set(sc["measured_bytes"])):
      p, m = sc["predicted_bytes"].get(k), sc["measured_bytes"].get(k)
      lines.append(f"| {k} | {'-' if p is None else f'{p / 2**30:.3f}'} |"
                   f" {'-' if m is None else f'{m / 2**30:.3f}'} |")
  if "fit_check" in report:
    lines += ["", "## Fit check, host 0 (memory_fit vs the train phase's"
              " peak RSS above the process's footprint before its models,"
              " plus the live buffers then)", "",
              "| arm, phase | predicted GiB | measured GiB | difference |",
              "|---|---|---|---|"]
    for k, c in report["fit_check"].items():
      lines.append(f"| {k} | {c['predicted_bytes'] / 2**30:.2f} |"
                   f" {c['measured_bytes'] / 2**30:.2f} |"
                   f" {100 * c['difference']:+.1f}% |")
    lines += ["", memory_fit.render_table(report["fit_table"])]
  return "\n".join(lines) + "\n"


def run_xla(cfg: ScaleConfig, out: pathlib.Path) -> list[dict[str, Any]]:
  """XLA's planned temporaries of one host's log-prob gradient per arm
  (`logps_xla`, compiled in a child process, never run)."""
  chunks = ",".join(str(c or 0) for c in cfg.chunk_sizes)
  code = (
      "import json, sys; from tunix_mcjax.bench import logps_xla;"
      f" m = json.loads(sys.argv[1]);"
      f" [print(json.dumps(logps_xla.temp_bytes(m, rows={cfg.rows_per_host},"
      f" prompt={cfg.max_prompt_length}, completion={cfg.max_new_tokens},"
      " chunk=int(c) or None))) for c in sys.argv[2].split(',')]")
  log = out / "xla_log.txt"
  run = harness.run_command(
      [sys.executable, "-c", code, json.dumps(cfg.model), chunks], log,
      cfg.timeout_s)
  found = []
  for line in log.read_text().splitlines():
    if line.startswith("{"):
      found.append(json.loads(line))
  if run["returncode"] != 0:
    print(f"[bench] scale: XLA analysis failed, see {log}", flush=True)
  return found


def run_scale(cfg: ScaleConfig, out: pathlib.Path) -> dict[str, Any]:
  """Runs every arm; writes report.json and report.md under `out`."""
  out.mkdir(parents=True, exist_ok=True)
  t0 = time.perf_counter()
  load_before = harness._load()  # pylint: disable=protected-access
  arms = {cfg.arm_name(c): run_arm(cfg, c, out) for c in cfg.chunk_sizes}
  xla = run_xla(cfg, out)
  machine = harness.machine_info(
      load_before=load_before,
      load_after=harness._load(),  # pylint: disable=protected-access
      accelerator={"platform": "cpu", "note": "simulated hosts, CPU devices"})
  report = build_report(cfg, arms, machine, xla=xla)
  report["bench_wall_s"] = time.perf_counter() - t0
  (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
  (out / "report.md").write_text(render_markdown(report))
  return report
