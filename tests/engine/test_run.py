"""Run semantics over real gRPC against the fake OpenAI server."""

from __future__ import annotations

import json

import grpc
import pytest
from google.protobuf import struct_pb2

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.core import events as ev
from engine_service.core.models import JSON
from engine_service.core.tool import Tool, ToolContext, ToolResult
from tests.engine.harness import (
    Harness,
    collect,
    engine_settings,
    kind,
    kinds,
    kinds_merged,
    next_event,
    running_engine,
    text_of,
    user,
)
from tests.fakes.fake_openai import FakeOpenAI, FakeReply, FakeToolCall


async def run(harness: Harness, request: pb.RunRequest) -> list[pb.Event]:
    return await collect(harness.stub.Run(request))


async def history(harness: Harness, thread_id: str) -> list[pb.Message]:
    reply = await harness.stub.ListMessages(pb.ListMessagesRequest(session_id=thread_id))
    return list(reply.messages)


async def test_a_text_turn_streams_ag_ui_events_in_order_and_stores_both_messages(
    harness: Harness,
) -> None:
    events = await run(
        harness, pb.RunRequest(session_id="t1", create_session=True, messages=[user("hello there")])
    )

    assert kinds_merged(events) == [
        "run_started",
        "message_stored",
        "text_message_start",
        "text_message_content",
        "text_message_end",
        "message_stored",
        "run_finished",
    ]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert {e.session_id for e in events} == {"t1"}
    assert len({e.run_id for e in events}) == 1
    assert text_of(events) == "Echo: hello there"
    finished = events[-1].run_finished
    assert finished.outcome == pb.OUTCOME_TYPE_SUCCESS
    assert finished.usage.total_tokens > 0

    stored = await history(harness, "t1")
    assert [m.role for m in stored] == [pb.ROLE_USER, pb.ROLE_ASSISTANT]
    assert stored[1].id == events[2].text_message_start.message_id
    assert stored[1].content[0].text.text == "Echo: hello there"
    assert stored[1].status == pb.MESSAGE_STATUS_COMPLETE
    assert events[1].message_stored.message.id == stored[0].id


async def test_the_run_id_from_the_request_is_used_and_a_reused_one_is_refused(
    harness: Harness,
) -> None:
    request = pb.RunRequest(session_id="t", run_id="r-1", create_session=True, messages=[user("a")])
    events = await run(harness, request)
    assert {e.run_id for e in events} == {"r-1"}

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await run(harness, pb.RunRequest(session_id="t", run_id="r-1", messages=[user("b")]))
    assert caught.value.code() == grpc.StatusCode.ALREADY_EXISTS


async def test_reasoning_deltas_become_reasoning_events_before_the_answer(
    harness: Harness, llm: FakeOpenAI
) -> None:
    llm.enqueue(FakeReply(reasoning="let me think", text="42"))
    events = await run(
        harness, pb.RunRequest(session_id="r", create_session=True, messages=[user("q")])
    )

    names = kinds_merged(events)
    assert names[2:7] == [
        "reasoning_start",
        "reasoning_message_start",
        "reasoning_message_content",
        "reasoning_message_end",
        "reasoning_end",
    ]
    reasoning = "".join(
        e.reasoning_message_content.delta for e in events if kind(e) == "reasoning_message_content"
    )
    assert reasoning == "let me think"
    assert text_of(events) == "42"


