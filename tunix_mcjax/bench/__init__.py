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

"""Side-by-side benchmark of stock Tunix and the mcjax backend.

`python -m tunix_mcjax.bench --mode quick|full|packing` (or `make bench`;
packing: packed vs unpacked on GSM8K prompts) runs the
arms of `arms.MODES[mode]` on identical work (`launches` each), then
micro-benchmarks, and writes runs/bench/report.json, report.md,
step_time.png, phases.png and breakdown.png. Modules: `arms` (what runs),
`harness` (running it), `stats` (the measurement protocol and the paper's
verdict), `traces` (step breakdown from profiler traces), `report`
(outputs), `micro` (micro-benchmarks), `device_job` (one process of
scripts/bench_device.py, the prepared GPU run).
"""
