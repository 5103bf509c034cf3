"""What ``make run`` installs: the runtime dependencies only. What a deployment turns on
(PostgreSQL, PEM-signed JWTs, traces) comes as an extra, and its absence is named."""

from __future__ import annotations

import logging
import re
import sys
import tomllib
from pathlib import Path

import pytest

from agentik import tracing
from engine_service.stores import migrate_store, open_store

ROOT = Path(__file__).resolve().parents[1]


def make_rule(target: str) -> str:
    """The recipe line(s) and prerequisites of a Makefile target."""
    text = (ROOT / "Makefile").read_text()
    match = re.search(rf"^{re.escape(target)}:(.*?)(?=^\S|\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, f"no {target} target"
    return match.group(1)


def test_make_run_installs_the_runtime_dependencies_and_make_test_the_dev_ones() -> None:
    assert make_rule("run").split()[0] == "install"
    assert make_rule("install").split() == ["$(STAMP)"]
    assert "install --quiet -e .\n" in make_rule("$(STAMP)")
    assert ".[dev]" not in make_rule("$(STAMP)")
    # The dev stamp is its own file, made after the runtime one: `make test` after
    # `make run` still installs the dev dependencies.
    assert make_rule("$(DEVSTAMP)").split()[0] == "$(STAMP)"
    assert "-e '.[dev]'" in make_rule("$(DEVSTAMP)")
    for target in ("test", "lint", "typecheck", "pytest"):
        assert make_rule(target).split()[0] == "dev-install", target


def test_the_runtime_dependencies_leave_out_the_tools_and_the_optional_parts() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = " ".join(project["dependencies"])
    for optional in ("openai", "psycopg", "opentelemetry-sdk", "pytest", "mypy", "[crypto]"):
        assert optional not in runtime, optional
    assert set(project["optional-dependencies"]) >= {"postgres", "jwt", "tracing", "dev"}
    assert "agentik[all]" in project["optional-dependencies"]["dev"]


def test_package_data_ships_the_chat_page_and_the_openapi_document() -> None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert data["package-data"]["web_facade"] == ["openapi.json", "static/*", "static/**/*"]
    assert "py.typed" in data["package-data"]["*"]
    for package in ("engine_service", "web_facade", "agentik_chat", "agentik_mcp"):
        assert (ROOT / package / "py.typed").is_file(), package
    assert (ROOT / "web_facade" / "openapi.json").is_file()
    assert any((ROOT / "web_facade" / "static").iterdir())


def test_a_postgresql_store_without_the_driver_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg: ImportError

    for attempt in (open_store, migrate_store):
        with pytest.raises(ValueError, match=r"pip install 'agentik\[postgres\]'"):
            attempt("postgresql://agentik@127.0.0.1/agentik")


def test_traces_without_the_sdk_stay_off_and_say_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.resources", None)
    assert not tracing.enabled()

    with caplog.at_level(logging.WARNING):
        assert tracing.setup("agentik-test") is False

    assert not tracing.enabled()
    assert "pip install 'agentik[tracing]'" in caplog.text
