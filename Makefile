# changelake — run `make` for the list of targets.
.DEFAULT_GOAL := help
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

export CHANGELAKE_HOME ?= $(CURDIR)/.changelake
export CHANGELAKE_TABLES ?= $(CURDIR)/examples/tables
export UV_LINK_MODE ?= copy
# Bytecode compiled at install: where PYTHONDONTWRITEBYTECODE is set (as on CI machines), every process
# otherwise recompiles pyspark, pyiceberg, pandas and Airflow from source (3.7 of the 6.9 s of a CLI apply).
export UV_COMPILE_BYTECODE ?= 1
# uv from PATH, else the one `make uv` installs with pip.
UV = $(shell command -v uv 2>/dev/null || echo "python3 -m uv")
PY := .venv/bin/python
PYTEST_ARGS ?=

AIRFLOW_PY := .venv-airflow/bin/python
SPARK_MASTER ?=

.PHONY: help setup uv check-java test test-unit test-data test-airflow lint format demo demo-s3 bench clean airflow airflow-stop \
	spark-cluster spark-cluster-stop apply

help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

uv: ## Install uv with pip if it is missing
	@command -v uv >/dev/null 2>&1 || python3 -m uv --version >/dev/null 2>&1 || python3 -m pip install --quiet uv

check-java: ## Fail early unless Java >= 17 is on PATH (Spark needs it)
	@infra/check_java.sh

# The jars are fetched beside the two environments' syncs (Maven mostly waits on the network and copies files,
# uv compiles bytecode): in a fresh clone that takes the jars' ~half a minute off the set-up. Once the data env
# is there, the test JVMs' class-data archive of Spark's classes is built beside the rest (tests/jvm_archive.py;
# it never fails the set-up: the tests run without it, slower).
setup: uv check-java ## Create both environments from their lock files (.venv, .venv-airflow); pinned JVM jars (.cache/jars: Spark's, the S3 endpoint's, the REST catalog's); the test JVMs' class-data archive (.cache/jvm-cds); the PostgreSQL server for tests
	@set -e; jars_log=$$(mktemp); infra/jars.sh spark kafka s3 rest >"$$jars_log" 2>&1 & jars=$$!; \
	trap 'kill $$jars 2>/dev/null || true; rm -f "$$jars_log"' EXIT; \
	$(UV) sync --frozen --quiet; \
	echo "data env ready: $$($(PY) -c 'import pyspark, pyiceberg; print("pyspark", pyspark.__version__, "pyiceberg", pyiceberg.__version__)')"; \
	cds_log=$$(mktemp); $(PY) -m tests.jvm_archive >"$$cds_log" 2>&1 & cds=$$!; \
	trap 'kill $$jars $$cds 2>/dev/null || true; rm -f "$$jars_log" "$$cds_log"' EXIT; \
	UV_PROJECT_ENVIRONMENT=$(CURDIR)/.venv-airflow $(UV) sync --frozen --quiet --project infra/airflow; \
	echo "airflow env ready: apache-airflow $$($(AIRFLOW_PY) -c 'import importlib.metadata as m; print(m.version("apache-airflow"))')"; \
	$(PY) -m compileall -q -j 0 src spark_apps dags >/dev/null; \
	infra/datadocs_assets.sh; \
	wait $$cds; cat "$$cds_log"; \
	status=0; wait $$jars || status=$$?; cat "$$jars_log"; exit $$status
	@echo "changelake's Spark classes: $$($(PY) -m changelake.runtime.jvm)"
	@infra/postgres.sh

# Both cores: the data env's tests on two pytest-xdist workers (each with its own SparkSession; tests/conftest.py
# says what must not run at once), and the Airflow env's tests beside them (they mostly wait on Airflow's
# scheduler and on spark-submit), their output shown after the data env's. TEST_WORKERS=0 runs one process.
TEST_WORKERS ?= 2
test: setup ## Run the whole test suite: data env (unit, Spark, crash/race, cluster) beside the Airflow env (DAGs, e2e)
	@log=$$(mktemp); \
	$(AIRFLOW_PY) -m pytest -c infra/airflow/pytest.ini --rootdir=. tests/orchestration $(PYTEST_ARGS) >"$$log" 2>&1 & \
	airflow=$$!; rc=0; \
	$(PY) -m pytest $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist worksteal) $(PYTEST_ARGS) || rc=$$?; \
	wait $$airflow || { status=$$?; [ $$rc -ne 0 ] || rc=$$status; }; \
	echo "== the Airflow env's tests (tests/orchestration)"; cat "$$log"; rm -f "$$log"; exit $$rc

# The data env alone (no Java, Airflow env or PostgreSQL needed), on both cores; --no-jvm fails the run if a test
# starts Java (on any worker: they share the controller's stub java).
test-unit: uv ## The fast loop, under a minute: the data env's unit tests (marker unit: no JVM, no Spark)
	@$(UV) sync --frozen --quiet
	$(PY) -m pytest -q -m unit --no-jvm $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist worksteal) $(PYTEST_ARGS)

test-data: setup ## Only the data env's tests
	$(PY) -m pytest $(PYTEST_ARGS)

