"""Events and pages over 4 MiB never reach gRPC: ``[engine] max_event_bytes`` on every path.

Before the bound, one answer, tool result or messages snapshot over 4 MiB ended the live
stream with gRPC's "Sent message larger than max", and every later read of the
conversation (a resume, its messages, an AG-UI run with its snapshot) failed the same way.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import grpc
import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.core import events as ev
from engine_service.core.bounds import message_size
from engine_service.core.models import (
    JSON,
    Interrupt,
    InterruptKind,
    Message,
    Role,
    RunStatus,
    TextPart,
    ToolCall,
)
from engine_service.core.tool import Tool, ToolContext, ToolResult
from engine_service.stores import open_store
from tests.engine.harness import (
    Harness,
    collect,
    engine_settings,
    kind,
    kinds,
    next_event,
    running_engine,
    text_of,
    user,
)
from tests.fakes.fake_openai import FakeOpenAI, FakeReply, FakeToolCall

BIG = 5_000_000
"""Over gRPC's 4 MiB: what broke a conversation before the bound."""
LIMIT = 1024 * 1024
"""The default ``max_event_bytes``."""


def _assert_every_event_fits(events: list[pb.Event]) -> None:
    sizes = [e.ByteSize() for e in events]
    assert max(sizes) <= LIMIT + 2048, max(sizes)


def _assert_ids_once_in_order(events: list[pb.Event], first: int, last: int) -> None:
    """No id lost, none duplicated: exactly ``first..last``."""
    seqs = [e.seq for e in events]
    duplicated = sum(n - 1 for n in Counter(seqs).values())
    lost = len(set(range(first, last + 1)) - set(seqs))
    assert (lost, duplicated) == (0, 0)
    assert seqs == list(range(first, last + 1))


async def _all_messages(harness: Harness, session_id: str, limit: int = 1000) -> list[pb.Message]:
    out: list[pb.Message] = []
    after = ""
    for _ in range(10_000):
        page = await harness.stub.ListMessages(
            pb.ListMessagesRequest(session_id=session_id, after_message_id=after, limit=limit)
        )
        assert page.ByteSize() <= LIMIT + 2048
        out.extend(page.messages)
        if not page.has_more:
            return out
        after = page.messages[-1].id
    raise AssertionError("the pages never ended")


def _text(message: pb.Message) -> str:
    return "".join(p.text.text for p in message.content if p.WhichOneof("part") == "text")


