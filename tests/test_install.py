"""What ``make run`` installs: the runtime dependencies only, and of those only what runs
(a2a-sdk's google-api-core is left out, see tools/install_runtime.py). What a deployment turns
on (PostgreSQL, PEM-signed JWTs, traces) comes as an extra, and its absence is named."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agentik import tracing
from engine_service.stores import migrate_store, open_store
from tests.stack import STARTUP, WAIT, free_port, wait_for
from tools.install_runtime import pip_settings, uv_arguments

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
    assert "$(BIN)/python tools/install_runtime.py\n" in make_rule("$(STAMP)")
    assert ".[dev]" not in make_rule("$(STAMP)")
    # The dev stamp is its own file, made after the runtime one: `make test` after
    # `make run` still installs the dev dependencies.
    assert make_rule("$(DEVSTAMP)").split()[0] == "$(STAMP)"
    assert "-e '.[dev]'" in make_rule("$(DEVSTAMP)")
    for target in ("test", "lint", "typecheck", "pytest"):
        assert make_rule(target).split()[0] == "dev-install", target


def _make_install(venv: Path, *variables: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), "install", f"VENV={venv}", *variables],
        env=_clean_environment(),
        capture_output=True,
        text=True,
        timeout=STARTUP,
        check=False,
    )


_RUNNING = ".".join(str(n) for n in sys.version_info[:3])
# The interpreter running the tests stands in for an old one: the minimum is raised above it.
_ABOVE = "PYTHON_MIN=3.99"


def test_the_makefile_asks_for_the_python_pyproject_requires() -> None:
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    minimum = re.search(r"^PYTHON_MIN\s*:=\s*(\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert minimum is not None and requires == f">={minimum[1]}"


def test_an_old_python_is_named_in_one_line_with_the_fix_before_any_venv_is_made(
    tmp_path: Path,
) -> None:
    venv = tmp_path / "venv"
    made = _make_install(venv, f"PYTHON={sys.executable}", _ABOVE)

    assert made.returncode != 0
    said = made.stderr.splitlines()[0]
    assert said == (
        f"agentik needs Python 3.99 or newer, and {sys.executable} is Python {_RUNNING}: "
        "run make install PYTHON=python3.99 (or give the path of a newer python)"
    ), made.stderr
    assert not venv.exists()
    assert "resolving dependencies" not in made.stdout + made.stderr


def test_a_venv_an_old_python_made_is_named_with_how_to_remove_it(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=STARTUP
    )

    made = _make_install(venv, _ABOVE)

    assert made.returncode != 0
    said = made.stderr.splitlines()[0]
    assert said.startswith(f"{venv} was made by an older Python ({venv}/bin/python is Python "), (
        said
    )
    assert f"Python {_RUNNING})" in said and f"make clean, or rm -rf {venv}" in said, said
    assert not (venv / ".installed").exists()


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


# Issue 28: `make run` installs at most half of the 123 distributions of the dev install
# (counted as `pip list` counts them: pip, setuptools and agentik included). 65 before
# google-api-core was left out, 57 after.
RUNTIME_MOST = 61
# google-api-core and what only it brings: a2a-sdk declares it and never imports it.
LEFT_OUT = (
    "google-api-core",
    "google-auth",
    "proto-plus",
    "requests",
    "urllib3",
    "charset-normalizer",
    "pyasn1",
    "pyasn1-modules",
)
# What a2a-sdk does import (google.api, google.rpc), and what the facade's /mcp needs.
KEPT = ("googleapis-common-protos", "a2a-sdk", "mcp", "a2wsgi", "cryptography", "agentik")
# Every module of the packages must import in the runtime venv, but these need an extra.
NEEDS_AN_EXTRA = ("engine_service.stores.postgres",)
_IMPORT_EVERY_MODULE = """
import importlib, json, pkgutil, sys
failed = {}
for top in sys.argv[1:]:
    for module in pkgutil.walk_packages(importlib.import_module(top).__path__, top + "."):
        if not module.name.endswith("__main__"):
            try:
                importlib.import_module(module.name)
            except Exception as exc:
                failed[module.name] = repr(exc)