async def test_a_native_tool_round_streams_the_call_and_its_result_then_answers(
    harness: Harness, llm: FakeOpenAI
) -> None:
    llm.enqueue(FakeReply(tool_calls=[FakeToolCall("calculate", {"expression": "6*7"}, id="c1")]))
    events = await run(
        harness, pb.RunRequest(session_id="tool", create_session=True, messages=[user("6*7?")])
    )

    names = kinds(events)
    assert names.index("tool_call_start") < names.index("tool_call_args")
    assert names.index("tool_call_end") < names.index("tool_call_result")
    start = next(e.tool_call_start for e in events if kind(e) == "tool_call_start")
    assert (start.tool_call_id, start.tool_call_name) == ("c1", "calculate")
    args = "".join(e.tool_call_args.delta for e in events if kind(e) == "tool_call_args")
    assert json.loads(args) == {"expression": "6*7"}
    result = next(e.tool_call_result for e in events if kind(e) == "tool_call_result")
    assert result.tool_call_id == "c1"
    assert "42" in result.content
    assert not result.is_error
    assert text_of(events).startswith("Result: ")
    assert names[-1] == "run_finished"

    second_request = llm.requests[-1]
    assert second_request["messages"][-1]["role"] == "tool"
    assert second_request["messages"][-1]["tool_call_id"] == "c1"

    stored = await history(harness, "tool")
    assert [m.role for m in stored] == [
        pb.ROLE_USER,
        pb.ROLE_ASSISTANT,
        pb.ROLE_TOOL,
        pb.ROLE_ASSISTANT,
    ]
    assert stored[1].tool_calls[0].id == "c1"
    assert stored[1].id == start.parent_message_id
    assert stored[2].id == result.message_id


async def test_parallel_tool_calls_are_assembled_by_index_and_run_concurrently(
    harness: Harness, llm: FakeOpenAI
) -> None:
    llm.enqueue(
        FakeReply(
            tool_calls=[
                FakeToolCall("calculate", {"expression": "1+1"}, id="a", fragments=4),
                FakeToolCall("current_time", {"timezone": "UTC"}, id="b", fragments=4),
            ],
            interleave_tool_calls=True,
        )
    )
    events = await run(
        harness, pb.RunRequest(session_id="p", create_session=True, messages=[user("x")])
    )

    args: dict[str, str] = {}
    for event in events:
        if kind(event) == "tool_call_args":
            a = event.tool_call_args
            args[a.tool_call_id] = args.get(a.tool_call_id, "") + a.delta
    assert json.loads(args["a"]) == {"expression": "1+1"}
    assert json.loads(args["b"]) == {"timezone": "UTC"}
    results = {
        e.tool_call_result.tool_call_id: e.tool_call_result
        for e in events
        if kind(e) == "tool_call_result"
    }
    assert set(results) == {"a", "b"}
    assert "2" in results["a"].content
    assert "UTC" in results["b"].content


