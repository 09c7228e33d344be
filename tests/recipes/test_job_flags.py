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

"""Flags once: the example's job flags come from `GrpoJobConfig`'s fields,
and the CLI defines the flags it shares with the example from the same
definitions (`recipes.shared_flags`).

The example's flags are defined on fresh `FlagValues` here (absl allows a
flag once per process, and the CLI's are on absl's FLAGS); a source check
keeps the example and the CLI from defining a shared flag by hand.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib

from absl import flags
import pytest

import tunix_mcjax
from tunix_mcjax import host_optimizations
from tunix_mcjax import rules
from tunix_mcjax import transfers
from tunix_mcjax.da import options as da_options
from tunix_mcjax.recipes import job_checks
from tunix_mcjax.recipes import job_config
from tunix_mcjax.recipes import job_flags
from tunix_mcjax.recipes import shared_flags

REPO = pathlib.Path(__file__).resolve().parents[2]
GrpoJobConfig = job_config.GrpoJobConfig

# Job fields set in code only (each says why in its metadata).
FLAGLESS = {"top_p", "top_k", "epsilon"}
# Flag names that differ from their field's.
RENAMED = {"dtype": "param_dtype"}
# Every flag that both entry points take.
SHARED = {
    # Launch and Ray (no job field).
    "num_hosts", "devices_per_host", "simulate", "timeout",
    "compilation_cache_dir", "ray_address", "ray_placement_strategy",
    "ray_bundle",
    # Job fields.
    "backend", "engine", "metrics_out", "profile", "async_metrics",
    "freeze_gc", "balance_admission", "publish_in_one_call", "mesh",
    "transfer_guard", "reward_workers", "reward_timeout_s", "step_timeout_s",
    "heartbeat_timeout_s", "trainer_hosts",
    "rollout_hosts", "max_staleness", "is_cap", "resume_step", "engine_tp",
}
# The CLI's config defaults these otherwise (from Tunix's config: the stock
# backend, `rollout_engine`, the actor mesh, the meshes' host counts, the
# staleness by training_mode: 0 for agentic_grpo, and the rollout mesh's tp
# axis under mcjax_da).
CLI_DEFAULTS_DIFFER = {"backend", "engine", "mesh", "trainer_hosts",
                       "rollout_hosts", "max_staleness", "engine_tp"}
# The CLI's own flags.
CLI_ONLY = {"placement_invariant_sampling", "params_out", "run_eval"}


@pytest.fixture
def example():
  """The example's flags on fresh FlagValues, and those FlagValues."""
  fv = flags.FlagValues()
  return job_flags.define(flag_values=fv), fv


def _parse(fv: flags.FlagValues, *args: str) -> None:
  fv(["grpo_qwen3.py", *args])


def _help(flag: flags.Flag) -> str:
  """`flag`'s help as defined (absl puts an enum's choices before it)."""
  choices = getattr(flag.parser, "enum_values", None)
  prefix = f"<{'|'.join(choices)}>: " if choices else ""
  assert flag.help.startswith(prefix)
  return flag.help[len(prefix):]


def _definition(name: str) -> str:
  """The help a shared flag is defined with (`shared_flags`)."""
  for spec in shared_flags.LAUNCH_FLAGS:
    if spec.name == name:
      return spec.help
  return shared_flags.field_spec(GrpoJobConfig, name).help


def test_every_job_field_has_a_flag_or_says_why_not():
  flagless = set()
  for field in dataclasses.fields(GrpoJobConfig):
    about = field.metadata.get(shared_flags.FIELD_KEY)
    assert isinstance(about, (shared_flags.FieldFlag, shared_flags.NoFlag)), (
        f"GrpoJobConfig.{field.name}: no flag metadata (job_flag/no_flag)")
    if isinstance(about, shared_flags.NoFlag):
      assert about.reason
      flagless.add(field.name)
    else:
      assert about.help.strip(), field.name
  assert flagless == FLAGLESS


def test_every_flagged_field_has_its_flag_with_the_fields_default(example):
  job, fv = example
  _parse(fv)
  for field in dataclasses.fields(GrpoJobConfig):
    if field.name in FLAGLESS:
      assert field.name not in job.job
      continue
    name = RENAMED.get(field.name, field.name)
    assert name in fv, f"GrpoJobConfig.{field.name} has no --{name}"
    assert job.job[field.name] is not None
    assert _help(fv[name]) == field.metadata["flag"].help
    value = shared_flags.field_values(GrpoJobConfig,
                                      {field.name: job.job[field.name]})
    assert value[field.name] == field.default, (
        f"--{name} defaults to {fv[name].default!r}, the field to"
        f" {field.default!r}")
  # Unparsed flags are exactly the default job.
  assert job.config() == GrpoJobConfig()


