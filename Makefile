# changelake — run `make` for the list of targets.
.DEFAULT_GOAL := help
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

export CHANGELAKE_HOME ?= $(CURDIR)/.changelake
export CHANGELAKE_TABLES ?= $(CURDIR)/tables
export UV_LINK_MODE ?= copy
# uv from PATH, else the one `make uv` installs with pip.
UV = $(shell command -v uv 2>/dev/null || echo "python3 -m uv")
PY := .venv/bin/python
PYTEST_ARGS ?=

.PHONY: help setup uv check-java test lint format demo bench clean

help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

uv: ## Install uv with pip if it is missing
	@command -v uv >/dev/null 2>&1 || python3 -m uv --version >/dev/null 2>&1 || python3 -m pip install --quiet uv

check-java: ## Fail early unless Java >= 17 is on PATH (Spark needs it)
	@infra/check_java.sh

setup: uv check-java ## Create the data environment (.venv) from uv.lock
	@$(UV) sync --frozen --quiet
	@echo "data env ready: $$($(PY) -c 'import pyspark, pyiceberg; print("pyspark", pyspark.__version__, "pyiceberg", pyiceberg.__version__)')"

test: setup ## Run the whole test suite (unit + Spark integration + crash/race tests)
	$(PY) -m pytest $(PYTEST_ARGS)

lint: setup ## ruff lint and format check
	$(PY) -m ruff check spark_apps tests benchmarks dags infra
	$(PY) -m ruff format --check spark_apps tests benchmarks dags infra

format: setup ## Apply ruff formatting and safe fixes
	$(PY) -m ruff check --fix spark_apps tests benchmarks dags infra
	$(PY) -m ruff format spark_apps tests benchmarks dags infra

demo: setup ## Generate sample batches, apply them, print what happened
	$(PY) infra/demo.py

bench: setup ## Run the apply benchmarks (5M-row table) and write benchmarks/results/latest.json
	$(PY) benchmarks/bench_apply.py

clean: ## Remove local data ($$CHANGELAKE_HOME) and caches (keeps the environments)
	rm -rf "$(CHANGELAKE_HOME)" .pytest_cache .ruff_cache .hypothesis spark-warehouse metastore_db derby.log
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
