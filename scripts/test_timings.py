#!/usr/bin/env python3
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

r"""The test suite's timings report (docs/testing.md) from one test run.

  python scripts/test_timings.py \
      --junit main=runs/test-stats/main.xml --stats main=runs/test-stats/main \
      --junit mxv=runs/test-stats/mxv.xml --stats mxv=runs/test-stats/mxv \
      --wall main=1234 --wall mxv=321 --out docs/testing.md

Reads pytest's JUnit XML (`--junitxml`) for per-test seconds and the stats
dirs that tests/support/suite_stats.py has every JAX process of the run write
(one JSON record per process, per test for the pytest process), and writes
Markdown: per launch, per module and the slowest tests. Without --out the
report goes to stdout; with --out only the part between the timings markers
of that file is replaced, so hand-written text around it stays.

GROUP= names a pytest launch (e.g. the .venv suite and the .venv-maxtext-vllm
one); without it a file belongs to group "main". Standard library only.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import datetime
import json
import os
import pathlib
import platform
import sys
import xml.etree.ElementTree as ET

BEGIN = "<!-- timings:begin -->"
END = "<!-- timings:end -->"
DEFAULT_GROUP = "main"
NO_TEST = "(between tests)"
SLOWEST = 25


@dataclasses.dataclass
class TestCase:
  group: str
  nodeid: str
  module: str
  seconds: float
  outcome: str  # passed, failed, error, skipped


@dataclasses.dataclass
class Totals:
  """Sums over stats records."""

  processes: int = 0  # started by tests: role "process"
  killed: int = 0  # records without the exit flush
  compiles: int = 0
  compile_s_procs: float = 0.0
  compile_s_pytest: float = 0.0
  trace_s: float = 0.0
  lower_s: float = 0.0
  requests: int = 0
  hits: int = 0
  misses: int = 0

  def add(self, rec: dict[str, object]) -> None:
    if rec.get("role") == "pytest":
      self.compile_s_pytest += float(rec.get("backend_compile_s") or 0)
    else:
      self.processes += 1
      self.killed += not rec.get("complete", False)
      self.compile_s_procs += float(rec.get("backend_compile_s") or 0)
    self.compiles += int(rec.get("compiles") or 0)
    self.trace_s += float(rec.get("trace_s") or 0)
    self.lower_s += float(rec.get("lower_s") or 0)
    self.requests += int(rec.get("requests") or 0)
    self.hits += int(rec.get("hits") or 0)
    self.misses += int(rec.get("misses") or 0)

  @property
  def compile_s(self) -> float:
    return self.compile_s_procs + self.compile_s_pytest


def _split_group(value: str) -> tuple[str, str]:
  """'GROUP=PATH' -> (GROUP, PATH); a bare PATH is in the default group."""
  head, sep, tail = value.partition("=")
  if sep and head and os.sep not in head:
    return head, tail
  return DEFAULT_GROUP, value


def _module_of(classname: str, root: pathlib.Path) -> tuple[str, list[str]]:
  """JUnit classname -> (module path, class names).

  pytest writes tests/da/test_x.py::TestA::test_b as classname
  "tests.da.test_x.TestA", name "test_b". The longest prefix that is a file
  under `root` is the module; failing that, the last part named test_*.
  """
  parts = classname.split(".") if classname else []
  for k in range(len(parts), 0, -1):
    candidate = "/".join(parts[:k]) + ".py"
    if (root / candidate).is_file():
      return candidate, parts[k:]
  for k in range(len(parts), 0, -1):
    if parts[k - 1].startswith("test_") or parts[k - 1].endswith("_test"):
      return "/".join(parts[:k]) + ".py", parts[k:]
  return "/".join(parts) + ".py", []


def read_junit(path: pathlib.Path, group: str,
               root: pathlib.Path) -> list[TestCase]:
  cases = []
  for case in ET.parse(path).getroot().iter("testcase"):
    module, classes = _module_of(case.get("classname", ""), root)
    nodeid = "::".join([module, *classes, case.get("name", "")])
    outcome = "passed"
    for child, name in (("failure", "failed"), ("error", "error"),
                        ("skipped", "skipped")):
      if case.find(child) is not None:
        outcome = name
        break
    cases.append(TestCase(group, nodeid, module,
                          float(case.get("time") or 0), outcome))
  return cases


def read_stats(path: pathlib.Path) -> list[dict[str, object]]:
  """The records of a stats dir; unreadable ones are skipped, with a note."""
  records = []
  for f in sorted(path.glob("*.json")):
    if f.name.startswith("."):
      continue
    try:
      rec = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
      print(f"test_timings: skipping {f}: {e}", file=sys.stderr)
      continue
    if isinstance(rec, dict) and rec.get("jax_imported"):
      records.append(rec)
  return records


def _module_of_nodeid(nodeid: str | None) -> str:
  return nodeid.split("::", 1)[0] if nodeid else NO_TEST


def _machine() -> str:
  try:
    cpus = len(os.sched_getaffinity(0))
  except AttributeError:
    cpus = os.cpu_count()
  mem = "?"
  try:
    for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
      if line.startswith("MemTotal:"):
        mem = f"{int(line.split()[1]) / 2**20:.1f} GiB"
  except OSError:
    pass
  try:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
  except OSError:
    load = "?"
  return (f"{platform.machine()}, {cpus} CPUs, {mem} memory; load average"
          f" at the end {load}")


def _s(x: float) -> str:
  return f"{x:.1f}"


def _rate(hits: int, requests: int) -> str:
  return f"{100 * hits / requests:.0f}%" if requests else "n/a"


def _table(header: list[str], rows: list[list[object]],
           text_columns: int = 1) -> list[str]:
  """A Markdown table; the first `text_columns` left-aligned, numbers right."""
  out = ["| " + " | ".join(header) + " |",
         "|" + "|".join("---" if i < text_columns else "---:"
                        for i in range(len(header))) + "|"]
  out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
  return out


def report(cases: list[TestCase],
           records: list[tuple[str | None, dict[str, object]]],
           walls: dict[str, float], now: datetime.datetime) -> str:
  """The Markdown between the markers (markers excluded)."""
  groups = list(dict.fromkeys(
      [c.group for c in cases] + [g for g, _ in records if g] + list(walls)))
  if not groups:
    groups = [DEFAULT_GROUP]
  multi = len(groups) > 1
  # Records of a dir given without GROUP= go to the first launch that ran
  # their test (ambiguous if two launches ran it: give GROUP= then).
  nodeid_group, module_group = {}, {}
  for c in cases:
    nodeid_group.setdefault(c.nodeid, c.group)
    module_group.setdefault(c.module, c.group)

  def group_of(group: str | None, rec: dict[str, object]) -> str:
    if group:
      return group
    tid = rec.get("test_id")
    return (nodeid_group.get(tid) or module_group.get(_module_of_nodeid(tid))
            or groups[0])

  per_group = collections.defaultdict(Totals)
  per_module = collections.defaultdict(Totals)
  per_test = collections.defaultdict(Totals)
  for group, rec in records:
    g = group_of(group, rec)
    per_group[g].add(rec)
    per_module[g, _module_of_nodeid(rec.get("test_id"))].add(rec)
    if rec.get("test_id"):
      per_test[g, rec["test_id"]].add(rec)
  tests = collections.Counter((c.group, c.module) for c in cases)
  seconds = collections.defaultdict(float)
  for c in cases:
    seconds[c.group, c.module] += c.seconds

  lines = [
      "<!-- Generated by scripts/test_timings.py from one `make test` run;"
      " edits between the timings markers are overwritten. -->",
      "",
      f"Measured {now.strftime('%Y-%m-%d %H:%M %Z').strip()} on {_machine()}.",
      "",
      "### Per launch",
      "",
  ]
  rows = []
  for g in groups:
    t = per_group[g]
    gcases = [c for c in cases if c.group == g]
    outcomes = collections.Counter(c.outcome for c in gcases)
    rows.append([
        g, len(gcases),
        ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())) or "-",
        _s(walls[g]) if g in walls else "-",
        _s(sum(c.seconds for c in gcases)), t.processes, t.killed,
        t.compiles, _s(t.compile_s_pytest), _s(t.compile_s_procs),
        _s(t.trace_s), _s(t.lower_s), t.hits, t.misses,
        _rate(t.hits, t.requests)])
  if multi:
    t = Totals()
    for g in groups:
      for f in dataclasses.fields(Totals):
        setattr(t, f.name, getattr(t, f.name) + getattr(per_group[g], f.name))
    outcomes = collections.Counter(c.outcome for c in cases)
    rows.append([
        "**all**", len(cases),
        ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())) or "-",
        _s(sum(walls.values())) if walls else "-",
        _s(sum(c.seconds for c in cases)), t.processes, t.killed, t.compiles,
        _s(t.compile_s_pytest), _s(t.compile_s_procs), _s(t.trace_s),
        _s(t.lower_s), t.hits, t.misses, _rate(t.hits, t.requests)])
  lines += _table(
      ["launch", "tests", "outcomes", "wall s", "test s", "processes",
       "killed", "compiles", "compile s (pytest)", "compile s (processes)",
       "trace s", "lower s", "cache hits", "cache misses", "hit rate"], rows,
      text_columns=1)
  lines += [
      "",
      "*processes*: Python processes the tests started that imported jax"
      " (launched hosts, example and CLI runs, Ray workers); *killed*: those"
      " that ended without exiting normally (numbers up to their last"
      " compile). *compile s*: XLA backend compile seconds, in the pytest"
      " process and in those processes. *trace s* / *lower s*: jaxpr tracing"
      " and lowering to MLIR, both kinds of process. *cache hits / misses*:"
      " persistent compilation cache lookups (JAX looks up even without a"
      " cache dir; every lookup then misses).",
      "",
      "### Per module",
      "",
  ]
  keys = set(tests) | set(per_module)
  ordered = sorted(keys, key=lambda k: (-seconds.get(k, 0.0), k))
  rows = []
  for g, module in ordered:
    t = per_module[g, module]
    rows.append(([g] if multi else []) + [
        f"`{module}`" if module != NO_TEST else module, tests.get((g, module), 0),
        _s(seconds.get((g, module), 0.0)), t.processes,
        _s(t.compile_s_pytest), _s(t.compile_s_procs), t.hits, t.misses])
  lines += _table(
      (["launch"] if multi else []) +
      ["module", "tests", "seconds", "processes", "compile s (pytest)",
       "compile s (processes)", "cache hits", "cache misses"], rows,
      text_columns=2 if multi else 1)
  lines += [
      "",
      f"*{NO_TEST}*: compiles of the pytest process outside any test"
      " (collection, conftest) and processes started with no test id.",
      "",
      f"### Slowest {SLOWEST} tests",
      "",
  ]
  rows = []
  for c in sorted(cases, key=lambda c: (-c.seconds, c.nodeid))[:SLOWEST]:
    t = per_test[c.group, c.nodeid]
    rows.append(([c.group] if multi else []) + [
        f"`{c.nodeid}`", _s(c.seconds), c.outcome, t.processes,
        _s(t.compile_s)])
  lines += _table(
      (["launch"] if multi else []) +
      ["test", "seconds", "outcome", "processes", "compile s"], rows,
      text_columns=2 if multi else 1)
  lines += [
      "",
      "A test's seconds are JUnit's: setup, call and teardown together, so"
      " the first test to use a module- or session-scoped fixture also"
      " carries that fixture's set-up (e.g. the shared example runs), and"
      " the last one its teardown; processes such a fixture starts count for"
      " that test too.",
  ]
  return "\n".join(lines) + "\n"


def splice(existing: str | None, body: str) -> str:
  """`existing` with the text between the markers replaced by `body`."""
  block = f"{BEGIN}\n{body}{END}\n"
  if existing is None:
    return f"# Testing\n\n## Test timings\n\n{block}"
  start = existing.find(BEGIN)
  end = existing.find(END, start + len(BEGIN)) if start >= 0 else -1
  if start < 0 or end < 0:
    sep = "" if existing.endswith("\n") or not existing else "\n"
    return f"{existing}{sep}\n{block}"
  tail = existing[end + len(END):]
  return existing[:start] + block + tail.removeprefix("\n")


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(
      description=__doc__.split("\n\n")[0],
      formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--junit", action="append", default=[],
                      metavar="[GROUP=]XML", help="pytest --junitxml output")
  parser.add_argument("--stats", action="append", default=[],
                      metavar="[GROUP=]DIR",
                      help="a TUNIX_MCJAX_TEST_STATS_DIR of the run")
  parser.add_argument("--wall", action="append", default=[],
                      metavar="GROUP=SECONDS",
                      help="a launch's wall-clock seconds")
  parser.add_argument("--root", default=".",
                      help="the pytest rootdir (maps JUnit names to files)")
  parser.add_argument("--out", help="the Markdown file to update in place")
  args = parser.parse_args(argv)

  root = pathlib.Path(args.root)
  cases = []
  for value in args.junit:
    group, path = _split_group(value)
    cases += read_junit(pathlib.Path(path), group, root)
  records = []
  for value in args.stats:
    group, path = _split_group(value)
    explicit = group if "=" in value and path != value else None
    records += [(explicit, rec) for rec in read_stats(pathlib.Path(path))]
  walls = {}
  for value in args.wall:
    group, sep, secs = value.partition("=")
    if not sep:
      parser.error(f"--wall wants GROUP=SECONDS, got {value!r}")
    walls[group] = float(secs)

  body = report(cases, records, walls, datetime.datetime.now().astimezone())
  if not args.out:
    sys.stdout.write(f"{BEGIN}\n{body}{END}\n")
    return 0
  out = pathlib.Path(args.out)
  existing = out.read_text(encoding="utf-8") if out.exists() else None
  out.parent.mkdir(parents=True, exist_ok=True)
  out.write_text(splice(existing, body), encoding="utf-8")
  return 0


if __name__ == "__main__":
  sys.exit(main())
