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

"""The flags both entry points take, each written once.

examples/grpo_qwen3.py (`recipes.job_flags`) and `python -m
tunix_mcjax.cli.grpo_main` (`cli.cli_flags`) share the launch flags
(--num_hosts, --timeout, ...), the Ray flags of mcjax_da and many job flags
(--backend, --profile, the O1-O4 switches, --mesh, ...). A flag's name, kind,
help and choices live in one place: `LAUNCH_FLAGS` here, or the field
metadata of `GrpoJobConfig` (`job_flag`), from which `field_spec` makes the
flag of a field (kind from the field's type, default the field's). An entry
point whose own config defaults differently (the CLI's `CliOptions`) passes
its default, and a `note` where unset means something of its own.

Each entry point defines its flags through `define` (absl allows a flag once
per process); this module disclaims them, so they are the entry point's key
flags and its --help lists them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import dataclasses
import types
import typing
from typing import Any

from absl import flags

from tunix_mcjax import compilation_cache
from tunix_mcjax.da import options as da_options

# Flags defined through this module belong to its caller (--help).
flags.disclaim_key_flags()

# The metadata key of a dataclass field's flag (`job_flag`, `no_flag`).
FIELD_KEY = "flag"

# What absl parses each kind with.
_DEFINE = {
    "boolean": flags.DEFINE_boolean,
    "integer": flags.DEFINE_integer,
    "float": flags.DEFINE_float,
    "string": flags.DEFINE_string,
    "list": flags.DEFINE_list,
}
KINDS = (*_DEFINE, "enum")


@dataclasses.dataclass(frozen=True, kw_only=True)
class FlagSpec:
  """One flag: its name, kind (one of `KINDS`), default, help and choices."""

  name: str
  kind: str
  default: Any
  help: str
  choices: tuple[str, ...] | None = None

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f"flag kind {self.kind!r} is not one of {KINDS}.")
    if (self.kind == "enum") != (self.choices is not None):
      raise ValueError(f"--{self.name}: choices go with kind 'enum' only.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class FieldFlag:
  """A field's flag, as its metadata holds it (`job_flag`).

  Attributes:
    help: the flag's help (its default is the field's; absl prints it).
    name: the flag's name; None: the field's.
    choices: an enum's values (a str field); None: any value of the type.
  """

  help: str
  name: str | None = None
  choices: tuple[str, ...] | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class NoFlag:
  """A field deliberately without a flag, and why (`no_flag`)."""

  reason: str


def job_flag(text: str, *, name: str | None = None,
             choices: Sequence[str] | None = None) -> dict[str, FieldFlag]:
  """Field metadata: the field has a flag with help `text`."""
  return {FIELD_KEY: FieldFlag(
      help=text, name=name,
      choices=None if choices is None else tuple(choices))}


def no_flag(reason: str) -> dict[str, NoFlag]:
  """Field metadata: the field has no flag (set in code), because `reason`."""
  return {FIELD_KEY: NoFlag(reason=reason)}


def _field_type(cls: type, field: dataclasses.Field) -> tuple[type, Any]:
  """(`field`'s type without None, its element type if a tuple, else None)."""
  hint = typing.get_type_hints(cls)[field.name]
  if typing.get_origin(hint) in (types.UnionType, typing.Union):
    (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
  if typing.get_origin(hint) is tuple:
    return tuple, typing.get_args(hint)[0]
  return hint, None


def _kind(base: type, choices: tuple[str, ...] | None) -> str:
  if base is tuple:
    return "list"
  if base is str:
    return "string" if choices is None else "enum"
  # bool before int: True is an int.
  for kind, python_type in (("boolean", bool), ("integer", int),
                            ("float", float)):
    if base is python_type:
      return kind
  raise TypeError(f"no flag kind for fields of type {base!r}.")


def _field(cls: type, name: str) -> dataclasses.Field:
  for field in dataclasses.fields(cls):
    if field.name == name:
      return field
  raise KeyError(f"{cls.__name__} has no field {name!r}.")


def _default(field: dataclasses.Field) -> Any:
  if field.default_factory is not dataclasses.MISSING:
    return field.default_factory()
  return field.default


def field_flag(field: dataclasses.Field) -> FieldFlag | None:
  """`field`'s flag from its metadata; None: `no_flag`.

  Raises:
    ValueError: the field says nothing about a flag (a new field must).
  """
  about = field.metadata.get(FIELD_KEY)
  if isinstance(about, NoFlag):
    return None
  if not isinstance(about, FieldFlag):
    raise ValueError(
        f"field {field.name!r} has no flag metadata; give it"
        " metadata=shared_flags.job_flag(HELP) (or no_flag(REASON)).")
  return about


def field_spec(cls: type, name: str, default: Any = dataclasses.MISSING,
               order: Sequence[str] | None = None) -> FlagSpec:
  """The flag of `cls`'s field `name`.

  Args:
    cls: a dataclass whose fields have flag metadata (`job_flag`).
    name: the field.
    default: the flag's default; unset: the field's (an entry point whose
      own config defaults otherwise passes its own).
    order: an enum's choices in the order an entry point lists them (the
      same values).
  """
  field = _field(cls, name)
  about = field_flag(field)
  if about is None:
    raise ValueError(f"{cls.__name__}.{name} has no flag.")
  base, _ = _field_type(cls, field)
  if default is dataclasses.MISSING:
    default = _default(field)
  if base is tuple and default is not None:
    default = list(default)  # absl's list flags hold lists.
  choices = about.choices
  if order is not None:
    if sorted(order) != sorted(choices or ()):
      raise ValueError(f"--{about.name or name}: {list(order)} are not the"
                       f" choices {list(choices or ())} reordered.")
    choices = tuple(order)
  return FlagSpec(name=about.name or name, kind=_kind(base, choices),
                  default=default, help=about.help, choices=choices)


def flag_fields(cls: type) -> list[str]:
  """The names of `cls`'s fields that have a flag."""
  return [f.name for f in dataclasses.fields(cls) if field_flag(f)]


def define(spec: FlagSpec, *, note: str | None = None,
           flag_values: flags.FlagValues | None = None) -> flags.FlagHolder:
  """Defines `spec`'s flag, its help followed by the entry point's `note`."""
  fv = flags.FLAGS if flag_values is None else flag_values
  text = spec.help if note is None else f"{spec.help} {note}"
  if spec.kind == "enum":
    return flags.DEFINE_enum(spec.name, spec.default, list(spec.choices),
                             text, flag_values=fv)
  default = spec.default
  if spec.kind == "list" and default is not None:
    default = list(default)  # absl keeps a list default as the value.
  return _DEFINE[spec.kind](spec.name, default, text, flag_values=fv)


def define_fields(
    cls: type, *, flag_values: flags.FlagValues | None = None,
) -> dict[str, flags.FlagHolder]:
  """A flag for every field of `cls` that has one; field name -> holder."""
  return {name: define(field_spec(cls, name), flag_values=flag_values)
          for name in flag_fields(cls)}


def field_values(cls: type,
                 holders: Mapping[str, flags.FlagHolder]) -> dict[str, Any]:
  """The fields' values from their parsed flags (lists become tuples).

  Raises:
    ValueError: a list item that is not of the field's element type.
  """
  values = {}
  for name, holder in holders.items():
    value = holder.value
    base, item = _field_type(cls, _field(cls, name))
    if base is tuple and value is not None:
      value = tuple(item(v) for v in value)
    values[name] = value
  return values


# Host processes of a local simulation when --num_hosts is not given
# (`platforms.plan_local_hosts`'s default too).
LOCAL_SIM_NUM_HOSTS = 2

# The flags of starting a job (on this machine or on Ray) that are no job
# field; both entry points define all of them, with these defaults.
NUM_HOSTS = FlagSpec(
    name="num_hosts", kind="integer", default=None,
    help="Host processes on this machine (no cluster detected): each owns"
    " 1/N of its GPUs or TPU chips (default 1), or N simulated hosts"
    f" (default {LOCAL_SIM_NUM_HOSTS}).")
DEVICES_PER_HOST = FlagSpec(
    name="devices_per_host", kind="integer", default=None,
    help="Fake CPU devices per simulated host; asks for simulated hosts.")
SIMULATE = FlagSpec(
    name="simulate", kind="boolean", default=False,
    help="Simulated hosts of fake CPU devices even where GPUs or TPU chips"
    " are present (a machine without them always simulates).")
TIMEOUT = FlagSpec(
    name="timeout", kind="integer", default=3600,
    help="Stop all hosts this command started (local processes, or"
    " mcjax_da's Ray actors) after this many seconds.")
COMPILATION_CACHE_DIR = FlagSpec(
    name="compilation_cache_dir", kind="string", default=None,
    help=compilation_cache.FLAG_HELP)
RAY_ADDRESS = FlagSpec(
    name="ray_address", kind="string", default=None,
    help="--backend=mcjax_da: an existing Ray cluster to run on (HOST:PORT"
    " of its GCS, ray://HOST:PORT, or 'auto' = RAY_ADDRESS or the cluster"
    " `ray start` made here); the job kills only its own actors and leaves"
    " the cluster running. Default: a Ray head of the job's own on"
    " 127.0.0.1 (RAY_ADDRESS alone does not change that).")
RAY_PLACEMENT_STRATEGY = FlagSpec(
    name="ray_placement_strategy", kind="enum", default="SPREAD",
    choices=da_options.PLACEMENT_STRATEGIES,
    help="--backend=mcjax_da: Ray placement-group strategy over the hosts'"
    " bundles (one per host).")
RAY_BUNDLE = FlagSpec(
    name="ray_bundle", kind="list", default=["CPU=1"],
    help="--backend=mcjax_da: Ray resources of each host's bundle,"
    " NAME=AMOUNT items (e.g. CPU=8,TPU=4 or CPU=8,GPU=1).")
LAUNCH_FLAGS = (NUM_HOSTS, DEVICES_PER_HOST, SIMULATE, TIMEOUT,
                COMPILATION_CACHE_DIR, RAY_ADDRESS, RAY_PLACEMENT_STRATEGY,
                RAY_BUNDLE)
