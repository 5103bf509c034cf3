"""One id rule for every id a client may choose."""

from __future__ import annotations

import re

import grpc
import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.engine.harness import (
    Harness,
    kinds,
    refused,
    run,
    user,
)
from tests.fakes.fake_openai import FakeOpenAI, FakeReply, FakeToolCall

# -- 3. one id rule ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (pb.RunRequest(session_id="a/b", create_session=True), "session_id"),
        (pb.RunRequest(session_id="a\x00b", create_session=True), "session_id"),
        (pb.RunRequest(session_id="..", create_session=True), "session_id"),
        (pb.RunRequest(session_id="a b", create_session=True), "session_id"),
        (pb.RunRequest(session_id="x" * 129, create_session=True), "session_id"),
        (pb.RunRequest(session_id="ok", run_id="r/1", create_session=True), "run_id"),
        (
            pb.RunRequest(session_id="ok", create_session=True, messages=[user("hi", "m/1")]),
            "messages[0].id",
        ),
        (
            pb.RunRequest(
                session_id="ok",
                create_session=True,
                messages=[
                    user("hi"),
                    pb.Message(
                        role=pb.ROLE_ASSISTANT,
                        tool_calls=[pb.ToolCall(id="c?1", name="f", arguments="{}")],
                    ),
                ],
            ),
            "messages[1].tool_calls[0].id",
        ),
        (
            pb.RunRequest(
                session_id="ok",
                create_session=True,
                messages=[
                    user("hi"),
                    pb.Message(role=pb.ROLE_TOOL, tool_call_id="c#1", content=[]),
                ],
            ),
            "messages[1].tool_call_id",
        ),
    ],
)
async def test_an_id_outside_the_id_rule_is_invalid_argument_naming_the_field_and_the_rule(
    harness: Harness, request_: pb.RunRequest, field: str
) -> None:
    if not request_.messages:
        request_.messages.append(user("hi"))
    details = await refused(harness, request_)

    assert details.startswith(f"{field} ")
    assert "1 to 128 characters" in details
    assert (await harness.stub.ListSessions(pb.ListSessionsRequest())).total == 0


async def test_a_session_id_outside_the_id_rule_is_refused_when_creating_a_session(
    harness: Harness,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await harness.stub.CreateSession(pb.CreateSessionRequest(session_id="a/b"))

    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert str(caught.value.details()).startswith("session_id ")


@pytest.mark.parametrize(
    "thread_id",
    [
        "3f2b8c1e-9a4d-4e5f-8b6a-1c2d3e4f5a6b",
        "01ARZ3NDEKTSV4RRFFQ69G5FAV",
        "thread_abc-123.v2",
        "urn:uuid:3f2b8c1e-9a4d-4e5f-8b6a-1c2d3e4f5a6b",
        "~user.x",
        "x" * 128,
    ],
)
async def test_uuids_ulids_and_common_client_ids_are_accepted(
    harness: Harness, thread_id: str
) -> None:
    events = await run(
        harness,
        pb.RunRequest(
            session_id=thread_id,
            run_id=thread_id,
            create_session=True,
            messages=[user("hi", thread_id)],
        ),
    )

    assert kinds(events)[-1] == "run_finished"


async def test_a_tool_call_id_from_the_llm_outside_the_id_rule_is_replaced(
    harness: Harness, llm: FakeOpenAI
) -> None:
    llm.enqueue(
        FakeReply(tool_calls=[FakeToolCall("client_tool", "{}", id="call/odd id")]),
    )
    request = pb.RunRequest(
        session_id="t",
        create_session=True,
        messages=[user("x")],
        tools=[pb.Tool(name="client_tool")],
    )
    events = await run(harness, request)

    pending = list(events[-1].run_finished.pending_tool_call_ids)
    assert len(pending) == 1
    assert re.fullmatch(r"[A-Za-z0-9._:~-]{1,128}", pending[0])
    answer = pb.Message(
        role=pb.ROLE_TOOL,
        tool_call_id=pending[0],
        content=[pb.ContentPart(text=pb.TextPart(text="done"))],
    )
    events = await run(harness, pb.RunRequest(session_id="t", messages=[answer]))
    assert kinds(events)[-1] == "run_finished"