async def test_a_failing_tool_gives_the_llm_an_error_result_and_the_run_goes_on(
    harness: Harness, llm: FakeOpenAI
) -> None:
    llm.enqueue(FakeReply(tool_calls=[FakeToolCall("calculate", {"expression": "1/0"}, id="z")]))
    events = await run(
        harness, pb.RunRequest(session_id="e", create_session=True, messages=[user("x")])
    )

    result = next(e.tool_call_result for e in events if kind(e) == "tool_call_result")
    assert result.is_error
    assert "zero" in result.content.lower()
    assert events[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
    assert llm.requests[-1]["messages"][-1]["content"] == result.content


async def test_a_call_of_an_unknown_tool_or_with_bad_json_is_an_error_result(
    harness: Harness, llm: FakeOpenAI
) -> None:
    llm.enqueue(
        FakeReply(
            tool_calls=[
                FakeToolCall("no_such_tool", {}, id="u"),
                FakeToolCall("calculate", "{not json", id="j"),
            ]
        )
    )
    events = await run(
        harness, pb.RunRequest(session_id="u", create_session=True, messages=[user("x")])
    )
    results = {
        e.tool_call_result.tool_call_id: e.tool_call_result
        for e in events
        if kind(e) == "tool_call_result"
    }
    assert results["u"].is_error and "unknown tool" in results["u"].content
    assert results["j"].is_error and "JSON" in results["j"].content
    assert kinds(events)[-1] == "run_finished"


async def test_a_client_tool_call_ends_the_run_pending_and_the_next_run_continues(
    harness: Harness, llm: FakeOpenAI
) -> None:
    confirm = pb.Tool(name="confirm", description="Ask the user", parameters=struct_pb2.Struct())
    llm.enqueue(FakeReply(tool_calls=[FakeToolCall("confirm", {"q": "sure?"}, id="fc1")]))
    events = await run(
        harness,
        pb.RunRequest(session_id="ft", create_session=True, messages=[user("go")], tools=[confirm]),
    )

    assert "tool_call_result" not in kinds(events)
    finished = events[-1].run_finished
    assert finished.outcome == pb.OUTCOME_TYPE_SUCCESS
    assert list(finished.pending_tool_call_ids) == ["fc1"]
    offered = {t["function"]["name"] for t in llm.requests[0]["tools"]}
    assert {"confirm", "calculate", "current_time"} <= offered

    answer = pb.Message(
        id="tool-answer",
        role=pb.ROLE_TOOL,
        tool_call_id="fc1",
        content=[pb.ContentPart(text=pb.TextPart(text="yes"))],
    )
    follow = await run(harness, pb.RunRequest(session_id="ft", messages=[answer], tools=[confirm]))
    assert text_of(follow) == "Result: yes"
    assert follow[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
    sent = llm.requests[-1]["messages"]
    assert sent[-2]["tool_calls"][0]["id"] == "fc1"
    assert sent[-1] == {"role": "tool", "tool_call_id": "fc1", "content": "yes"}


async def test_mixed_client_and_engine_tool_calls_answer_the_engine_ones_and_pend_the_rest(
    harness: Harness, llm: FakeOpenAI
) -> None:
    confirm = pb.Tool(name="confirm", description="Ask", parameters=struct_pb2.Struct())
    llm.enqueue(
        FakeReply(
            tool_calls=[
                FakeToolCall("calculate", {"expression": "2+2"}, id="be"),
                FakeToolCall("confirm", {}, id="fe"),
            ]
        )
    )
    events = await run(
        harness,
        pb.RunRequest(session_id="mx", create_session=True, messages=[user("x")], tools=[confirm]),
    )
    results = [e.tool_call_result.tool_call_id for e in events if kind(e) == "tool_call_result"]
    assert results == ["be"]
    assert list(events[-1].run_finished.pending_tool_call_ids) == ["fe"]


async def test_max_tool_rounds_makes_the_llm_answer_without_tools(llm: FakeOpenAI) -> None:
    from tests.engine.harness import engine_settings, running_engine

    settings = engine_settings(
        OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="k", AGENTIK_MAX_TOOL_ROUNDS="1"
    )
    llm.enqueue(
        FakeReply(tool_calls=[FakeToolCall("calculate", {"expression": "1"}, id="r1")]),
        FakeReply(text="final answer"),
    )
    async with running_engine(settings) as harness:
        events = await run(
            harness, pb.RunRequest(session_id="m", create_session=True, messages=[user("x")])
        )
    assert "tools" in llm.requests[0]
    assert "tools" not in llm.requests[1]
    assert text_of(events) == "final answer"
    assert events[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        (FakeReply(status=401, error_message="bad key"), "llm_auth"),
        (FakeReply(status=429, error_message="slow down"), "llm_rate_limited"),
        (FakeReply(status=500, error_message="boom"), "llm_server_error"),
        (FakeReply(text="half an answer here", malformed_after=2), "llm_bad_stream"),
        (FakeReply(text="half an answer here", drop_after=2), "llm_bad_stream"),
    ],
)
async def test_an_llm_failure_is_a_run_error_with_a_code_and_leaves_no_half_message(
    harness: Harness, llm: FakeOpenAI, reply: FakeReply, code: str
) -> None:
    llm.enqueue(reply)
    events = await run(
        harness, pb.RunRequest(session_id="f", create_session=True, messages=[user("x")])
    )

    assert kinds(events)[0] == "run_started"
    assert kinds(events)[-1] == "run_error"
    assert events[-1].run_error.code == code
    assert events[-1].run_error.message
    opened = sum(1 for e in events if kind(e) == "text_message_start")
    closed = sum(1 for e in events if kind(e) == "text_message_end")
    assert opened == closed
    assert [m.role for m in await history(harness, "f")] == [pb.ROLE_USER]


async def test_an_unreachable_llm_is_a_run_error_llm_unavailable() -> None:
    from tests.engine.harness import engine_settings, running_engine

    with FakeOpenAI() as dead:
        url = dead.base_url
    settings = engine_settings(OPENAI_BASE_URL=url, OPENAI_API_KEY="k", AGENTIK_LLM_MAX_RETRIES="0")
    async with running_engine(settings) as harness:
        events = await run(
            harness, pb.RunRequest(session_id="d", create_session=True, messages=[user("x")])
        )
    assert events[-1].run_error.code == "llm_unavailable"


async def test_a_second_run_on_a_busy_session_fails_at_once_with_failed_precondition(
    harness: Harness,
) -> None:
    first = harness.stub.Run(
        pb.RunRequest(session_id="b", create_session=True, messages=[user("[[slow:0.2]] a b c d")])
    )
    assert kind(await next_event(first)) == "run_started"

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await run(harness, pb.RunRequest(session_id="b", messages=[user("again")]))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "busy" in str(caught.value.details())
    await harness.stub.Interrupt(pb.InterruptRequest(session_id="b"))
    await collect(first)


async def test_an_unknown_session_is_not_found_unless_asked_to_create_it(harness: Harness) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await run(harness, pb.RunRequest(session_id="nope", messages=[user("x")]))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert "nope" in str(caught.value.details())

    events = await run(
        harness, pb.RunRequest(session_id="nope", create_session=True, messages=[user("x")])
    )
    assert kinds(events)[-1] == "run_finished"


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (pb.RunRequest(messages=[user("x")]), "session_id"),
        (pb.RunRequest(session_id="x" * 300, create_session=True), "session_id"),
        (
            pb.RunRequest(session_id="v", create_session=True, messages=[pb.Message(id="m")]),
            "messages[0].role",
        ),
        (
            pb.RunRequest(
                session_id="v",
                create_session=True,
                messages=[
                    pb.Message(
                        role=pb.ROLE_USER,
                        content=[pb.ContentPart(image=pb.ImagePart(data=b"\x89PNG"))],
                    )
                ],
            ),
            "messages[0].content[0].image.mime_type",
        ),
        (
            pb.RunRequest(
                session_id="v", create_session=True, messages=[user("a", "same"), user("b", "same")]
            ),
            "messages[1].id",
        ),
        (
            pb.RunRequest(
                session_id="v", create_session=True, messages=[pb.Message(role=pb.ROLE_TOOL)]
            ),
            "messages[0].tool_call_id",
        ),
        (
            pb.RunRequest(session_id="v", create_session=True, tools=[pb.Tool(name="calculate")]),
            "tools[0].name",
        ),
        (
            pb.RunRequest(
                session_id="v",
                create_session=True,
                messages=[pb.Message(role=pb.ROLE_USER, content=[pb.ContentPart()])],
            ),
            "messages[0].content[0]",
        ),
    ],
)
async def test_a_malformed_run_request_is_invalid_argument_naming_the_field(
    harness: Harness, request_: pb.RunRequest, field: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await run(harness, request_)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in str(caught.value.details())
    assert (await harness.stub.ListSessions(pb.ListSessionsRequest())).total == 0


async def test_an_oversized_request_is_refused_naming_the_limit(llm: FakeOpenAI) -> None:
    from tests.engine.harness import engine_settings, running_engine

    settings = engine_settings(
        OPENAI_BASE_URL=llm.base_url,
        AGENTIK_MAX_MESSAGE_BYTES="65536",
        AGENTIK_MAX_BODY_BYTES="16384",  # else the limit is twice the body limit
    )
    async with running_engine(settings) as harness:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await run(
                harness,
                pb.RunRequest(
                    session_id="big", create_session=True, messages=[user("x" * 100_000)]
                ),
            )
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "more than the engine takes in one request: 65536 bytes" in str(
            caught.value.details()
        )
        assert (await harness.stub.ListSessions(pb.ListSessionsRequest())).total == 0


async def test_resending_the_whole_history_appends_only_new_messages(
    harness: Harness, llm: FakeOpenAI
) -> None:
    await run(
        harness, pb.RunRequest(session_id="h", create_session=True, messages=[user("one", "u1")])
    )
    stored = await history(harness, "h")
    await run(
        harness,
        pb.RunRequest(session_id="h", messages=[*stored, user("two", "u2")]),
    )
    after = await history(harness, "h")
    assert [m.id for m in after[:3]] == ["u1", stored[1].id, "u2"]
    assert len(after) == 4
    sent = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "user"]
    assert sent == ["one", "two"]