print(json.dumps(failed))
"""
# The packages the distribution ships.
PACKAGES = [
    pattern.removesuffix("*")
    for pattern in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"
    ]["find"]["include"]
]


def test_pip_settings_follow_pip_s_precedence_variables_then_install_then_global() -> None:
    listing = "\n".join(
        [
            ":env:.default-timeout='180'",
            ":env:.find-links='/env/wheels'",
            "freeze.exclude='pip'",
            "global.extra-index-url='file:///a/simple file:///b/simple'",
            "global.find-links='/etc/wheels'",
            "global.index-url='https://global.example/simple'",
            "install.index-url='https://install.example/simple'",
        ]
    )
    assert pip_settings(listing) == {
        "timeout": "180",
        "find-links": "/env/wheels",
        "extra-index-url": "file:///a/simple file:///b/simple",
        "index-url": "https://install.example/simple",
    }
    assert pip_settings("") == {}


def test_uv_is_given_the_indexes_find_links_constraints_and_certificate_pip_has() -> None:
    arguments, environment = uv_arguments(
        {
            "index-url": "https://mirror.example/simple",
            "extra-index-url": "file:///a/simple  file:///b/simple",
            "find-links": "/opt/wheels",
            "constraint": "/etc/pip/constraints.txt",
            "trusted-host": "mirror.example",
            "no-index": "yes",
            "cert": "/etc/ssl/certs/ca.crt",
            "timeout": "180",
            "disable-pip-version-check": "1",
        }
    )

    assert arguments == [
        *("--index-strategy", "unsafe-best-match"),
        *("--default-index", "https://mirror.example/simple"),
        *("--index", "file:///a/simple", "--index", "file:///b/simple"),
        *("--find-links", "/opt/wheels"),
        *("--constraint", "/etc/pip/constraints.txt"),
        *("--allow-insecure-host", "mirror.example"),
        "--no-index",
    ]
    assert environment == {"SSL_CERT_FILE": "/etc/ssl/certs/ca.crt", "UV_HTTP_TIMEOUT": "180"}
    assert uv_arguments({"no-index": "false"}) == (["--index-strategy", "unsafe-best-match"], {})


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _clean_environment() -> dict[str, str]:
    """This process's environment without the dev venv, the outer make and agentik's
    settings: what a fresh shell running `make run` has."""
    dropped = ("VIRTUAL_ENV", "PYTHONPATH", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")
    return {
        name: value
        for name, value in os.environ.items()
        if name not in dropped and not name.startswith(("AGENTIK_", "OPENAI_"))
    }


@pytest.fixture(scope="module")
def runtime_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv made by `make install` (what `make run` runs first), as on a fresh clone."""
    venv = tmp_path_factory.mktemp("runtime") / "venv"
    made = subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), "install", f"VENV={venv}"],
        env=_clean_environment(),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    return venv


