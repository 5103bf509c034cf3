"""The bound on a session's shared state, over real gRPC.

A run whose ``state`` is over ``max_state_bytes`` is refused before it starts; the
``update_state`` tool cannot take the state past it, and a patch that doubles the state
with ``copy`` operations stops at the limit before it costs the memory. The stored state
is never changed by a refused one.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import pytest
from google.protobuf import json_format, struct_pb2

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.engine.harness import (
    Harness,
    collect,
    engine_settings,
    kind,
    kinds,
    refused,
    running_engine,
    user,
)
from tests.fakes.fake_openai import FakeOpenAI, FakeReply, FakeToolCall

MIB = 1024 * 1024


@pytest.fixture
async def small(llm: FakeOpenAI) -> AsyncIterator[Harness]:
    """An engine whose state may hold 2,000 bytes of JSON."""
    settings = engine_settings(
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_API_KEY="test-key",
        AGENTIK_LLM_MAX_RETRIES="0",
        AGENTIK_MAX_STATE_BYTES="2000",
    )
    async with running_engine(settings) as running:
        yield running


def _value(state: Any) -> struct_pb2.Value:
    value = struct_pb2.Value()
    json_format.ParseDict(state, value)
    return value


async def _stored_state(harness: Harness) -> Any:
    session = await harness.stub.GetSession(pb.GetSessionRequest(session_id="s"))
    return json_format.MessageToDict(session.state)


async def test_a_run_whose_state_is_over_the_limit_is_refused_and_the_state_is_kept(
    small: Harness,
) -> None:
    kept = {"keep": 1}
    request = pb.RunRequest(
        session_id="s", create_session=True, messages=[user("x")], state=_value(kept)
    )
    assert kind((await collect(small.stub.Run(request)))[-1]) == "run_finished"
    big = pb.RunRequest(session_id="s", messages=[user("y")], state=_value({"k": "v" * 2000}))
    details = await refused(small, big)
    assert "max_state_bytes" in details and "2000 bytes" in details
    assert await _stored_state(small) == kept


def _doubling(copies: int) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = [{"op": "add", "path": "/x", "value": "y" * 1000}]
    return ops + [{"op": "copy", "from": "", "path": f"/c{i}"} for i in range(copies)]


async def test_a_patch_doubling_the_state_is_an_error_result_and_leaves_the_state_alone(
    harness: Harness, llm: FakeOpenAI
) -> None:
    kept = {"keep": 1}
    start = pb.RunRequest(
        session_id="s", create_session=True, messages=[user("x")], state=_value(kept)
    )
    await collect(harness.stub.Run(start))
    llm.enqueue(
        FakeReply(tool_calls=[FakeToolCall("update_state", {"patch": _doubling(15)}, id="b")]),
        FakeReply(text="done"),
    )
    tracemalloc.start()
    try:
        events = await collect(
            harness.stub.Run(pb.RunRequest(session_id="s", messages=[user("go")]))
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    results = [e.tool_call_result for e in events if kind(e) == "tool_call_result"]
    assert len(results) == 1 and results[0].is_error
    assert "the state is unchanged" in results[0].content
    assert "max_state_bytes" in results[0].content
    # The one snapshot is the stored state a run without ``state`` starts with.
    assert "state_delta" not in kinds(events) and kinds(events).count("state_snapshot") == 1
    assert kind(events[-1]) == "run_finished"
    assert await _stored_state(harness) == kept
    assert peak < 32 * MIB, peak  # 15 doublings of 1 kB unchecked: 32 MB, copied again


async def test_update_state_cannot_set_a_whole_state_over_the_limit(
    small: Harness, llm: FakeOpenAI
) -> None:
    llm.enqueue(
        FakeReply(tool_calls=[FakeToolCall("update_state", {"state": {"k": "v" * 3000}}, id="w")]),
        FakeReply(text="done"),
    )
    request = pb.RunRequest(session_id="s", create_session=True, messages=[user("x")])
    events = await collect(small.stub.Run(request))
    results = [e.tool_call_result for e in events if kind(e) == "tool_call_result"]
    assert len(results) == 1 and results[0].is_error
    assert "max_state_bytes" in results[0].content
    assert "state_snapshot" not in kinds(events)
    session = await small.stub.GetSession(pb.GetSessionRequest(session_id="s"))
    assert not session.HasField("state")
