"""``agentik doctor`` finds what is wrong before a start and says how to fix it: a refused
LLM port, a wrong model, a bad setting, an unwritable store, an MCP server or an A2A agent
that is not there; a good fake LLM passes."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentik.cli import main
from tests.fakes.fake_openai import FakeOpenAI


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A user's shell in an empty directory: no agentik or OpenAI variables."""
    import os

    for name in list(os.environ):
        if name.startswith(("AGENTIK_", "OPENAI_", "OTEL_")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def doctor(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    status = main([*args, "doctor"])
    return status, capsys.readouterr().out.splitlines()


def line(lines: list[str], start: str) -> str:
    return next(text for text in lines if text.startswith(start))


def test_the_defaults_pass_with_the_offline_model(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, lines = doctor(capsys)

    assert status == 0
    assert line(lines, "ok    llm").endswith(
        "the built-in offline model (no OPENAI_BASE_URL or OPENAI_API_KEY)"
    )
    assert line(lines, "ok    store") == (
        f"ok    store   sqlite:///.agentik/agentik.db ({tmp_path}/.agentik/agentik.db, writable)"
    )
    assert lines[-1] == "all checks passed"


def test_a_sqlite_store_names_the_absolute_file_three_or_four_slashes_open(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENTIK_STORE", "sqlite:///var/lib/agentik/agentik.db")
    status, lines = doctor(capsys)
    assert status == 0
    assert f"({tmp_path}/var/lib/agentik/agentik.db, writable)" in line(lines, "ok    store")

    monkeypatch.setenv("AGENTIK_STORE", f"sqlite:///{tmp_path}/abs.db")
    status, lines = doctor(capsys)
    assert line(lines, "ok    store").endswith(
        f"sqlite:///{tmp_path}/abs.db ({tmp_path}/abs.db, writable)"
    )


def test_a_missing_postgresql_driver_is_fixed_by_installing_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg: ImportError
    monkeypatch.setenv("AGENTIK_STORE", "postgresql://agentik@127.0.0.1/agentik")

    status, lines = doctor(capsys)

    assert status == 1
    failed = line(lines, "FAIL  store")
    assert "needs the PostgreSQL driver" in failed
    assert lines[lines.index(failed) + 1].split() == [
        "fix:",
        "install",
        "the",
        "driver:",
        ".venv/bin/pip",
        "install",
        "-e",
        "'.[postgres]'",
    ]


def test_a_good_llm_that_lists_the_model_passes(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
    monkeypatch.setenv("AGENTIK_MODEL", "fake-model")

    status, lines = doctor(capsys)

    assert status == 0
    assert "ok: " in line(lines, "ok    llm") and "serves 'fake-model'" in line(lines, "ok    llm")


def test_a_wrong_model_is_named_with_the_models_there_are(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
    monkeypatch.setenv("AGENTIK_MODEL", "gtp-4o")

    status, lines = doctor(capsys)

    assert status == 1
    failed = line(lines, "FAIL  llm")
    assert "unknown model" in failed and "'gtp-4o'" in failed and "fake-model" in failed
    assert "fix: set [llm] model (AGENTIK_MODEL)" in lines[lines.index(failed) + 1]
    assert lines[-1] == "1 problem found"


def test_a_refused_llm_port_is_unreachable_with_the_fix(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{free_port()}/v1")

    status, lines = doctor(capsys)

    assert status == 1
    failed = line(lines, "FAIL  llm")
    assert "unreachable" in failed
    assert "OPENAI_BASE_URL" in lines[lines.index(failed) + 1]


def test_a_bad_setting_is_named_and_stops_the_checks(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENTIK_MAX_TOOL_ROUNDS", "many")

    status, lines = doctor(capsys)

    assert status == 2
    assert lines[0].startswith("FAIL  config  ") and "AGENTIK_MAX_TOOL_ROUNDS" in lines[0]
    assert not any("llm" in text for text in lines)


def test_an_unwritable_store_fails_with_the_fix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("not a directory")
    monkeypatch.setenv("AGENTIK_STORE", "sqlite:///file/agentik.db")

    status, lines = doctor(capsys)

    assert status == 1
    assert line(lines, "FAIL  store")
    assert "AGENTIK_STORE" in " ".join(lines)


def test_an_mcp_server_and_an_a2a_agent_that_are_not_there_fail_with_their_fixes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "agentik.toml"
    config.write_text(
        '[[mcp.servers]]\nname = "ghost"\ncommand = "/nonexistent/mcp-server"\n'
        "connect_timeout = 2.0\n"
    )
    monkeypatch.setenv("AGENTIK_A2A_AGENTS", f"research=http://127.0.0.1:{free_port()}/")

    status, lines = doctor(capsys, "--config", str(config))

    assert status == 1
    mcp = line(lines, "FAIL  mcp ghost")
    assert "[[mcp.servers]]" in lines[lines.index(mcp) + 1]
    a2a = line(lines, "FAIL  a2a research")
    assert "AGENTIK_A2A_AGENTS" in lines[lines.index(a2a) + 1]
    assert lines[-1] == "2 problems found"


def test_a_misspelt_approval_or_agent_tool_is_a_warning_as_at_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "agentik.toml"
    config.write_text(
        '[tools]\napproval = ["calculat"]\n\n[[agents]]\nname = "helper"\ntools = ["curent_time"]\n'
    )

    status, lines = doctor(capsys, "--config", str(config))

    assert status == 0
    warned = [text for text in lines if text.startswith("warn  tools")]
    assert [text.split(None, 2)[2] for text in warned] == [
        "[tools] approval entry 'calculat' matches no tool: no call asks for it",
        "agent 'helper': tools entry 'curent_time' matches no tool",
    ]
    assert "fix: correct the name" in lines[lines.index(warned[0]) + 1]
    assert lines[-1] == "all checks passed, 2 warnings"


def test_a_misspelt_environment_variable_is_a_warning_with_the_closest_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENTIK_MODLE", "llama")

    status, lines = doctor(capsys)

    assert status == 0
    assert line(lines, "warn  env").split(None, 2)[2] == (
        "AGENTIK_MODLE is not an agentik setting: it is ignored; did you mean AGENTIK_MODEL?"
    )
    assert lines[-1] == "all checks passed, 1 warning"


def test_the_variables_of_the_clients_the_children_and_the_tests_are_not_warned_about(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in (
        "AGENTIK_TOKEN",
        "AGENTIK_A2A_AGENTS",
        "AGENTIK_REQUIRE_NODE",
        "AGENTIK_TEST_POSTGRES_URL",
        "AGENTIK_SCREENSHOT_DIR",
        "AGENTIK_PARENT_PID",
    ):
        monkeypatch.setenv(name, "")  # empty: set, and read by nothing here

    status, lines = doctor(capsys)

    assert (status, lines[-1]) == (0, "all checks passed"), lines


def test_every_agentik_variable_the_code_reads_is_known_to_doctor() -> None:
    """A variable named in quotes in the code, or set in the Makefile or CI, is read by
    something: doctor must not call it unknown (a new one belongs in known_env)."""
    import re

    from engine_service.doctor import known_env

    root = Path(__file__).resolve().parents[2]
    named: dict[str, str] = {}
    packages = ("agentik", "engine_service", "web_facade", "agentik_chat", "agentik_client")
    for folder in (*packages, "agentik_mcp", "tests", "bench", "tools"):
        for path in (root / folder).rglob("*"):
            ours = "node_modules" not in path.parts and path != Path(__file__).resolve()
            if path.suffix in (".py", ".mjs", ".ts") and ours:
                text = path.read_text()
                for found in re.findall(r"['\"](AGENTIK_[A-Z0-9_]+)['\"=]", text):
                    if not re.search(rf"^{found}\b *[:=]", text, re.M):  # not a constant's name
                        named.setdefault(found, str(path.relative_to(root)))
    for path in (root / "Makefile", root / ".ci" / "run"):
        for found in re.findall(r"\b(AGENTIK_[A-Z0-9_]+)=", path.read_text()):
            named.setdefault(found, str(path.relative_to(root)))
    tests_own = ("AGENTIK_REQUIRE_", "AGENTIK_TEST_")
    unknown = {
        name: where
        for name, where in named.items()
        if name not in known_env() and not name.startswith(tests_own)
    }
    assert unknown == {}


def test_an_agents_own_endpoint_is_checked_and_its_refusal_names_the_agents_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeOpenAI(api_key="sk-good") as fake:
        config = tmp_path / "agentik.toml"
        config.write_text(
            '[[agents]]\nname = "researcher"\nmodel = "fake-model"\n'
            f'base_url = "{fake.base_url}"\napi_key = "sk-bad"\n'
        )
        status, lines = doctor(capsys, "--config", str(config))

    assert status == 1
    offline = line(lines, "warn  llm ")
    assert offline.split(None, 2)[2] == (
        "the default agent 'agentik' uses the built-in offline model "
        "(no OPENAI_BASE_URL or OPENAI_API_KEY)"
    )
    failed = line(lines, "FAIL  llm researcher")
    assert "unauthorized: " in failed and "refused the API key (HTTP 401)" in failed
    assert lines[lines.index(failed) + 1].split("fix: ")[1] == (
        "set [[agents]] 'researcher' api_key to a key this endpoint accepts"
    )
    assert lines[-1] == "1 problem found, 1 warning"


def test_an_endpoint_without_models_is_a_warning_not_ok(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.models = None
    monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)

    status, lines = doctor(capsys)

    assert status == 0
    warned = line(lines, "warn  llm")
    assert "model not checked: " in warned and "has no /models (HTTP 404)" in warned
    assert "before /chat/completions" in lines[lines.index(warned) + 1]
    assert lines[-1] == "all checks passed, 1 warning"