@pytest.mark.timeout(300)
def test_make_run_installs_at_most_half_the_distributions_and_no_google_api_core(
    runtime_venv: Path,
) -> None:
    listed = subprocess.run(
        [runtime_venv / "bin" / "python", "-m", "pip", "list", "--format=json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=WAIT * 4,
    )
    names = {_normalized(row["name"]) for row in json.loads(listed.stdout)}

    assert len(names) <= RUNTIME_MOST, sorted(names)
    # README.md says how many: on Python 3.11, and one fewer on 3.12+ (no setuptools).
    readme = " ".join((ROOT / "README.md").read_text().split())
    said = re.search(r"only what runs: (\d+) distributions in `.venv` on Python 3\.11", readme)
    assert said, "README.md's Packaging section no longer says how many distributions"
    assert len(names) == int(said[1]) - (sys.version_info >= (3, 12)), sorted(names)
    assert names.isdisjoint(LEFT_OUT), sorted(names.intersection(LEFT_OUT))
    assert names.issuperset(KEPT), sorted(set(KEPT) - names)
    # What pip sees missing is what was left out on purpose, and nothing else (no line at all
    # once an a2a-sdk release stops declaring it).
    checked = subprocess.run(
        [runtime_venv / "bin" / "python", "-m", "pip", "check"],
        capture_output=True,
        text=True,
        check=False,
        timeout=WAIT * 4,
    )
    left_out = re.compile(r"a2a-sdk \S+ requires google-api-core, which is not installed\.")
    assert all(left_out.fullmatch(line) for line in checked.stdout.splitlines()), checked.stdout
    # uv installed them and is not among them, nor anywhere in the venv.
    assert "uv" not in names and not list(runtime_venv.rglob("uv")), list(runtime_venv.rglob("uv"))


@pytest.mark.timeout(300)
def test_every_module_imports_in_the_runtime_venv_but_those_needing_an_extra(
    runtime_venv: Path, tmp_path: Path
) -> None:
    ran = subprocess.run(
        [runtime_venv / "bin" / "python", "-c", _IMPORT_EVERY_MODULE, *PACKAGES],
        cwd=tmp_path,
        env=_clean_environment(),
        capture_output=True,
        text=True,
        timeout=STARTUP,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    failed: dict[str, str] = json.loads(ran.stdout)

    assert failed, "the postgres store's modules need the postgres extra"
    assert all(name.startswith(NEEDS_AN_EXTRA) for name in failed), failed
    assert all("psycopg" in error for error in failed.values()), failed


@pytest.fixture
def served(runtime_venv: Path, tmp_path: Path) -> Iterator[str]:
    """`agentik serve` from the runtime venv on free ports, offline model, in-memory store:
    the URL of its facade."""
    http_port, grpc_port = free_port(), free_port()
    env = {
        **_clean_environment(),
        "AGENTIK_HTTP_ADDR": f"127.0.0.1:{http_port}",
        "AGENTIK_GRPC_ADDR": f"127.0.0.1:{grpc_port}",
        "AGENTIK_STORE": "memory://",
        "AGENTIK_WEB_WORKERS": "1",
    }
    base_url = f"http://127.0.0.1:{http_port}"
    with (tmp_path / "serve.log").open("wb") as log:
        serve = subprocess.Popen(
            [runtime_venv / "bin" / "agentik", "serve"],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

        def healthy() -> bool:
            assert serve.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                return httpx.get(f"{base_url}/health", timeout=2.0).status_code == 200
            except httpx.TransportError:
                return False

        try:
            wait_for(healthy, "agentik serve to be healthy", within=STARTUP)
            yield base_url
        finally:
            serve.send_signal(signal.SIGTERM)
            try:
                serve.wait(WAIT)
            except subprocess.TimeoutExpired:
                serve.kill()
                serve.wait(WAIT)
                raise AssertionError("agentik serve did not stop on SIGTERM") from None


@pytest.mark.timeout(300)
@pytest.mark.processes
def test_the_runtime_venv_answers_an_a2a_request_and_an_mcp_client(
    runtime_venv: Path, served: str
) -> None:
    version = subprocess.run(
        [runtime_venv / "bin" / "agentik", "--version"],
        capture_output=True,
        text=True,
        check=True,
        timeout=STARTUP,
    )
    assert version.stdout.startswith("agentik ")

    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "hello"}]}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test_install", "version": "1"},
        },
    }
    with httpx.Client(base_url=served, timeout=WAIT) as http:
        card = http.get("/.well-known/agent-card.json")
        reply = http.post("/", json=body, headers={"A2A-Version": "1.0"})
        # /mcp: the MCP SDK's server (cryptography) through a2wsgi, both kept for it.
        mcp = http.post(
            "/mcp", json=initialize, headers={"Accept": "application/json, text/event-stream"}
        )

    assert card.status_code == 200 and card.json()["name"] == "agentik"
    assert reply.status_code == 200, reply.text
    task = reply.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    assert task["artifacts"][0]["parts"][0]["text"].startswith('You said: "hello"')
    assert mcp.status_code == 200, mcp.text
    assert '"tools":' in mcp.text and '"serverInfo":' in mcp.text, mcp.text
