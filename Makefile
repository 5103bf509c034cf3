# agentik — the two commands that matter: `make run` and `make test`.
VENV     ?= .venv
PYTHON   ?= python3
BIN      := $(VENV)/bin
STAMP    := $(VENV)/.installed
DEVSTAMP := $(VENV)/.installed-dev
NODE_DIR := tests/node
PROTO    := proto/agentik/engine/v1/engine.proto

.PHONY: install dev-install run engine web test lint typecheck pytest proto proto-lint node-deps browser bench clean

# agentik needs Python 3.11 or newer (requires-python in pyproject.toml). $(PYTHON) is checked
# before the venv is made from it, and the venv's own python before anything is installed into
# it (a venv an older python3 left behind): one line naming the version and the fix, instead of
# the resolver's text. The check runs on any Python, 2.7 included.
PYTHON_MIN := 3.11
GOAL       := $(or $(firstword $(MAKECMDGOALS)),install)
OLD_PYTHON  = agentik needs Python $(PYTHON_MIN) or newer, and %s is Python %s: \
	run make $(GOAL) PYTHON=python$(PYTHON_MIN) (or give the path of a newer python)
OLD_VENV    = $(VENV) was made by an older Python (%s is Python %s), and agentik needs \
	$(PYTHON_MIN) or newer: remove it (make clean, or rm -rf $(VENV)), then run make $(GOAL) \
	again, with PYTHON=python$(PYTHON_MIN) if $(PYTHON) is older
# $(call too_old,INTERPRETER,MESSAGE): exit 1 saying MESSAGE (its two %s: the interpreter, with
# the path it runs from when that is not how it was named, and its version) when INTERPRETER is
# older than $(PYTHON_MIN).
too_old = $(1) -c 'import os, sys; need = tuple(int(n) for n in "$(PYTHON_MIN)".split(".")); \
	got = "%d.%d.%d" % tuple(sys.version_info[:3]); named = "$(1)"; \
	who = named if os.path.abspath(named) == sys.executable else "%s (%s)" % (named, sys.executable); \
	sys.exit(0 if tuple(sys.version_info[:2]) >= need else "$(2)" % (who, got))'

$(BIN)/python:
	@$(call too_old,$(PYTHON),$(OLD_PYTHON))
	$(PYTHON) -m venv $(VENV)

# Two stamps: `make run` installs the runtime dependencies only ($(STAMP)); `make test` and
# the dev targets add the development ones ($(DEVSTAMP)), also after a `make run`. The runtime
# install goes through uv (installed with pip, from pip's configured indexes, for the time of
# the install) to leave out what a2a-sdk declares and nothing imports: see the script.
$(STAMP): pyproject.toml tools/install_runtime.py | $(BIN)/python
	@$(call too_old,$(BIN)/python,$(OLD_VENV))
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python tools/install_runtime.py
	touch $@

$(DEVSTAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

install: $(STAMP)

dev-install: $(DEVSTAMP)

## Start the product on embedded defaults (SQLite, offline model unless an LLM is configured).
run: install
	$(BIN)/agentik serve

engine: install
	$(BIN)/agentik engine

web: install
	$(BIN)/agentik web

## Everything CI runs: lint, types, proto lint and drift, the whole test suite.
test: dev-install node-deps browser lint typecheck proto-lint pytest

lint: dev-install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: dev-install
	$(BIN)/mypy

pytest: dev-install
	$(BIN)/pytest -q

proto-lint: dev-install
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
## named agentik/engine/v1/engine.proto, the modules live in agentik.rpc: see the script.
proto: dev-install
	$(BIN)/python tools/gen_proto.py

bench: dev-install
	$(BIN)/python -m bench.engine_bench

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache $(NODE_DIR)/node_modules