async def test_replace_makes_the_request_messages_the_whole_history(harness: Harness) -> None:
    await run(
        harness, pb.RunRequest(session_id="rp", create_session=True, messages=[user("one", "u1")])
    )
    await run(
        harness,
        pb.RunRequest(
            session_id="rp", messages=[user("fresh", "n1")], reconcile=pb.RECONCILE_MODE_REPLACE
        ),
    )
    after = await history(harness, "rp")
    assert after[0].id == "n1"
    assert len(after) == 2


async def test_state_sent_with_a_run_is_kept_on_the_session(harness: Harness) -> None:
    state = struct_pb2.Value()
    state.struct_value.update({"count": 3})
    await run(
        harness,
        pb.RunRequest(session_id="s", create_session=True, messages=[user("x")], state=state),
    )
    session = await harness.stub.GetSession(pb.GetSessionRequest(session_id="s"))
    assert session.state.struct_value["count"] == 3

    # A later run that sends no state starts by telling the client the thread's state.
    events = await run(harness, pb.RunRequest(session_id="s", messages=[user("y")]))
    assert kinds(events)[:2] == ["run_started", "state_snapshot"]
    assert events[1].state_snapshot.snapshot.struct_value["count"] == 3
    resent = await run(harness, pb.RunRequest(session_id="s", messages=[user("z")], state=state))
    assert "state_snapshot" not in kinds(resent)


