"""The Python client (agentik_client): a run that resumes by itself, auth, errors as exceptions.

The engine is real (in-process, on the fake LLM); a TCP proxy in front of it cuts every
connection mid-stream, as a dying network or load balancer would.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik_client import (
    AsyncClient,
    Busy,
    Client,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unauthenticated,
)
from tests.cuttable_proxy import CuttableProxy
from tests.engine.auth_helpers import TOKENS, TOKENS_ENV
from tests.engine.harness import WAIT, Harness, engine_settings, running_engine
from tests.fakes.fake_openai import FakeOpenAI

CHUNKS = 40
SLOW_RUN = f"[[slow:0.02]] [[chunks:{CHUNKS}]]"
ANSWER = "".join(f"w{i} " for i in range(CHUNKS))


@pytest.fixture
def proxy(harness: Harness) -> Iterator[CuttableProxy]:
    cut = CuttableProxy(harness.server.port)
    yield cut
    cut.close()


async def stored_seqs(harness: Harness, session_id: str) -> list[int]:
    """Every event the engine stored for the session, read on a direct connection."""
    request = pb.SubscribeRequest(session_id=session_id, after_seq=0, until_idle=True)
    async with asyncio.timeout(WAIT):
        return [event.seq async for event in harness.stub.Subscribe(request)]


def text_of(events: list[pb.Event]) -> str:
    kinds = [e for e in events if e.WhichOneof("kind") == "text_message_content"]
    return "".join(e.text_message_content.delta for e in kinds)


def assert_whole_run(events: list[pb.Event], stored: list[int]) -> None:
    """Each stored event once, in order, from RUN_STARTED to RUN_FINISHED."""
    seqs = [e.seq for e in events]
    assert seqs == stored, f"lost {set(stored) - set(seqs)}, extra {len(seqs) - len(set(seqs))}"
    assert events[0].WhichOneof("kind") == "run_started"
    assert events[-1].WhichOneof("kind") == "run_finished"
    assert text_of(events) == ANSWER


async def test_a_run_whose_connection_is_cut_mid_stream_resumes_with_no_event_lost_or_twice(
    harness: Harness, proxy: CuttableProxy
) -> None:
    def consume() -> tuple[list[pb.Event], int]:
        events: list[pb.Event] = []
        with Client(proxy.target) as client:
            run = client.run("cut-sync", SLOW_RUN, create_session=True)
            for event in run:
                events.append(event)
                if len(events) in (8, 20):
                    proxy.cut_to(harness.server.port)
            return events, run.reconnects

    async with asyncio.timeout(WAIT * 2):
        events, reconnects = await asyncio.to_thread(consume)
    assert reconnects >= 2
    assert proxy.connections >= 3
    assert_whole_run(events, await stored_seqs(harness, "cut-sync"))


async def test_an_async_run_cut_twice_resumes_with_no_event_lost_or_twice(
    harness: Harness, proxy: CuttableProxy
) -> None:
    events: list[pb.Event] = []
    async with asyncio.timeout(WAIT * 2), AsyncClient(proxy.target) as client:
        run = client.run("cut-async", SLOW_RUN, create_session=True)
        async for event in run:
            events.append(event)
            if len(events) in (5, 15):
                proxy.cut_to(harness.server.port)
    assert run.reconnects >= 2
    assert_whole_run(events, await stored_seqs(harness, "cut-async"))


async def test_a_run_cut_before_its_first_event_is_replayed_from_its_start(
    harness: Harness, proxy: CuttableProxy
) -> None:
    """The engine started the run but no event reached the client: the client finds the run
    by its own run id and replays it from RUN_STARTED instead of starting it twice."""
    events: list[pb.Event] = []
    async with asyncio.timeout(WAIT * 2), AsyncClient(proxy.target) as client:
        await client.list_sessions()  # connected: from now on the engine's answers are held
        proxy.hold()
        run = client.run("cut-early", SLOW_RUN, create_session=True)
        stream = aiter(run)
        first = asyncio.ensure_future(anext(stream))
        await wait_until_started(harness, "cut-early")
        proxy.cut_to(harness.server.port)
        events.append(await first)
        events += [event async for event in stream]
    assert run.reconnects >= 1
    assert_whole_run(events, await stored_seqs(harness, "cut-early"))
    runs = await harness.stub.ListRuns(pb.ListRunsRequest(session_id="cut-early"))
    assert [r.id for r in runs.runs] == [run.run_id]


async def wait_until_started(harness: Harness, session_id: str) -> None:
    async with asyncio.timeout(WAIT):
        while True:
            try:
                session = await harness.stub.GetSession(pb.GetSessionRequest(session_id=session_id))
            except grpc.aio.AioRpcError:  # not created yet
                session = None
            if session is not None and session.last_seq > 2:
                return
            await asyncio.sleep(0.02)


async def test_refusals_are_exceptions_that_name_the_problem(harness: Harness) -> None:
    async with asyncio.timeout(WAIT), AsyncClient(harness.target) as client:
        with pytest.raises(NotFound, match="nope"):
            await client.get_session("nope")
        with pytest.raises(InvalidArgument, match="session_id"):
            [event async for event in client.run("", "hello")]
        busy = client.run("busy", SLOW_RUN, create_session=True)
        stream = aiter(busy)
        await anext(stream)
        with pytest.raises(Busy) as refused:
            [event async for event in client.run("busy", "hello")]
        assert refused.value.reason
        rest = [event async for event in stream]
        assert rest[-1].WhichOneof("kind") == "run_finished"


@pytest.fixture
async def auth_harness(llm: FakeOpenAI) -> AsyncIterator[Harness]:
    settings = engine_settings(
        OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="k", AGENTIK_TOKENS=TOKENS_ENV
    )
    async with running_engine(settings) as running:
        yield running


async def test_the_token_is_sent_as_a_bearer_and_refusals_say_why(auth_harness: Harness) -> None:
    target = auth_harness.target
    async with asyncio.timeout(WAIT):
        async with AsyncClient(target) as anonymous:
            with pytest.raises(Unauthenticated):
                await anonymous.list_sessions()
        async with AsyncClient(target, token=TOKENS["alice"]) as alice:
            events = [e async for e in alice.run("alices", "hi", create_session=True)]
            assert text_of(events) == "Echo: hi"
        async with AsyncClient(target, token=TOKENS["bob"]) as bob:
            with pytest.raises((PermissionDenied, NotFound)):
                await bob.get_session("alices")

    def sync_calls() -> int:
        with Client(target, token=TOKENS["alice"]) as alice:
            return len(alice.list_sessions().sessions)

    assert await asyncio.to_thread(sync_calls) == 1


async def test_a_subscription_cut_mid_stream_follows_on_with_no_event_lost_or_twice(
    harness: Harness, proxy: CuttableProxy
) -> None:
    """A second client following the session live (``subscribe``) resumes like a run."""
    await harness.stub.CreateSession(pb.CreateSessionRequest(session_id="watched"))
    events: list[pb.Event] = []
    async with asyncio.timeout(WAIT * 2), AsyncClient(proxy.target) as watcher:
        follow = watcher.subscribe("watched", after_seq=0)
        async with AsyncClient(harness.target) as runner:
            run = asyncio.ensure_future(collect_run(runner, "watched"))
            async for event in follow:
                events.append(event)
                if len(events) == 10:
                    proxy.cut_to(harness.server.port)
                if event.WhichOneof("kind") == "run_finished":
                    break
            await run
    assert follow.reconnects >= 1
    assert_whole_run(events, await stored_seqs(harness, "watched"))


async def collect_run(client: AsyncClient, session_id: str) -> list[pb.Event]:
    return [event async for event in client.run(session_id, SLOW_RUN)]


async def test_fork_copies_a_session_up_to_a_message_sync_and_async(harness: Harness) -> None:
    async with asyncio.timeout(WAIT), AsyncClient(harness.target) as client:
        [event async for event in client.run("to-fork", "hello", create_session=True)]
        listed = await harness.stub.ListMessages(pb.ListMessagesRequest(session_id="to-fork"))
        first = listed.messages[0].id
        forked = await client.fork("to-fork", first, "forked-async")
        assert (forked.id, forked.message_count) == ("forked-async", 1)
        with pytest.raises(InvalidArgument, match="up_to_message_id 'zzz'"):
            await client.fork("to-fork", "zzz")

    def sync_fork() -> int:
        with Client(harness.target) as sync:
            return sync.fork("to-fork", first).message_count

    assert await asyncio.to_thread(sync_fork) == 1
