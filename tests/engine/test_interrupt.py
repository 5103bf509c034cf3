"""Interrupt stops the LLM stream and running tools at once and keeps the partial answer."""

from __future__ import annotations

import asyncio

import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.core.models import JSON
from engine_service.core.tool import Tool, ToolContext, ToolResult
from tests.engine.harness import (
    WAIT,
    Harness,
    collect,
    engine_settings,
    kind,
    kinds,
    next_event,
    running_engine,
    user,
)
from tests.fakes.fake_openai import FakeOpenAI, FakeReply, FakeToolCall


class BlockingTool(Tool):
    """Waits until cancelled, and says so."""

    name = "block"
    description = "Blocks until cancelled."

    def __init__(self) -> None:
        self.parameters: dict[str, JSON] = {"type": "object", "properties": {}}
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def call(self, arguments: dict[str, JSON], context: ToolContext) -> ToolResult:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return ToolResult("never")


async def test_interrupt_mid_text_closes_the_llm_stream_and_keeps_the_partial_answer(
    harness: Harness, llm: FakeOpenAI
) -> None:
    llm.enqueue(FakeReply(text="partial words then nothing", hang_after=3))
    call = harness.stub.Run(
        pb.RunRequest(session_id="i", create_session=True, messages=[user("x")])
    )
    seen: list[pb.Event] = []
    async with asyncio.timeout(WAIT):
        while True:
            event = await next_event(call)
            seen.append(event)
            if kind(event) == "text_message_content":
                break
        reply = await harness.stub.Interrupt(pb.InterruptRequest(session_id="i"))
    assert reply.interrupted
    assert reply.run_id == seen[0].run_id
    rest = await collect(call)
    events = seen + rest

    assert kinds(rest)[-3:] == ["text_message_end", "message_stored", "run_finished"]
    assert rest[-1].run_finished.outcome == pb.OUTCOME_TYPE_CANCELLED
    assert await llm.wait_connection_closed_async(within=WAIT)

    stored = (await harness.stub.ListMessages(pb.ListMessagesRequest(session_id="i"))).messages
    assert stored[-1].role == pb.ROLE_ASSISTANT
    assert stored[-1].status == pb.MESSAGE_STATUS_INTERRUPTED
    partial = "".join(
        e.text_message_content.delta for e in events if kind(e) == "text_message_content"
    )
    assert stored[-1].content[0].text.text == partial
    assert partial

    session = await harness.stub.GetSession(pb.GetSessionRequest(session_id="i"))
    assert session.active_run_id == ""
    follow = await collect(
        harness.stub.Run(pb.RunRequest(session_id="i", messages=[user("again")]))
    )
    assert kinds(follow)[-1] == "run_finished"


async def test_interrupt_mid_tool_cancels_the_tool_and_stores_an_error_result(
    llm: FakeOpenAI,
) -> None:
    tool = BlockingTool()
    settings = engine_settings(OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="k")
    llm.enqueue(FakeReply(tool_calls=[FakeToolCall("block", {}, id="blk")]))
    async with running_engine(settings, tools=[tool]) as harness:
        call = harness.stub.Run(
            pb.RunRequest(session_id="mt", create_session=True, messages=[user("x")])
        )
        async with asyncio.timeout(WAIT):
            await tool.started.wait()
            reply = await harness.stub.Interrupt(pb.InterruptRequest(session_id="mt"))
            await tool.cancelled.wait()
        events = await collect(call)

        assert reply.interrupted
        assert events[-1].run_finished.outcome == pb.OUTCOME_TYPE_CANCELLED
        result = next(e.tool_call_result for e in events if kind(e) == "tool_call_result")
        assert result.tool_call_id == "blk" and result.is_error
        stored = (await harness.stub.ListMessages(pb.ListMessagesRequest(session_id="mt"))).messages
        assert [m.role for m in stored] == [pb.ROLE_USER, pb.ROLE_ASSISTANT, pb.ROLE_TOOL]
        assert stored[-1].status == pb.MESSAGE_STATUS_ERROR


async def test_interrupting_an_idle_session_says_so_without_error(harness: Harness) -> None:
    await harness.stub.CreateSession(pb.CreateSessionRequest(session_id="idle"))
    reply = await harness.stub.Interrupt(pb.InterruptRequest(session_id="idle"))
    assert not reply.interrupted
    assert reply.run_id == ""


async def test_interrupt_of_another_run_id_leaves_the_run_alone(harness: Harness) -> None:
    call = harness.stub.Run(
        pb.RunRequest(session_id="o", create_session=True, messages=[user("[[slow:0.05]] a b c")])
    )
    await next_event(call)
    reply = await harness.stub.Interrupt(pb.InterruptRequest(session_id="o", run_id="other"))
    assert not reply.interrupted
    events = await collect(call)
    assert events[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS


async def test_interrupting_an_unknown_session_is_not_found(harness: Harness) -> None:
    import grpc

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await harness.stub.Interrupt(pb.InterruptRequest(session_id="ghost"))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


async def test_an_interrupt_right_after_the_start_still_keeps_the_users_message(
    harness: Harness,
) -> None:
    call = harness.stub.Run(
        pb.RunRequest(session_id="early", create_session=True, messages=[user("[[hang]] hi", "u")])
    )
    assert kind(await next_event(call)) == "run_started"
    await harness.stub.Interrupt(pb.InterruptRequest(session_id="early"))
    events = await collect(call)
    assert events[-1].run_finished.outcome == pb.OUTCOME_TYPE_CANCELLED
    stored = (await harness.stub.ListMessages(pb.ListMessagesRequest(session_id="early"))).messages
    assert stored[0].id == "u"
