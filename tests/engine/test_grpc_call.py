"""``agentik grpc``: one engine RPC from the shell, as grpcurl would make it."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from agentik.cli import main
from tests.engine.harness import engine_settings, running_engine


async def _agentik(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


async def test_unary_and_streaming_calls_print_json(capsys: pytest.CaptureFixture[str]) -> None:
    async with running_engine(engine_settings()) as harness:
        target = harness.target
        code, out, err = await _agentik(
            capsys, "grpc", "CreateSession", '{"title": "from the shell"}', "--target", target
        )
        assert code == 0, err
        session = json.loads(out)
        assert session["title"] == "from the shell"
        run = json.dumps(
            {
                "session_id": session["id"],
                "messages": [{"role": "ROLE_USER", "content": [{"text": {"text": "hello"}}]}],
            }
        )
        code, out, err = await _agentik(capsys, "grpc", "Run", run, "--target", target)
        assert code == 0, err
        events = [json.loads(line) for line in out.splitlines()]
        assert "run_started" in events[0] and "run_finished" in events[-1]
        assert any("text_message_content" in e for e in events)
        code, out, _ = await _agentik(
            capsys, "grpc", "ListSessions", '{"limit": 5}', "--target", target
        )
        assert code == 0 and json.loads(out)["sessions"][0]["id"] == session["id"]


async def test_mistakes_are_named(capsys: pytest.CaptureFixture[str]) -> None:
    async with running_engine(engine_settings()) as harness:
        target = harness.target
        code, _, err = await _agentik(capsys, "grpc", "Nope", "--target", target)
        assert code == 2 and "no method 'Nope'" in err and "ListSessions" in err
        code, _, err = await _agentik(capsys, "grpc", "GetSession", "{not json", "--target", target)
        assert code == 2 and "not a GetSessionRequest" in err
        code, _, err = await _agentik(
            capsys, "grpc", "GetSession", '{"session_id": "missing"}', "--target", target
        )
        assert code == 1 and err.startswith("agentik grpc: NOT_FOUND: ")


async def test_the_token_comes_from_the_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = engine_settings(AGENTIK_TOKENS="alice:secret-a")
    async with running_engine(settings) as harness:
        target = harness.target
        code, _, err = await _agentik(capsys, "grpc", "ListSessions", "--target", target)
        assert (code, err) == (
            1,
            "agentik grpc: UNAUTHENTICATED: the engine needs a token: set AGENTIK_TOKEN or "
            "pass --token\n",
        )
        code, _, err = await _agentik(
            capsys, "grpc", "ListSessions", "--target", target, "--token", "wrong"
        )
        assert code == 1
        assert err.startswith("agentik grpc: UNAUTHENTICATED: the token in --token was refused")
        monkeypatch.setenv("AGENTIK_TOKEN", "secret-a")
        code, out, err = await _agentik(capsys, "grpc", "ListSessions", "--target", target)
        assert code == 0, err
        assert json.loads(out) == {} or "sessions" in json.loads(out)


async def test_an_engine_that_is_not_there_is_said_in_plain_words(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        target = f"127.0.0.1:{sock.getsockname()[1]}"

    code, _, err = await _agentik(capsys, "grpc", "ListSessions", "--target", target)

    assert (code, err) == (
        1,
        f"agentik grpc: cannot reach the engine at {target}: is `make run` (or `agentik "
        "engine`) running? (--target or AGENTIK_ENGINE_TARGET names another)\n",
    )