test-airflow: setup ## Only the Airflow env's tests (DAG integrity, end-to-end DAG runs)
	$(AIRFLOW_PY) -m pytest -c infra/airflow/pytest.ini --rootdir=. tests/orchestration $(PYTEST_ARGS)

airflow: setup ## Start Airflow standalone (UI on $$AIRFLOW_PORT, default 8080) in the background; print URL and login
	@infra/airflow/standalone.sh start

airflow-stop: ## Stop the Airflow started by `make airflow`
	@infra/airflow/standalone.sh stop

spark-cluster: setup ## Start a Spark standalone master + worker on 127.0.0.1:7077
	@infra/spark_cluster.sh start

spark-cluster-stop: ## Stop the standalone cluster
	@infra/spark_cluster.sh stop

.PHONY: s3 s3-stop rest-catalog rest-catalog-stop bench-s3
s3: setup ## Start a local S3 endpoint (S3Proxy, loopback, keys generated per start; S3_PORT); print the env file to source
	@infra/s3.sh start

s3-stop: ## Stop the S3 endpoint started by `make s3` (its objects stay in $$CHANGELAKE_HOME/s3/data)
	@infra/s3.sh stop

rest-catalog: s3 ## Start a local Iceberg REST catalog (loopback, token required; REST_PORT) storing tables on the S3 endpoint
	@infra/rest_catalog.sh start

rest-catalog-stop: ## Stop the REST catalog started by `make rest-catalog`
	@infra/rest_catalog.sh stop

.PHONY: sql sql-stop kafka kafka-stop demo-kafka bench-compact-scale bench-latency bench-dbt bench-small bench-longrun bench-kafka bench-kafka-source bench-spark
sql: setup ## Start the warm SQL endpoint (Spark Connect + Thrift/JDBC, loopback) in the background; print URLs
	@SPARK_MASTER="$(SPARK_MASTER)" infra/spark_server.sh start

sql-stop: ## Stop the SQL endpoint started by `make sql`
	@infra/spark_server.sh stop

kafka: setup ## Start a local Kafka broker (Apache Kafka's jars, KRaft, SASL login, loopback; KAFKA_PORT, default 9092); print its address
	@infra/kafka.sh start

kafka-stop: ## Stop the Kafka broker started by `make kafka`
	@infra/kafka.sh stop

