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

"""The flags of examples/grpo_qwen3.py, made from their definitions.

One flag per `GrpoJobConfig` field (its name, help and choices from the
field's metadata, its default the field's; `shared_flags`), so a new job
field gets its flag where it is declared, plus the launch and Ray flags the
example shares with the CLI (`shared_flags.LAUNCH_FLAGS`). The example calls
`define` once, at import, and builds its job with `JobFlags.config`.
"""

from __future__ import annotations

from collections.abc import Mapping
import dataclasses

from absl import flags

from tunix_mcjax.recipes import job_config
from tunix_mcjax.recipes import shared_flags

# Flags defined through this module belong to the example (its --help).
flags.disclaim_key_flags()

# What the example's defaults of the launch flags mean (platforms'
# plan_local_hosts).
_NOTES = {"devices_per_host": "Default: 4."}


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobFlags:
  """The example's flags: the job's (by field name) and the launch flags."""

  job: Mapping[str, flags.FlagHolder]
  num_hosts: flags.FlagHolder
  devices_per_host: flags.FlagHolder
  simulate: flags.FlagHolder
  timeout: flags.FlagHolder
  compilation_cache_dir: flags.FlagHolder
  ray_address: flags.FlagHolder
  ray_placement_strategy: flags.FlagHolder
  ray_bundle: flags.FlagHolder

  def config(self) -> job_config.GrpoJobConfig:
    """The job the parsed flags ask for; ValueError if it cannot run."""
    return job_config.GrpoJobConfig(**shared_flags.field_values(
        job_config.GrpoJobConfig, self.job))


def define(flag_values: flags.FlagValues | None = None) -> JobFlags:
  """Defines the example's flags (on absl's FLAGS unless `flag_values`)."""
  job = shared_flags.define_fields(job_config.GrpoJobConfig,
                                   flag_values=flag_values)
  launch = {
      spec.name: shared_flags.define(spec, note=_NOTES.get(spec.name),
                                     flag_values=flag_values)
      for spec in shared_flags.LAUNCH_FLAGS
  }
  return JobFlags(job=job, **launch)