def test_flags_build_the_config_with_the_fields_types(example):
  job, fv = example
  _parse(fv, "--param_dtype=bfloat16", "--trace_steps=2,3",
         "--trace_dir=/tmp/traces", "--steps=3", "--noscan_layers",
         "--profile=optimized", "--nofreeze_gc", "--lora_rank=4")
  cfg = job.config()
  assert cfg.dtype == "bfloat16"
  assert cfg.trace_steps == (2, 3)
  assert (cfg.steps, cfg.scan_layers, cfg.lora_rank) == (3, False, 4)
  assert (cfg.profile, cfg.freeze_gc, cfg.async_metrics) == (
      "optimized", False, None)
  _parse(fv, "--trace_steps=2,x", "--trace_dir=/tmp/traces")
  with pytest.raises(ValueError):  # The example's one-line user error.
    job.config()


def test_enum_choices_come_from_the_registry_and_constants(example):
  _, fv = example

  def choices(name):
    return tuple(fv[name].parser.enum_values)

  assert choices("backend") == tuple(tunix_mcjax.backend_names())
  assert choices("trainer") == job_config.TRAINERS
  assert choices("learner") == rules.LEARNERS
  assert choices("mesh") == rules.MESH_KINDS
  assert choices("transfer_guard") == transfers.GUARD_LEVELS
  assert choices("profile") == tuple(host_optimizations.PROFILES)
  assert choices("ray_placement_strategy") == da_options.PLACEMENT_STRATEGIES
  # Engines are looked up in the registry when checked (plug-ins load
  # lazily): a string flag whose help names the built-in ones.
  for engine in job_checks.BUILTIN_ENGINES:
    assert engine in fv["engine"].help


def test_the_flags_are_the_callers_key_flags(example):
  # shared_flags and job_flags disclaim theirs: an entry point's --help
  # lists its flags as its own.
  _, fv = example
  ours = {f.name for f in fv.get_key_flags_for_module(__name__)}
  assert SHARED <= ours and "steps" in ours
  for module in (shared_flags, job_flags):
    assert not fv.get_key_flags_for_module(module.__name__)


def test_the_cli_defines_the_shared_flags_from_the_same_definitions(example):
  from tunix_mcjax.cli import cli_flags  # pylint: disable=g-import-not-at-top
  from tunix_mcjax.cli import options  # pylint: disable=g-import-not-at-top

  _, fv = example
  cli = {f.name: f for f in flags.FLAGS.get_flags_for_module(
      cli_flags.__name__)}
  assert set(cli) & set(fv) == SHARED
  assert set(cli) - set(fv) == CLI_ONLY
  cli_defaults = {f.name: f.default for f in dataclasses.fields(
      options.CliOptions)}
  differ = set()
  for name in SHARED:
    ours, theirs = cli[name], fv[name]
    # The same text, each entry point's note (if any) after it.
    assert _help(ours).startswith(_definition(name)), name
    assert _help(theirs).startswith(_definition(name)), name
    assert ours.flag_type() == theirs.flag_type(), name
    # The same choices (the CLI lists its stock default backend first).
    assert (sorted(getattr(ours.parser, "enum_values", None) or ()) ==
            sorted(getattr(theirs.parser, "enum_values", None) or ())), name
    if name in cli_defaults:
      assert ours.default == cli_defaults[name], name
    if ours.default != theirs.default:
      differ.add(name)
  assert differ == CLI_DEFAULTS_DIFFER
  assert tuple(cli["backend"].parser.enum_values) == options.BACKENDS


def _defined_names(path: pathlib.Path) -> list[str]:
  """The first argument of every `*.DEFINE_*(...)` call in `path`."""
  names = []
  for node in ast.walk(ast.parse(path.read_text())):
    if not isinstance(node, ast.Call):
      continue
    func = node.func
    called = getattr(func, "attr", getattr(func, "id", ""))
    if called.startswith("DEFINE"):
      names.append(ast.literal_eval(node.args[0]))
  return names


def test_no_entry_point_defines_a_shared_flag_by_hand():
  assert _defined_names(REPO / "examples/grpo_qwen3.py") == []
  assert set(_defined_names(REPO / "tunix_mcjax/cli/cli_flags.py")) == (
      CLI_ONLY)


def test_an_entry_points_order_of_choices_keeps_them():
  spec = shared_flags.field_spec(GrpoJobConfig, "mesh",
                                 order=("hsdp", "fsdp", "auto"))
  assert spec.choices == ("hsdp", "fsdp", "auto")
  with pytest.raises(ValueError, match="are not the choices"):
    shared_flags.field_spec(GrpoJobConfig, "mesh", order=("auto", "2d"))


def test_flag_specs_refuse_a_kind_without_its_choices():
  with pytest.raises(ValueError, match="choices go with kind 'enum'"):
    shared_flags.FlagSpec(name="x", kind="enum", default=None, help="x")
  with pytest.raises(ValueError, match="is not one of"):
    shared_flags.FlagSpec(name="x", kind="tuple", default=None, help="x")


def test_a_field_without_flag_metadata_is_named():

  @dataclasses.dataclass(frozen=True)
  class Job:
    steps: int = 1

  with pytest.raises(ValueError, match="field 'steps' has no flag metadata"):
    shared_flags.define_fields(Job, flag_values=flags.FlagValues())
