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

.PHONY: help venv demo test test-fast lock clean

help:
	@echo "make demo   - run the main job (GRPO, mcjax backend, 2 simulated hosts x 4 CPU devices)"
	@echo "make test   - run every test (creates $(VENV) first)"
	@echo "make venv   - create/refresh $(VENV) from requirements/main.lock"
	@echo "make lock   - re-resolve requirements/main.in into requirements/main.lock"

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

lock:
	rm -rf .venv-lock && "$(PYTHON312)" -m venv .venv-lock
	.venv-lock/bin/pip install -q --upgrade "pip==25.3" && .venv-lock/bin/pip install -q -r requirements/main.in
	{ sed -n '1,/^$$/p' requirements/main.lock; .venv-lock/bin/pip freeze --all --exclude-editable | grep -v "^pip=="; } > requirements/main.lock.new
	mv requirements/main.lock.new requirements/main.lock && rm -rf .venv-lock

clean:
	rm -rf $(VENV) runs .pytest_cache
