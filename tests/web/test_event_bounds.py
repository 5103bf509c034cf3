"""A conversation holding something over 4 MiB stays usable on every surface.

Before ``[engine] max_event_bytes``, one answer, tool result or messages snapshot over
gRPC's 4 MiB made ``GET /agentik/conversations/{id}/messages`` answer 503 for ever, A2A
``ListTasks`` -32603, and every later AG-UI run end with RUN_ERROR; 1,080 messages of 5 KB
did the same to ``/messages?limit=1000``. Here each case is checked on ``/agentik``,
AG-UI and A2A, over a real engine, for the three ways a conversation gets there: a big
answer, a big tool result, and rows stored oversized before the bound.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from ag_ui.core import BaseEvent, EventType
from flask import Flask
from flask.testing import FlaskClient

from engine_service.core import events as ev
from engine_service.core.engine import Engine
from engine_service.core.models import JSON, Message, Role, TextPart
from engine_service.core.tool import Tool, ToolContext, ToolResult
from tests.fakes.fake_openai import FakeOpenAI, FakeReply, FakeToolCall
from tests.web.a2a.conftest import Rpc
from tests.web.agentik.streams import StreamReader
from tests.web.agui.agui_reader import AguiReader, assert_well_formed, of
from tests.web.conftest import WAIT, BackgroundEngine, engine_settings

BIG = 5_000_000
"""Over gRPC's 4 MiB."""
LIMIT = 1024 * 1024
"""The default ``max_event_bytes``."""


class HugeResultTool(Tool):
    name = "dump"
    description = "Returns a very long text."

    def __init__(self) -> None:
        self.parameters: dict[str, JSON] = {"type": "object", "properties": {}}

    async def call(self, arguments: dict[str, JSON], context: ToolContext) -> ToolResult:
        return ToolResult("r" * BIG)


@pytest.fixture(scope="module")
def engine(llm: FakeOpenAI) -> Iterator[BackgroundEngine]:
    background = BackgroundEngine(engine_settings(llm))
    background.start()
    assert background.server is not None
    background.server.engine.tools.register(HugeResultTool())
    yield background
    background.stop()


@pytest.fixture
def client(make_app: Callable[..., Flask], engine: BackgroundEngine) -> FlaskClient:
    assert engine.server is not None
    return make_app(f"127.0.0.1:{engine.server.port}").test_client()


def _core(engine: BackgroundEngine) -> Engine:
    assert engine.server is not None
    return engine.server.engine


def _in_engine(engine: BackgroundEngine, work: Any) -> Any:
    return asyncio.run_coroutine_threadsafe(work, engine.loop).result(WAIT)


def _agui(client: FlaskClient, thread_id: str, text: str) -> list[BaseEvent]:
    body = {
        "threadId": thread_id,
        "runId": uuid.uuid4().hex,
        "messages": [{"id": uuid.uuid4().hex, "role": "user", "content": text}],
        "state": {},
        "tools": [],
        "context": [],
    }
    response = client.post("/agui", json=body, buffered=False)
    assert response.status_code == 200, response.get_data()
    events = AguiReader(cast("Any", response.response)).read_to_end()
    assert_well_formed(events)
    return events


def _assert_usable(client: FlaskClient, thread_id: str) -> None:
    """Readable on /agentik, listed by A2A, and runnable on AG-UI (with its snapshot)."""
    items: list[dict[str, Any]] = []
    after = ""
    for _ in range(100):
        query = f"limit=1000&after={after}" if after else "limit=1000"
        response = client.get(f"/agentik/conversations/{thread_id}/messages?{query}")
        assert response.status_code == 200, response.get_data()[:300]
        assert len(response.get_data()) < 2 * LIMIT
        page = response.get_json()
        items.extend(page["items"])
        if not page["has_more"]:
            break
        after = page["items"][-1]["id"]
    assert any("clipped by agentik" in str(item) for item in items)

    listed = Rpc(client).result("ListTasks", {"contextId": thread_id})
    assert listed["tasks"], listed

    events = _agui(client, thread_id, "and now?")
    assert [e.type for e in events][-1] == EventType.RUN_FINISHED
    (snapshot,) = of(events, EventType.MESSAGES_SNAPSHOT)
    assert snapshot.messages


