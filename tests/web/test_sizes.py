"""Sizes end to end (issue 21): a large but allowed request works on every surface; one
larger than the engine takes is 413 ``payload_too_large`` on HTTP (an A2A invalid request,
as a body over the limit is) and INVALID_ARGUMENT naming the limit on gRPC — never
``503 overloaded`` or gRPC's "Received message larger than max"."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from typing import Any, cast

import grpc
import pytest
from flask import Flask

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from tests.fakes.fake_openai import FakeOpenAI
from tests.web.a2a.conftest import V10, user_message
from tests.web.agui.agui_reader import AguiReader, types
from tests.web.conftest import BackgroundEngine, engine_settings

SMALL_ENGINE = 256 * 1024
"""The engine's request limit in these tests (AGENTIK_MAX_MESSAGE_BYTES)."""


@pytest.fixture(scope="module")
def small_engine(llm: FakeOpenAI) -> Iterator[str]:
    """An engine taking requests of at most 256 KiB (its body limit is the default 1 MiB:
    set to 64 KiB so its own message limit decides)."""
    settings = engine_settings(
        llm, AGENTIK_MAX_MESSAGE_BYTES=str(SMALL_ENGINE), AGENTIK_MAX_BODY_BYTES="65536"
    )
    engine = BackgroundEngine(settings)
    yield engine.start()
    engine.stop()


@pytest.fixture(scope="module")
def roomy_engine(llm: FakeOpenAI) -> Iterator[str]:
    """An engine configured as the facade is, with the body limit raised to 8 MiB (and a
    context budget that takes a 1,000 KiB message: the default refuses it as too long)."""
    settings = engine_settings(
        llm, AGENTIK_MAX_BODY_BYTES=str(8 << 20), AGENTIK_CONTEXT_TOKENS="100000000"
    )
    engine = BackgroundEngine(settings)
    yield engine.start()
    engine.stop()


def _agui(messages: int, size: int) -> dict[str, Any]:
    return {
        "threadId": f"big-{uuid.uuid4().hex}",
        "runId": uuid.uuid4().hex,
        "messages": [
            {"id": f"m{i}", "role": "user", "content": "x" * size} for i in range(messages)
        ],
    }


def _agui_events(app: Flask, body: dict[str, Any]) -> list[str]:
    response = app.test_client().post("/agui", json=body, buffered=False)
    assert response.status_code == 200, response.get_data()[:500]
    return [str(t) for t in types(AguiReader(cast(Any, response.response)).read_to_end())]


def test_the_issues_agui_request_of_20000_messages_runs_when_the_body_limit_allows_it(
    make_app: Callable[..., Flask], roomy_engine: str
) -> None:
    app = make_app(roomy_engine, AGENTIK_MAX_BODY_BYTES=str(8 << 20))
    body = _agui(20_000, 200)  # about 5 MB of JSON: over gRPC's 4 MiB default
    names = _agui_events(app, body)
    assert names[0] == "EventType.RUN_STARTED" or names[0].endswith("RUN_STARTED")
    assert names[-1].endswith("RUN_FINISHED")


