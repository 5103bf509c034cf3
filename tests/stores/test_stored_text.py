"""Text a client stores: one rule on every store, and a refused value is never an outage.

A title holding NUL (U+0000) is refused with INVALID_ARGUMENT on SQLite and on
PostgreSQL alike (PostgreSQL cannot store it), and refusing it leaves the store healthy:
health stays SERVING however often it is tried. Text stored as JSON (messages, state)
keeps its NUL on every store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.engine.harness import WAIT, Harness, collect, engine_settings, kind, running_engine
from tests.fakes.fake_openai import FakeOpenAI


@pytest.fixture(params=["sqlite", "postgres"])
async def engine_on(
    request: pytest.FixtureRequest, llm: FakeOpenAI, tmp_path: Path
) -> AsyncIterator[Harness]:
    """An engine on SQLite, then on PostgreSQL."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'agentik.db'}"
    else:
        url = request.getfixturevalue("pg_url")
    settings = engine_settings(
        AGENTIK_STORE=url, OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="test-key"
    )
    async with running_engine(settings) as running:
        yield running


async def _serving(harness: Harness) -> bool:
    stub: Any = health_pb2_grpc.HealthStub(harness.channel)
    reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=WAIT)
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


async def _refused(call: Any) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    return str(caught.value.details())


async def test_a_title_holding_nul_is_refused_on_every_store_and_health_stays_serving(
    engine_on: Harness,
) -> None:
    stub = engine_on.stub
    await stub.CreateSession(pb.CreateSessionRequest(session_id="s", title="kept"))
    for _ in range(5):
        made = stub.CreateSession(pb.CreateSessionRequest(title="a\x00b"))
        assert "NUL" in await _refused(made)
        assert await _serving(engine_on)
        renamed = stub.RenameSession(pb.RenameSessionRequest(session_id="s", title="\x00"))
        assert "NUL" in await _refused(renamed)
        assert await _serving(engine_on)
    assert engine_on.engine.storage_ok
    page = await stub.ListSessions(pb.ListSessionsRequest())
    assert [(s.id, s.title) for s in page.sessions] == [("s", "kept")]


async def test_a_parent_run_id_that_is_not_an_id_is_refused_on_every_store(
    engine_on: Harness,
) -> None:
    for parent in ("a\x00b", "p" * 129, "sp ace"):
        call = engine_on.stub.Run(
            pb.RunRequest(
                session_id="s", create_session=True, parent_run_id=parent, messages=[_user()]
            )
        )
        assert "parent_run_id" in await _refused(collect(call))
        assert await _serving(engine_on)
    assert engine_on.engine.storage_ok


def _user() -> pb.Message:
    return pb.Message(role=pb.ROLE_USER, content=[pb.ContentPart(text=pb.TextPart(text="hi"))])


async def test_nul_in_message_text_and_state_is_stored_as_sent_on_every_store(
    engine_on: Harness,
) -> None:
    state = struct_pb2.Value()
    state.struct_value.update({"k\x00": "v\x00w"})
    text = "before\x00after"
    events = await collect(
        engine_on.stub.Run(
            pb.RunRequest(
                session_id="s",
                create_session=True,
                state=state,
                messages=[
                    pb.Message(
                        role=pb.ROLE_USER, content=[pb.ContentPart(text=pb.TextPart(text=text))]
                    )
                ],
            )
        )
    )
    assert kind(events[-1]) == "run_finished"
    got = await engine_on.stub.GetSession(pb.GetSessionRequest(session_id="s"))
    assert got.state == state
    messages = await engine_on.stub.ListMessages(pb.ListMessagesRequest(session_id="s"))
    assert messages.messages[0].content[0].text.text == text
    assert await _serving(engine_on)