def test_a_5_mb_answer_streams_whole_and_leaves_the_conversation_usable(
    client: FlaskClient, llm: FakeOpenAI
) -> None:
    thread_id = f"big-{uuid.uuid4().hex}"
    answer = "a" * BIG
    llm.enqueue(FakeReply(text=[answer]))
    events = _agui(client, thread_id, "write a lot")
    assert [e.type for e in events][-1] == EventType.RUN_FINISHED
    deltas = of(events, EventType.TEXT_MESSAGE_CONTENT)
    assert len(deltas) >= 5
    assert "".join(d.delta for d in deltas) == answer
    _assert_usable(client, thread_id)


def test_a_5_mb_tool_result_is_clipped_and_leaves_the_conversation_usable(
    client: FlaskClient, llm: FakeOpenAI
) -> None:
    thread_id = f"tool-{uuid.uuid4().hex}"
    llm.enqueue(FakeReply(tool_calls=[FakeToolCall("dump")]), FakeReply(text="done"))
    events = _agui(client, thread_id, "dump it")
    assert [e.type for e in events][-1] == EventType.RUN_FINISHED
    (result,) = of(events, EventType.TOOL_CALL_RESULT)
    assert "bytes not shown" in result.content
    assert len(result.content) < LIMIT
    _assert_usable(client, thread_id)


def test_rows_stored_oversized_before_the_bound_leave_the_conversation_usable(
    client: FlaskClient, engine: BackgroundEngine
) -> None:
    thread_id = f"old-{uuid.uuid4().hex}"
    created = client.post("/agentik/conversations", json={"id": thread_id})
    assert created.status_code == 201
    store = _core(engine).store
    bodies: list[ev.EventBody] = [
        ev.RunStarted(),
        ev.TextMessageStart("huge"),
        ev.TextMessageContent("huge", "o" * BIG),
        ev.TextMessageEnd("huge"),
        ev.ToolCallResult("res", "call", "p" * BIG),
        ev.StateSnapshot({"blob": "s" * BIG}),
        ev.RunFinished(),
    ]
    written = [ev.Event(n, time.time(), thread_id, "r0", b) for n, b in enumerate(bodies, 1)]
    _in_engine(engine, store.append_events(thread_id, written))

    # Replayed, and resumed after each id, on /agentik's SSE: every id once, in order.
    for after in range(len(bodies)):
        response = client.get(
            f"/agentik/conversations/{thread_id}/events?after={after}&until_idle=true",
            buffered=False,
        )
        frames = StreamReader(response).read_to_end()
        ids = [f.id for f in frames if f.id is not None]
        assert ids == sorted(set(ids)) and all(after < i <= len(bodies) for i in ids)
        assert ids[-1] == len(bodies)
        if after < 3:
            assert "clipped by agentik" in str(frames)

    events = _agui(client, thread_id, "hello")
    assert [e.type for e in events][-1] == EventType.RUN_FINISHED
    (started,) = of(events, EventType.RUN_STARTED)
    big = Message(
        "huge",
        Role.ASSISTANT,
        [TextPart("o" * BIG)],
        created_at=datetime.now(UTC),
        run_id=started.run_id,
    )
    _in_engine(engine, store.append_messages(thread_id, [big]))
    _assert_usable(client, thread_id)


def test_a_history_of_1080_messages_of_5_kb_pages_by_bytes(
    client: FlaskClient, engine: BackgroundEngine
) -> None:
    thread_id = f"long-{uuid.uuid4().hex}"
    _agui(client, thread_id, "hello")
    now = datetime.now(UTC)
    history = [
        Message(f"m{i:04d}", Role.USER, [TextPart("x" * 5_000)], created_at=now)
        for i in range(1_080)
    ]
    _in_engine(engine, _core(engine).store.append_messages(thread_id, history))

    response = client.get(f"/agentik/conversations/{thread_id}/messages?limit=1000")
    assert response.status_code == 200
    page = response.get_json()
    assert page["has_more"] and 100 < len(page["items"]) < 1000
    ids = [item["id"] for item in page["items"]]
    while page["has_more"]:
        response = client.get(
            f"/agentik/conversations/{thread_id}/messages?limit=1000&after={ids[-1]}"
        )
        assert response.status_code == 200
        page = response.get_json()
        ids.extend(item["id"] for item in page["items"])
    assert ids[-1_080:] == [m.id for m in history]  # none lost, none twice
    assert len(ids) == len(set(ids))

    events = _agui(client, thread_id, "sum up")
    assert [e.type for e in events][-1] == EventType.RUN_FINISHED
    (snapshot,) = of(events, EventType.MESSAGES_SNAPSHOT)
    assert 100 < len(snapshot.messages) < 1_080
