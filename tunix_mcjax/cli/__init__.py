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

"""Command-line entry points that mirror Tunix's own CLIs.

`python -m tunix_mcjax.cli.grpo_main` takes the arguments of Tunix's
`python -m tunix.cli.grpo_main` plus `--backend={tunix,mcjax}`.

- `grpo_main`: the entry point and Tunix's pipeline with the cluster
  backend swapped in.
- `cli_flags`: the absl flags it adds (defined on import) and
  `options_from_flags`.
- `options`: what the CLI adds to Tunix's config (`CliOptions`) and its
  error type.
- `base_config`: resolves Tunix's `base_config.yaml` argument.
- `checkpoints`: local Hugging Face Qwen3 checkpoints as CLI models.
- `data`: Tunix's batched dataset, dealt to hosts in full global batches.

What mcjax can run is `tunix_mcjax.rules`; the Tunix CLI names it rebinds
are `tunix_mcjax.compat.tunix_cli`.
"""