async def test_an_answer_over_4_mib_streams_as_deltas_and_the_conversation_stays_usable(
    harness: Harness, llm: FakeOpenAI
) -> None:
    answer = "é" * (BIG // 2)  # two bytes a character: no character is cut in two
    llm.enqueue(FakeReply(text=[answer]))
    events = await collect(
        harness.stub.Run(
            pb.RunRequest(session_id="big", create_session=True, messages=[user("write a lot")])
        )
    )
    assert kinds(events)[-1] == "run_finished"
    _assert_every_event_fits(events)
    assert kinds(events).count("text_message_content") >= 5
    assert text_of(events) == answer  # the deltas carry all of it

    # The stored message is clipped, and says so.
    stored = [e.message_stored.message for e in events if kind(e) == "message_stored"]
    assert "clipped by agentik" in _text(stored[-1])
    messages = await _all_messages(harness, "big")
    assert [m.id for m in messages] == [m.id for m in stored]
    assert _text(messages[-1]) == _text(stored[-1])

    # A resume after every id the client saw, and a replay from the start.
    for after in (0, events[2].seq, events[-2].seq):
        replay = await collect(
            harness.stub.Subscribe(
                pb.SubscribeRequest(session_id="big", after_seq=after, until_idle=True)
            )
        )
        assert [e.SerializeToString() for e in replay] == [
            e.SerializeToString() for e in events if e.seq > after
        ]

    # The next run, with the snapshot AG-UI asks for, ends well.
    later = await collect(
        harness.stub.Run(
            pb.RunRequest(session_id="big", messages=[user("and now?")], messages_snapshot=True)
        )
    )
    assert kinds(later)[-1] == "run_finished"
    _assert_every_event_fits(later)


class HugeResultTool(Tool):
    """Answers with more than gRPC carries in one message."""

    name = "dump"
    description = "Returns a very long text."

    def __init__(self) -> None:
        self.parameters: dict[str, JSON] = {"type": "object", "properties": {}}

    async def call(self, arguments: dict[str, JSON], context: ToolContext) -> ToolResult:
        return ToolResult("r" * BIG)


async def test_a_tool_result_over_4_mib_is_clipped_with_a_note_saying_how_much(
    llm: FakeOpenAI,
) -> None:
    settings = engine_settings(OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="k")
    async with running_engine(settings, tools=[HugeResultTool()]) as harness:
        llm.enqueue(FakeReply(tool_calls=[FakeToolCall("dump")]), FakeReply(text="done"))
        events = await collect(
            harness.stub.Run(
                pb.RunRequest(session_id="t", create_session=True, messages=[user("dump it")])
            )
        )
        assert kinds(events)[-1] == "run_finished"
        _assert_every_event_fits(events)
        (result,) = [e.tool_call_result for e in events if kind(e) == "tool_call_result"]
        assert result.content.startswith("rrrr")
        assert "clipped by agentik:" in result.content
        cut = BIG - result.content.partition("\n")[0].count("r")
        assert f"{cut:,} of {BIG:,} bytes not shown" in result.content
        # The LLM got the clipped result too, not 5 MB.
        assert len(str(llm.requests[-1])) < 2 * LIMIT

        messages = await _all_messages(harness, "t")
        assert _text(messages[2]) == result.content
        replay = await collect(
            harness.stub.Subscribe(pb.SubscribeRequest(session_id="t", until_idle=True))
        )
        assert len(replay) == len(events)


async def test_a_long_history_gets_a_bounded_snapshot_and_pages_bounded_by_bytes(
    harness: Harness,
) -> None:
    """1,080 messages of 5 KB: the whole is over 4 MiB; no page nor snapshot is."""
    await harness.stub.CreateSession(pb.CreateSessionRequest(session_id="long"))
    store = harness.engine.store
    now = datetime.now(UTC)
    history = [
        Message(f"m{i:04d}", Role.USER, [TextPart(f"{i:04d}" + "x" * 5_000)], created_at=now)
        for i in range(1_080)
    ]
    await store.append_messages("long", history)

    first = await harness.stub.ListMessages(pb.ListMessagesRequest(session_id="long", limit=1000))
    assert first.has_more
    assert 100 < len(first.messages) < 1000
    assert first.ByteSize() <= LIMIT
    everything = await _all_messages(harness, "long")
    assert [m.id for m in everything] == [m.id for m in history]  # none lost, none twice

    events = await collect(
        harness.stub.Run(
            pb.RunRequest(session_id="long", messages=[user("sum up")], messages_snapshot=True)
        )
    )
    assert kinds(events)[-1] == "run_finished"
    _assert_every_event_fits(events)
    (snapshot,) = [e.messages_snapshot for e in events if kind(e) == "messages_snapshot"]
    ids = [m.id for m in snapshot.messages]
    stored = [e.message_stored.message.id for e in events if kind(e) == "message_stored"]
    assert ids[-1] == stored[-1]
    assert 100 < len(ids) < 1_082  # the most recent that fit, oldest first
    assert ids[:-2] == [m.id for m in history][-(len(ids) - 2) :]


async def test_rows_stored_oversized_before_the_bound_are_readable_resumable_and_runnable(
    harness: Harness, llm: FakeOpenAI
) -> None:
    """Written straight into the store, as an engine without the bound left them."""
    await harness.stub.CreateSession(pb.CreateSessionRequest(session_id="old"))
    store = harness.engine.store
    now = datetime.now(UTC)
    big = Message("huge", Role.ASSISTANT, [TextPart("o" * BIG)], created_at=now, run_id="r0")
    await store.append_messages("old", [Message("ask", Role.USER, [TextPart("hi")]), big])
    start = time.time()
    bodies: list[ev.EventBody] = [
        ev.RunStarted(),
        ev.TextMessageStart("huge"),
        ev.TextMessageContent("huge", "o" * BIG),
        ev.TextMessageEnd("huge"),
        ev.ToolCallResult("res", "call", "p" * BIG),
        ev.MessageStored(big),
        ev.MessagesSnapshot([big, big]),
        ev.StateSnapshot({"blob": "s" * BIG}),
        ev.RunFinished(),
    ]
    await store.append_events(
        "old", [ev.Event(n, start, "old", "r0", b) for n, b in enumerate(bodies, 1)]
    )

    replay = await collect(
        harness.stub.Subscribe(pb.SubscribeRequest(session_id="old", until_idle=True))
    )
    _assert_ids_once_in_order(replay, 1, len(bodies))
    _assert_every_event_fits(replay)
    assert "clipped by agentik" in replay[2].text_message_content.delta
    assert replay[7].custom.name == "agentik.event_omitted"
    assert kind(replay[-1]) == "run_finished"
    for after in range(len(bodies)):  # a resume after any id the client may have seen
        resumed = await collect(
            harness.stub.Subscribe(
                pb.SubscribeRequest(session_id="old", after_seq=after, until_idle=True)
            )
        )
        assert [e.seq for e in resumed] == list(range(after + 1, len(bodies) + 1))

    messages = await _all_messages(harness, "old")
    assert [m.id for m in messages] == ["ask", "huge"]
    assert "clipped by agentik" in _text(messages[1])

    events = await collect(
        harness.stub.Run(
            pb.RunRequest(session_id="old", messages=[user("go on")], messages_snapshot=True)
        )
    )
    assert kinds(events)[-1] == "run_finished", events[-1]
    _assert_every_event_fits(events)
    assert len(str(llm.requests[-1])) < 2 * LIMIT  # the LLM saw the clipped row


async def test_a_resume_mid_way_through_a_split_answer_loses_and_repeats_no_id(
    harness: Harness, llm: FakeOpenAI
) -> None:
    answer = "".join(f"{i:07d} " for i in range(BIG // 8))
    llm.enqueue(FakeReply(text=[answer[: BIG // 2], answer[BIG // 2 :]], delay=0.05))
    call = harness.stub.Run(
        pb.RunRequest(session_id="cut", create_session=True, messages=[user("count")])
    )
    seen: list[pb.Event] = []
    while not any(kind(e) == "text_message_content" for e in seen[-1:]):
        seen.append(await next_event(call))
    seen.append(await next_event(call))  # the second piece of the first split delta
    call.cancel()  # the client's connection drops here

    rest = await collect(
        harness.stub.Subscribe(
            pb.SubscribeRequest(session_id="cut", after_seq=seen[-1].seq, until_idle=True)
        )
    )
    whole = seen + rest
    _assert_ids_once_in_order(whole, 1, rest[-1].seq)
    assert kind(whole[-1]) == "run_finished"
    assert text_of(whole) == answer


async def test_a_new_message_over_the_limit_is_refused_before_the_run_starts(
    harness: Harness,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await collect(
            harness.stub.Run(
                pb.RunRequest(
                    session_id="in", create_session=True, messages=[user("u" * 2 * LIMIT)]
                )
            )
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "max_event_bytes" in str(caught.value.details())
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await harness.stub.GetSession(pb.GetSessionRequest(session_id="in"))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND


async def test_sessions_and_runs_stored_oversized_are_listed_in_pages_that_fit(
    harness: Harness, llm: FakeOpenAI
) -> None:
    """States, interrupts and error messages stored over the limit (by an older engine):
    GetSession, ListSessions, GetRun, ListRuns and the next run all still answer."""
    store = harness.engine.store
    now = datetime.now(UTC)
    names = [f"st{i}" for i in range(6)]
    for name in names:
        await harness.stub.CreateSession(pb.CreateSessionRequest(session_id=name))
        await store.set_state(name, {"blob": "s" * 900_000})
        run_id = f"run-{name}"
        await store.begin_run(name, run_id, now, create=False)
        call = ToolCall(f"call-{name}", "deploy", "a" * 900_000)
        asked = Interrupt(f"i-{name}", InterruptKind.APPROVAL, run_id, call, "approve?")
        await store.finish_run(
            name, run_id, RunStatus.INPUT_REQUIRED, now, "", "e" * 900_000, interrupts=[asked]
        )

    await store.set_state("st1", {"blob": "s" * BIG})  # over any event: omitted by name

    session = await harness.stub.GetSession(pb.GetSessionRequest(session_id="st0"))
    assert session.ByteSize() <= LIMIT + 2048
    assert [i.id for i in session.pending_interrupts] == ["i-st0"]  # still asked
    listed: list[str] = []
    while True:
        page = await harness.stub.ListSessions(
            pb.ListSessionsRequest(offset=len(listed), limit=1000)
        )
        assert page.ByteSize() <= LIMIT + 2048
        assert page.sessions and page.total == 6
        listed.extend(s.id for s in page.sessions)
        if len(listed) >= page.total:
            break
    assert sorted(listed) == names

    run = await harness.stub.GetRun(pb.GetRunRequest(run_id="run-st0"))
    assert run.ByteSize() <= LIMIT + 2048 and run.interrupts[0].id == "i-st0"
    runs = await harness.stub.ListRuns(pb.ListRunsRequest(limit=1000))
    assert 0 < len(runs.runs) < 6 and runs.total == 6
    assert runs.ByteSize() <= LIMIT + 2048

    events = await collect(
        harness.stub.Run(
            pb.RunRequest(
                session_id="st1",
                messages=[user("never mind")],
                resume=[pb.ResumeEntry(interrupt_id="i-st1", status=pb.RESUME_STATUS_CANCELLED)],
            )
        )
    )
    assert kinds(events)[-1] == "run_finished", events[-1]
    _assert_every_event_fits(events)
    assert [e.custom.name for e in events if kind(e) == "custom"] == ["agentik.event_omitted"]


async def test_a_split_answer_cut_by_a_crash_is_kept_clipped_and_its_ids_stay_whole(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    """A run left RUNNING with a 5 MB answer in its deltas (its engine died): the engine
    that closes it keeps the partial answer clipped to one message, and a replay still
    gives every id once."""
    url = f"sqlite:///{tmp_path / 'agentik.db'}"
    store = open_store(url)
    now = datetime.now(UTC)
    await store.begin_run("crashed", "r1", now, create=True, reserve=512)
    pieces = ["c" * 1_000_000] * 5
    bodies: list[ev.EventBody] = [
        ev.RunStarted(),
        ev.TextMessageStart("partial"),
        *(ev.TextMessageContent("partial", piece) for piece in pieces),
    ]
    stamp = time.time()
    await store.append_events(
        "crashed", [ev.Event(n, stamp, "crashed", "r1", b) for n, b in enumerate(bodies, 1)]
    )
    await store.close()

    settings = engine_settings(OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="k", AGENTIK_STORE=url)
    async with running_engine(settings) as harness:  # closes the abandoned run at start
        replay = await collect(
            harness.stub.Subscribe(pb.SubscribeRequest(session_id="crashed", until_idle=True))
        )
        _assert_every_event_fits(replay)
        seqs = [e.seq for e in replay]
        assert seqs[: len(bodies)] == list(range(1, len(bodies) + 1))
        assert seqs == sorted(set(seqs))  # the closing events after the reserved block
        assert kind(replay[-1]) == "run_finished"
        assert text_of(replay) == "".join(pieces)
        (kept,) = await _all_messages(harness, "crashed")
        assert kept.id == "partial" and "clipped by agentik" in _text(kept)
        (stored,) = await harness.engine.store.all_messages("crashed")
        assert message_size(stored) <= LIMIT  # stored clipped, not only read back clipped
