# One target per habit. Every target builds .venv at the repo root on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

# Demo knobs: where the embedded stack lives.
ICEFLOE_HOME ?= $(CURDIR)/.icefloe
export ICEFLOE_HOME

.PHONY: venv test test-unit test-integration lint validate package build-CoreLayer \
	build-PublisherCoreLayer build-IcebergLayer demo bench bench-cost fuzz soak clean stop

# The SAM CLI lives in a venv of its own: its pins (boto3, click, cfn-lint) are not the project's.
SAM_CLI_VERSION := 1.170.0
SAM_VENV := .venv-sam
SAM      := $(SAM_VENV)/bin/sam
export SAM_CLI_TELEMETRY := 0
AWS_REGION ?= us-east-1

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "icefloe needs Python 3.11+, found " + sys.version.split()[0])'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

# The peers make bench compares icefloe with (pyproject's `peers` extra); make test needs none.
PEERS_STAMP := $(VENV)/.peers-stamp
$(PEERS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev,peers]'
	@touch $(PEERS_STAMP)

lint: venv
	$(BIN)/ruff check shared functions infra tests benchmarks
	$(BIN)/ruff format --check shared functions infra tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

$(SAM):
	$(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/pip install --quiet --upgrade pip
	$(SAM_VENV)/bin/pip install --quiet aws-sam-cli==$(SAM_CLI_VERSION)

# The template: cfn-lint (with the SAM transform expanded) and SAM's own validation; offline.
validate: venv $(SAM)
	$(BIN)/cfn-lint template.yaml
	$(SAM) validate --lint --region $(AWS_REGION) --template-file template.yaml

# sam build (no Docker; a python3.12 found on PATH or under pyenv compiles the layer's
# bytecode), then each function's unzipped size with its layers against Lambda's 250 MB.
# Deploy with `sam deploy --guided` after this.
package: venv $(SAM)
	$(SAM) build --template-file template.yaml --build-dir .aws-sam/build
	$(PY) infra/lambda/package_report.py --template template.yaml --build-dir .aws-sam/build

# `sam build` runs these (each layer's BuildMethod: makefile) with ARTIFACTS_DIR set, with the
# project's venv python when there is one (a system python3 may have no pip). CoreLayer serves
# every function but the publisher, which has PublisherCoreLayer and IcebergLayer
# (infra/lambda/README.md).
LAYER_PY = $(if $(wildcard $(PY)),$(PY),$(PYTHON))
build-CoreLayer:
	$(if $(ARTIFACTS_DIR),,$(error build-CoreLayer is run by sam build, which sets ARTIFACTS_DIR))
	$(LAYER_PY) infra/lambda/build_layer.py --output "$(ARTIFACTS_DIR)"

build-PublisherCoreLayer:
	$(if $(ARTIFACTS_DIR),,$(error build-PublisherCoreLayer is run by sam build, which sets ARTIFACTS_DIR))
	$(LAYER_PY) infra/lambda/build_layer.py --layer publisher-core --output "$(ARTIFACTS_DIR)"

build-IcebergLayer:
	$(if $(ARTIFACTS_DIR),,$(error build-IcebergLayer is run by sam build, which sets ARTIFACTS_DIR))
	$(LAYER_PY) infra/lambda/build_layer.py --layer iceberg --output "$(ARTIFACTS_DIR)"

# Every tier: lint, template validation, unit, integration (real Postgres, moto), end to end,
# the Lambda package (sam build, sizes, handlers imported under python3.12), in TEST_WORKERS
# processes (pytest-xdist) sharing one Postgres; the tests that may start Spark all in one.
TEST_WORKERS ?= 2

test: lint validate
	$(PY) -m pytest -n $(TEST_WORKERS)

test-unit: venv
	$(PY) -m pytest tests/unit

test-integration: venv
	$(PY) -m pytest tests/integration

# The differential tests at scale: pruned answers against unpruned ones (FUZZ_JOBS processes
# share the queries out, each runs every FUZZ_JOBS-th, so the set run is the same), then
# deletes against DuckDB's DELETE over a copy.
FUZZ_QUERIES ?= 100000
FUZZ_DELETES ?= 20000
FUZZ_SEED    ?= 20261125
FUZZ_JOBS    ?= 1
fuzz: venv
	ICEFLOE_DELETE_FUZZ=$(FUZZ_DELETES) ICEFLOE_FUZZ_SEED=$(FUZZ_SEED) $(PY) -m pytest -p no:timeout \
		-p no:cacheprovider -q tests/integration/test_delete_differential.py
	@tmp=$$(mktemp -d); pids=""; for k in $$(seq 0 $$(($(FUZZ_JOBS) - 1))); do \
		ICEFLOE_FUZZ_QUERIES=$(FUZZ_QUERIES) ICEFLOE_FUZZ_SEED=$(FUZZ_SEED) \
		ICEFLOE_FUZZ_SHARD=$$k/$(FUZZ_JOBS) $(PY) -m pytest -p no:timeout -p no:cacheprovider \
			--basetemp=$$tmp/shard$$k -q tests/integration/test_pruning_differential.py & \
		pids="$$pids $$!"; \
	done; status=0; for pid in $$pids; do wait $$pid || status=1; done; rm -rf $$tmp; exit $$status

# The chaos test for as long as asked: processes killed at random, then the lake checked.
SOAK_SECONDS ?= 600
SOAK_SEED    ?= 20261125
soak: venv
	ICEFLOE_CHAOS_SECONDS=$(SOAK_SECONDS) ICEFLOE_CHAOS_SEED=$(SOAK_SEED) \
		$(PY) -m pytest -p no:timeout -q -s tests/chaos

# The whole pipeline on embedded defaults. DEMO_EVENTS / DEMO_BATCH are the knobs.
DEMO_EVENTS ?= 300000
DEMO_BATCH  ?= 2000
DEMO_QUERIES := examples/queries
demo: venv
	$(BIN)/icefloe init
	$(BIN)/icefloe demo --events $(DEMO_EVENTS) --batch-size $(DEMO_BATCH)
	$(BIN)/icefloe status events
	$(BIN)/icefloe compact events --partition day=2026-11-01 --engine spark
	$(BIN)/icefloe merge events --wait
	$(BIN)/icefloe gc events --retention 0s
	$(BIN)/icefloe table show events
	$(BIN)/icefloe status events
	@echo; echo "Events per day ($(DEMO_QUERIES)/events_per_day.sql):"
	@$(BIN)/icefloe query -f $(DEMO_QUERIES)/events_per_day.sql
	@echo; echo "From a page to a sign-up to a purchase ($(DEMO_QUERIES)/funnel.sql):"
	@$(BIN)/icefloe query -f $(DEMO_QUERIES)/funnel.sql
	@echo; echo "The most active users ($(DEMO_QUERIES)/top_users.sql):"
	@$(BIN)/icefloe query -f $(DEMO_QUERIES)/top_users.sql
	@echo; echo 'Ask your own: $(BIN)/icefloe query "SELECT event, count(*) FROM events GROUP BY 1"'
	@echo '(or -f FILE); in Python: icefloe.connect().query("...") gives a pyarrow Table.'

# Benchmarks write benchmarks/results/*.json and print a summary; BENCH_SCALE=small|full.
BENCH_SCALE ?= full
bench: venv $(PEERS_STAMP)
	$(PY) -m benchmarks.peers_bench --scale $(BENCH_SCALE)
	$(PY) -m benchmarks.metastore_bench --scale $(BENCH_SCALE)
	$(PY) -m benchmarks.insert_bench --scale $(BENCH_SCALE)
	$(PY) -m benchmarks.stream_bench --scale $(BENCH_SCALE)
	$(PY) -m benchmarks.query_bench --scale $(BENCH_SCALE)
	$(PY) -m benchmarks.s3_read_bench --scale $(BENCH_SCALE)
	$(PY) -m benchmarks.merge_bench --scale $(BENCH_SCALE)
	$(PY) -m benchmarks.compaction_bench --scale $(BENCH_SCALE)
	$(PY) -m benchmarks.delete_bench --scale $(BENCH_SCALE)
	$(PY) -m benchmarks.evolution_bench --scale $(BENCH_SCALE)
	$(PY) -m benchmarks.cold_start_bench --scale $(BENCH_SCALE)
	$(PY) -m benchmarks.iceberg_bench --scale $(BENCH_SCALE)
	$(PY) -m benchmarks.nested_bench --scale $(BENCH_SCALE)
	$(PY) -m benchmarks.generated_bench --scale $(BENCH_SCALE)
	$(PY) -m benchmarks.changes_bench --scale $(BENCH_SCALE)
	$(PY) -m benchmarks.cost_bench --scale $(BENCH_SCALE)
	$(PY) -m benchmarks.cost_bench --scale small --knobs

# What a million events cost, measured under moto (benchmarks/cost_bench.py):
# COST_SCALE=tiny|small|full; then what each knob does to it, at small scale.
COST_SCALE ?= full
bench-cost: venv
	$(PY) -m benchmarks.cost_bench --scale $(COST_SCALE)
	$(PY) -m benchmarks.cost_bench --scale small --knobs

stop: venv
	$(BIN)/icefloe db stop

clean:
	rm -rf .aws-sam .icefloe .pytest_cache .mypy_cache .ruff_cache .hypothesis
