# Faultplane: `make demo` and `make test` set everything up from a fresh clone.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)

.PHONY: demo test bench lint typecheck services conformance clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@rm -f $(VENV)/.installed-*; touch $@

demo: $(STAMP)
	$(VENV)/bin/faultplane demo

services:
	bash scripts/install-services.sh

# Node 22 and the official MCP conformance suite from npm (tests/mcp/test_mcp_conformance.py).
conformance:
	bash scripts/install-conformance.sh .cache/conformance >/dev/null

# Two parts: everything on TEST_WORKERS processes (a file stays on one worker, so module fixtures run once),
# then the `serial` tests alone, so their real-time figures are not measured beside another test's load.
TEST_WORKERS ?= 2
test: $(STAMP) services conformance
	FAULTPLANE_CONFORMANCE_DIR=$(CURDIR)/.cache/conformance $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not serial" --durations=30
	FAULTPLANE_CONFORMANCE_DIR=$(CURDIR)/.cache/conformance $(PY) -m pytest -q -m serial --durations=15

bench: $(STAMP)
	$(PY) -m pip install -q -e '.[test,bench]'
	$(PY) benchmarks/run.py

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks

typecheck: $(STAMP)
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