async def test_a_messages_snapshot_closes_the_run_when_asked(harness: Harness) -> None:
    events = await run(
        harness,
        pb.RunRequest(
            session_id="ms", create_session=True, messages=[user("x")], messages_snapshot=True
        ),
    )
    assert kinds(events)[-2:] == ["messages_snapshot", "run_finished"]
    snapshot = events[-2].messages_snapshot.messages
    assert [m.id for m in snapshot] == [m.id for m in await history(harness, "ms")]


class _Charge(Tool):
    """A tool with a side effect (not idempotent): notes what the store held as it ran."""

    name = "charge"
    description = "Charge the card."

    def __init__(self, harness: Harness) -> None:
        self.parameters: dict[str, JSON] = {"type": "object", "properties": {}}
        self.harness = harness
        self.seen: list[str] = []

    async def call(self, arguments: dict[str, JSON], context: ToolContext) -> ToolResult:
        stored = await self.harness.engine.store.read_events(context.session_id, 0, 0)
        self.seen = [e.body.step_name for e in stored if isinstance(e.body, ev.StepStarted)]
        return ToolResult("charged")


async def test_a_call_of_a_tool_that_is_not_idempotent_is_stored_as_started_before_it_runs(
    llm: FakeOpenAI,
) -> None:
    """Its ``STEP_STARTED`` is in the store when the tool runs (so a resume knows the call
    may have run), and ``STEP_FINISHED`` follows its result; an idempotent tool has none."""
    settings = engine_settings(
        OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="k", AGENTIK_LLM_MAX_RETRIES="0"
    )
    async with running_engine(settings) as harness:
        charge = _Charge(harness)
        harness.engine.tools.register(charge)
        calls = [FakeToolCall("charge", {}, id="c1"), FakeToolCall("current_time", {}, id="t1")]
        llm.enqueue(FakeReply(tool_calls=calls))
        events = await run(
            harness, pb.RunRequest(session_id="pay", create_session=True, messages=[user("pay")])
        )
    assert charge.seen == ["tool_call:c1"]
    names = kinds(events)
    started = names.index("step_started")
    assert events[started].step_started.step_name == "tool_call:c1"
    result = next(
        i
        for i, e in enumerate(events)
        if kind(e) == "tool_call_result" and e.tool_call_result.tool_call_id == "c1"
    )
    assert started < result < names.index("step_finished")
    assert events[names.index("step_finished")].step_finished.step_name == "tool_call:c1"
    assert names.count("step_started") == names.count("step_finished") == 1
