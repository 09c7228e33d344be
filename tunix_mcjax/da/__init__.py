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

"""The disaggregated mode (LoCoJAX-DA): rollout hosts and trainer hosts apart.

Trainer hosts form one multi-controller JAX program among themselves
(`cluster.McJaxDaRLCluster`, the "mcjax_da" backend); rollout hosts are
separate Ray actors with their own local engines (`rollout_host`), joined to
no JAX world with the trainers. Ray starts and supervises both groups
(`ray_local`, `launcher`); weights cross the split through Ray's object
store; rollouts may be up to `max_staleness` policy versions old, corrected
by truncated importance weights (`importance`). See docs/disaggregated.md.
"""