def test_large_allowed_requests_work_on_agentik_and_a2a(
    make_app: Callable[..., Flask], roomy_engine: str
) -> None:
    client = make_app(roomy_engine, AGENTIK_MAX_BODY_BYTES=str(8 << 20)).test_client()
    text = "y" * (1000 * 1024)  # one message as large as one may be ([engine] max_event_bytes)
    created = client.post("/agentik/conversations", json={})
    conversation_id = created.get_json()["id"]
    sent = client.post(
        f"/agentik/conversations/{conversation_id}/send",
        json={"content": [{"type": "text", "text": text}]},
    )
    assert sent.status_code == 200, sent.get_data()[:300]
    assert b"event: end" in sent.get_data()
    rpc = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {**user_message("z"), "parts": [{"text": text}]}},
    }
    answered = client.post("/", json=rpc, headers=V10)
    assert answered.status_code == 200
    reply = answered.get_json()
    assert "error" not in reply, reply
    assert reply["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


def _too_large(message: str) -> None:
    assert str(SMALL_ENGINE) in message, message
    assert "AGENTIK_MAX_MESSAGE_BYTES" in message
    assert "Received message larger" not in message


def test_over_the_engines_limit_is_413_on_agentik_and_agui_and_invalid_request_on_a2a(
    make_app: Callable[..., Flask], small_engine: str
) -> None:
    client = make_app(small_engine, AGENTIK_MAX_BODY_BYTES=str(2 << 20)).test_client()
    created = client.post("/agentik/conversations", json={})
    conversation_id = created.get_json()["id"]
    big = "z" * (300 * 1024)
    sent = client.post(f"/agentik/conversations/{conversation_id}/send", json={"text": big})
    assert sent.status_code == 413, sent.get_data()
    assert sent.get_json()["error"]["code"] == "payload_too_large"
    _too_large(sent.get_json()["error"]["message"])

    # Past twice the engine's limit, gRPC refuses it before our code: still a 413.
    huge = client.post(
        f"/agentik/conversations/{conversation_id}/send",
        json={"content": [{"type": "text", "text": "h" * (1000 * 1024)}]},
    )
    assert huge.status_code == 413, huge.get_data()
    assert str(SMALL_ENGINE * 2) in huge.get_json()["error"]["message"]

    agui = client.post("/agui", json=_agui(3, 100 * 1024))
    assert agui.status_code == 413, agui.get_data()
    assert agui.get_json()["error"]["code"] == "payload_too_large"
    _too_large(agui.get_json()["error"]["message"])

    rpc = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "SendMessage",
        "params": {"message": {**user_message("z"), "parts": [{"text": big}]}},
    }
    answered = client.post("/", json=rpc, headers=V10)
    error = answered.get_json()["error"]
    assert error["code"] == -32600, error
    _too_large(error["message"])


def test_the_facades_own_channel_refuses_a_request_over_the_limit_as_413(
    llm: FakeOpenAI, small_engine: str
) -> None:
    from tests.web.conftest import web_settings
    from web_facade import create_app
    from web_facade.engine_client import EngineClient

    settings = web_settings(small_engine, AGENTIK_MAX_BODY_BYTES=str(2 << 20))
    channel = EngineClient(settings.web.engine_target, 1, 100_000)
    try:
        app = create_app(settings, channel)
        client = app.test_client()
        conversation_id = client.post("/agentik/conversations", json={}).get_json()["id"]
        sent = client.post(
            f"/agentik/conversations/{conversation_id}/send", json={"text": "q" * 150_000}
        )
        assert sent.status_code == 413, sent.get_data()
        error = sent.get_json()["error"]
        assert error["code"] == "payload_too_large"
        assert (
            "at most 100000" in error["message"] and "AGENTIK_MAX_MESSAGE_BYTES" in error["message"]
        )
    finally:
        channel.close()


def test_grpc_takes_a_large_allowed_request_and_names_the_limit_past_it(
    small_engine: str,
) -> None:
    async def calls() -> tuple[list[pb.Event], grpc.aio.AioRpcError, grpc.aio.AioRpcError]:
        async with grpc.aio.insecure_channel(small_engine) as channel:
            stub: pb_grpc.AgentEngineAsyncStub = pb_grpc.AgentEngineStub(channel)

            def request(size: int) -> pb.RunRequest:
                text = pb.ContentPart(text=pb.TextPart(text="w" * size))
                message = pb.Message(role=pb.ROLE_USER, content=[text])
                return pb.RunRequest(
                    session_id=uuid.uuid4().hex, create_session=True, messages=[message]
                )

            events = [e async for e in stub.Run(request(200 * 1024))]
            refusals = []
            # Over the limit, and over twice the limit (gRPC's own bound).
            for size in (300 * 1024, 600 * 1024):
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    _ = [e async for e in stub.Run(request(size))]
                refusals.append(caught.value)
            return events, refusals[0], refusals[1]

    events, over, far_over = asyncio.run(calls())
    assert events[-1].WhichOneof("kind") == "run_finished"
    assert over.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert str(over.details()).startswith("the Run request is too large: it is ")
    _too_large(str(over.details()))
    assert dict(over.trailing_metadata() or ())["agentik-error"] == "payload_too_large"
    # Past twice the limit gRPC refuses it before any of our code sees it.
    assert far_over.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