# spark-submit starts the driver's JVM itself: it gets the jars the session builder would add (runtime/jvm.py).
SPARK_JARS = $(shell ls $(CURDIR)/.cache/jars/spark/*.jar $(CURDIR)/.cache/jars/changelake/*.jar 2>/dev/null | paste -sd, -)
apply: setup ## spark-submit the apply app for all pending batches (SPARK_MASTER=spark://127.0.0.1:7077 for the cluster)
	PYSPARK_PYTHON=$(CURDIR)/.venv/bin/python .venv/bin/spark-submit $(if $(SPARK_MASTER),--master $(SPARK_MASTER)) --jars "$(SPARK_JARS)" \
		--conf spark.pyspark.python=$(CURDIR)/.venv/bin/python spark_apps/apply_app.py

# Lint runs on the data env's tools (the dev group): ruff over every Python file in the repository (`.`:
# ruff skips what .gitignore does, the environments among it), sqlfluff over the dbt project, mypy over the
# library. Each is also a git hook (.pre-commit-config.yaml). ruff format also rewrites the Python examples in
# Markdown files; the docs align their comments by hand, so it formats Python files only.
SQL_PATHS := dbt_project/models dbt_project/macros
.PHONY: lint-py lint-sql typecheck
lint: setup lint-py lint-sql typecheck ## All static checks (seconds): ruff, sqlfluff (dbt models), mypy (library)
	.venv/bin/lint-imports --no-cache  # the layer contracts in .importlinter (docs/architecture.md#layers)

lint-py: setup ## ruff lint and format check of every Python file
	$(PY) -m ruff check .
	$(PY) -m ruff format --check --extend-exclude '*.md' .

lint-sql: setup ## sqlfluff over the dbt models and macros (jinja templater: no Spark needed; .sqlfluff)
	$(PY) -m sqlfluff lint $(SQL_PATHS)

typecheck: setup ## mypy over src/changelake, non-strict ([tool.mypy]; cached in .mypy_cache)
	$(PY) -m mypy

format: setup ## Apply ruff formatting and safe fixes, and sqlfluff's fixes to the dbt SQL
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format --extend-exclude '*.md' .
	$(PY) -m sqlfluff fix $(SQL_PATHS)

demo: setup ## Land sample batches and run the Airflow pipeline end to end (apply), then print a summary
	@infra/demo.sh

demo-s3: setup ## The demo on object storage: warehouse and landing zone on a local S3 endpoint, tables behind a local Iceberg REST catalog (both started and stopped for it; S3_PORT, REST_PORT)
	@CHANGELAKE_HOME="$(CURDIR)/.changelake-s3" CHANGELAKE_DEMO_S3=1 infra/demo.sh

demo-kafka: setup ## The demo with Kafka topics as the sources: a local broker, the demo's changes produced into topics (upsert-kafka Avro/Confluent, Debezium, Canal, Maxwell, changelog JSON), then the pipeline
	@CHANGELAKE_HOME="$(CURDIR)/.changelake-kafka" CHANGELAKE_DEMO_KAFKA=1 infra/demo.sh

BENCH_ARGS ?=
bench: setup ## Apply benchmark beside delta-rs, DuckDB, pyiceberg (5M rows; BENCH_ARGS=--huge: +20M batch) -> docs/benchmarks.md
	@$(UV) sync --frozen --quiet --group bench
	@rc=0; $(PY) benchmarks/bench_apply.py $(BENCH_ARGS) || rc=$$?; $(PY) benchmarks/render_results.py; exit $$rc

LATENCY_ARGS ?=
bench-small: setup ## Small batches (100/1k/10k records) into 1M and 5M rows beside delta-rs; scans before/after compaction (SMALL_ARGS=--huge: +20M; --s3 [--catalog rest]: on the local S3 endpoint) -> docs/benchmarks.md
	@$(UV) sync --frozen --quiet --group bench
	@rc=0; $(PY) benchmarks/bench_small.py $(SMALL_ARGS) || rc=$$?; $(PY) benchmarks/render_results.py; exit $$rc

bench-longrun: setup ## Thousands of small batches in one process: files, bytes, metadata and batch time stay bounded (LONGRUN_ARGS=--batches 10000; --s3 [--catalog rest]: on the local S3 endpoint) -> docs/benchmarks.md
	@rc=0; $(PY) benchmarks/bench_longrun.py $(LONGRUN_ARGS) || rc=$$?; $(PY) benchmarks/render_results.py; exit $$rc

bench-kafka: setup ## upsert-kafka key/value formats: Avro and Confluent-wire decode beside the JSON paths (KAFKA_ARGS=--records N) -> docs/benchmarks.md
	@rc=0; $(PY) benchmarks/bench_kafka_formats.py $(KAFKA_ARGS) || rc=$$?; $(PY) benchmarks/render_results.py; exit $$rc

bench-kafka-source: setup ## Kafka topics as a source: records/s beside the same records landed as files, and freshness with `stream` (KAFKA_SOURCE_ARGS=--records N) -> docs/benchmarks.md
	@rc=0; $(PY) benchmarks/bench_kafka_source.py $(KAFKA_SOURCE_ARGS) || rc=$$?; $(PY) benchmarks/render_results.py; exit $$rc

S3_BENCH_ARGS ?=
bench-s3: setup ## The apply and the reads on the local S3 endpoint beside local disk, with each batch's requests (S3_BENCH_ARGS=--rows N) -> docs/benchmarks.md
	@rc=0; $(PY) benchmarks/bench_s3.py $(S3_BENCH_ARGS) || rc=$$?; $(PY) benchmarks/render_results.py; exit $$rc

bench-compact-scale: setup ## A full compaction of a >= 3 GB table in Spark tasks with spark.driver.memory=512m (COMPACT_SCALE_ARGS=--gb N) -> docs/benchmarks.md
	@rc=0; $(PY) benchmarks/bench_compact_scale.py $(COMPACT_SCALE_ARGS) || rc=$$?; $(PY) benchmarks/render_results.py; exit $$rc

bench-latency: setup ## CLI latency on the bench's 5M-row table (lookup, scan, status, changelog; warm vs cold 100-record apply) -> docs/benchmarks.md
	@rc=0; $(PY) benchmarks/bench_latency.py $(LATENCY_ARGS) || rc=$$?; $(PY) benchmarks/render_results.py; exit $$rc

DBT_BENCH_ARGS ?=
bench-dbt: setup ## Plain dbt (--target thrift) and PyHive on the warm endpoint beside `changelake dbt build` (demo tables) -> docs/benchmarks.md
	@rc=0; $(PY) benchmarks/bench_dbt.py $(DBT_BENCH_ARGS) || rc=$$?; $(PY) benchmarks/render_results.py; exit $$rc

# Bench only: the peers' jars (infra/jars/bench-spark41, bench-spark35) and the pyspark 3.5 environment of the
# peers without a Spark 4 build (benchmarks/spark35, into .venv-spark35) are fetched here, never by setup.
SPARK_BENCH_ARGS ?=
bench-spark: setup ## changelake beside Iceberg, Delta, Hudi and Paimon on the same Spark (5M rows; load, batch + changelog, 20 small batches, aggregation) -> docs/benchmarks.md
	@UV_PROJECT_ENVIRONMENT=$(CURDIR)/.venv-spark35 $(UV) sync --frozen --quiet --project benchmarks/spark35
	@infra/jars.sh bench-spark41 bench-spark35
	@rc=0; $(PY) benchmarks/bench_spark.py $(SPARK_BENCH_ARGS) || rc=$$?; $(PY) benchmarks/render_results.py; exit $$rc

clean: ## Remove local data ($$CHANGELAKE_HOME) and caches (keeps the environments)
	rm -rf "$(CHANGELAKE_HOME)" .pytest_cache .ruff_cache .mypy_cache .hypothesis spark-warehouse metastore_db derby.log
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
