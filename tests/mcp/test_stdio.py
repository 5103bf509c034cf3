"""``agentik mcp``'s stdin (``agentik_mcp.stdio``): a line the MCP SDK cannot parse is
answered with a JSON-RPC error naming the problem, never left unanswered; driven as a desktop
client does, raw lines to a real ``agentik mcp`` subprocess against a real engine."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from agentik_mcp.stdio import NOT_A_MESSAGE, refusal_of
from tests.engine.harness import engine_settings, running_engine
from tests.fakes.fake_openai import FakeOpenAI

WAIT = 20.0
"""Upper bound of every wait here, in seconds (a subprocess starts)."""

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def _call(request_id: int, tool: str, arguments: str) -> bytes:
    """A ``tools/call`` line, its arguments written as given (JSON text)."""
    params = f'{{"name": "{tool}", "arguments": {arguments}, "_meta": {json.dumps(META)}}}'
    head = f'"jsonrpc": "2.0", "id": {request_id}, "method": "tools/call"'
    return f'{{{head}, "params": {params}}}'.encode()


@pytest.fixture
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def _nested(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


async def test_lines_the_sdk_cannot_parse_are_answered_naming_the_problem_and_serving_goes_on(
    llm: FakeOpenAI,
) -> None:
    """Before, each of these got no answer and nothing was logged: the client hung."""
    settings = engine_settings(OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="test-key")
    lines = [
        _call(1, "read_conversation", '{"conversation_id": "\\ud800"}'),  # a lone surrogate
        _call(2, "send_message", '{"text": "hi \\udfff there"}'),
        _call(3, "list_agents", f'{{"deep": {_nested(300)}}}'),
        b'{"jsonrpc": "2.0", "id": 4, ',  # not JSON
        b"[1, 2]",  # JSON, but no message
        b'{"jsonrpc": "2.0", "id": true, "method": "tools/list"}',  # an id JSON-RPC refuses
        b'{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": []}',
        _call(6, "list_agents", "{}"),  # still served
    ]
    async with running_engine(settings) as harness:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTIK_", "OTEL_"))}
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "agentik.cli", "mcp", "--target", harness.target),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(b"\n".join(lines) + b"\n")
            await process.stdin.drain()
            answers: list[dict[str, Any]] = []
            async with asyncio.timeout(WAIT):
                while len(answers) < len(lines):
                    answers.append(json.loads(await process.stdout.readline()))
            process.stdin.close()
            async with asyncio.timeout(WAIT):
                _, errors = await process.communicate()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    errors_of = {str(a["id"]) + str(i): a.get("error") for i, a in enumerate(answers)}
    assert [a["id"] for a in answers] == [1, 2, 3, None, None, None, 5, 6], errors_of
    by_id = {a["id"]: a for a in answers if a["id"] is not None}
    assert by_id[1]["error"] == {
        "code": -32602,
        "message": "params.arguments.conversation_id: contains a lone UTF-16 surrogate \\ud800;"
        " strings must be valid Unicode (scalar values only)",
    }
    assert by_id[2]["error"]["message"].startswith("params.arguments.text: contains a lone")
    assert by_id[3]["error"]["code"] == -32602
    assert "nested deeper than 32 levels" in by_id[3]["error"]["message"]
    unnamed = [a["error"] for a in answers if a["id"] is None]
    assert unnamed[0]["code"] == -32700 and "not valid JSON" in unnamed[0]["message"]
    assert unnamed[1] == {"code": -32600, "message": NOT_A_MESSAGE}
    assert unnamed[2] == {"code": -32600, "message": "id must be a string or an integer"}
    assert by_id[5]["error"] == {"code": -32600, "message": NOT_A_MESSAGE}
    assert "agents" in by_id[6]["result"]["structuredContent"]
    assert b"refused a message on stdin (id 1)" in errors


def test_bytes_that_are_not_utf_8_are_a_parse_error() -> None:
    refusal = refusal_of(b'{"jsonrpc": "2.0", "id": 1, "method": "x\xed\xa0\x80"}')
    assert refusal is not None and (refusal.id, refusal.code) == (None, -32700)
    assert refusal.message == "the message is not valid UTF-8 (at byte 40)"


def test_nesting_past_what_python_parses_is_a_parse_error() -> None:
    refusal = refusal_of(f'{{"jsonrpc": "2.0", "id": 1, "params": {_nested(5000)}}}'.encode())
    assert refusal is not None and refusal.code == -32700 and "nested deeper" in refusal.message


def test_a_notification_that_is_refused_gets_no_answer_but_the_log() -> None:
    refusal = refusal_of(b'{"jsonrpc": "2.0", "method": "x", "params": {"a": "\\udc00"}}')
    assert refusal is not None and not refusal.answer and refusal.message.startswith("params.a:")


def test_a_message_the_sdk_takes_passes() -> None:
    assert refusal_of(_call(7, "list_agents", "{}")) is None
    assert refusal_of(b'{"jsonrpc": "2.0", "id": "r1", "result": {}}') is None


@pytest.mark.parametrize("written", [b"null", b"1.5", b"true", b'{"a": 1}'])
def test_a_request_whose_id_is_no_string_or_integer_is_refused_not_dropped(written: bytes) -> None:
    """The SDK takes it for a notification and answers nothing (null included: a request's
    id is never null in MCP); the rule is ``/mcp``'s too (``web_facade.mcp.ids``)."""
    refusal = refusal_of(b'{"jsonrpc": "2.0", "id": ' + written + b', "method": "tools/list"}')
    assert refusal is not None and refusal.answer
    assert (refusal.id, refusal.code, refusal.message) == (
        None,
        -32600,
        "id must be a string or an integer",
    )
