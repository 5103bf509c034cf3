# agentik — the two commands that matter: `make run` and `make test`.
VENV     ?= .venv
PYTHON   ?= python3
BIN      := $(VENV)/bin
STAMP    := $(VENV)/.installed
NODE_DIR := tests/node
PROTO    := proto/agentik/engine/v1/engine.proto

.PHONY: install run engine web test lint typecheck pytest proto proto-lint node-deps browser bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

install: $(STAMP)

## Start the product on embedded defaults (SQLite, offline model unless an LLM is configured).
run: install
	$(BIN)/agentik serve

engine: install
	$(BIN)/agentik engine

web: install
	$(BIN)/agentik web

## Everything CI runs: lint, types, proto lint and drift, the whole test suite.
test: install node-deps browser lint typecheck proto-lint pytest

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy

pytest: install
	$(BIN)/pytest -q

proto-lint: install
	$(BIN)/buf lint

node-deps:
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --prefix $(NODE_DIR) --no-audit --no-fund --loglevel=error; \
	else echo "npm not found: node conformance tests will be skipped"; fi

## The chat page's browser tests drive Debian's chromium with its chromedriver: installed with
## apt-get (as root) only when they are missing; elsewhere those tests skip, saying why.
browser:
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing chromium and chromium-driver (apt-get)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			chromium chromium-driver >/dev/null \
		|| echo "could not install chromium: browser tests will be skipped"; \
	else echo "chromium not found (apt-get install chromium chromium-driver): browser tests will be skipped"; fi

## Regenerate the gRPC stubs from the .proto (a test fails when they drift). The descriptor is
## named agentik/engine/v1/engine.proto, the modules live in engine_service.rpc: see the script.
proto: install
	$(BIN)/python tools/gen_proto.py

bench: install
	$(BIN)/python -m bench.engine_bench

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache $(NODE_DIR)/node_modules
