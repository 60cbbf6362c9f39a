# One target per habit. Every target builds .venv at the repo root on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

# Demo knobs: where the embedded stack lives.
ICEFLOE_HOME ?= $(CURDIR)/.icefloe
export ICEFLOE_HOME

.PHONY: venv test test-unit test-integration lint demo bench clean stop

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "icefloe needs Python 3.11+, found " + sys.version.split()[0])'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

lint: venv
	$(BIN)/ruff check shared functions infra tests benchmarks
	$(BIN)/ruff format --check shared functions infra tests benchmarks
	$(BIN)/mypy
	$(BIN)/cfn-lint template.yaml

# Every tier: lint, unit, integration (real Postgres, moto), end to end.
test: lint
	$(PY) -m pytest

test-unit: venv
	$(PY) -m pytest tests/unit

test-integration: venv
	$(PY) -m pytest tests/integration

# The whole pipeline on embedded defaults. DEMO_EVENTS / DEMO_BATCH are the knobs.
DEMO_EVENTS ?= 300000
DEMO_BATCH  ?= 2000
demo: venv
	$(BIN)/icefloe init
	$(BIN)/icefloe demo --events $(DEMO_EVENTS) --batch-size $(DEMO_BATCH)
	$(BIN)/icefloe status events
	$(BIN)/icefloe compact events --partition day=2026-11-01 --engine spark
	$(BIN)/icefloe merge events --wait
	$(BIN)/icefloe gc events --retention 0s
	$(BIN)/icefloe table show events
	$(BIN)/icefloe status events

# Benchmarks write benchmarks/results/*.json and print a summary; BENCH_SCALE=small|full.
BENCH_SCALE ?= full
bench: venv
	$(PY) -m benchmarks.metastore_bench --scale $(BENCH_SCALE)
	$(PY) -m benchmarks.insert_bench --scale $(BENCH_SCALE)
	$(PY) -m benchmarks.query_bench --scale $(BENCH_SCALE)
	$(PY) -m benchmarks.s3_read_bench --scale $(BENCH_SCALE)
	$(PY) -m benchmarks.merge_bench --scale $(BENCH_SCALE)
	$(PY) -m benchmarks.compaction_bench --scale $(BENCH_SCALE)

stop: venv
	$(BIN)/icefloe db stop

clean:
	rm -rf .icefloe .pytest_cache .mypy_cache .ruff_cache .hypothesis
