"""A full disk under the engine: runs end with a clear error, nothing wedges, it recovers.

The SQLite file lives on a real 2 MB tmpfs that the test fills up and frees again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.core import events as ev
from engine_service.stores import SqliteSessionStore
from tests.engine.harness import (
    WAIT,
    Harness,
    collect,
    engine_settings,
    kind,
    next_event,
    running_engine,
    user,
)
from tests.fakes.fake_openai import FakeOpenAI
from tests.small_disk import SmallDisk, small_disk


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    with small_disk(tmp_path / "disk") as mounted:
        yield mounted


@pytest.fixture
async def harness(llm: FakeOpenAI, disk: SmallDisk) -> AsyncIterator[Harness]:
    settings = engine_settings(
        AGENTIK_STORE=f"sqlite:///{disk.path / 'agentik.db'}",
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_API_KEY="test-key",
        AGENTIK_LLM_MAX_RETRIES="0",
    )
    async with running_engine(settings) as running:
        yield running


async def _health(harness: Harness) -> int:
    stub: Any = health_pb2_grpc.HealthStub(harness.channel)
    reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=WAIT)
    return int(reply.status)


async def _wait_health(harness: Harness, status: int) -> None:
    """Watch the health service until it reports ``status`` (bounded)."""
    stub: Any = health_pb2_grpc.HealthStub(harness.channel)
    watch = stub.Watch(health_pb2.HealthCheckRequest(service=""))
    try:
        async with asyncio.timeout(WAIT):
            async for reply in watch:
                if reply.status == status:
                    return
    finally:
        watch.cancel()
    raise AssertionError(f"health never reported {status}")


def _lost_and_duplicated(seen: list[pb.Event], stored: list[pb.Event]) -> tuple[int, int]:
    """Events a client saw that the log lacks or holds differently, and seqs stored twice."""
    by_seq = {e.seq: e for e in stored}
    lost = sum(1 for e in seen if by_seq.get(e.seq) != e)
    return lost, len(stored) - len(by_seq)


async def test_a_full_disk_fails_the_run_clearly_and_the_conversation_recovers(
    harness: Harness, disk: SmallDisk
) -> None:
    stub = harness.stub
    await stub.CreateSession(pb.CreateSessionRequest(session_id="s"))
    seen = await collect(stub.Run(pb.RunRequest(session_id="s", messages=[user("hello")])))
    assert kind(seen[-1]) == "run_finished"
    call = stub.Run(pb.RunRequest(session_id="s", messages=[user("[[chunks:400]][[slow:0.005]]")]))
    while len(seen) < 40:  # the run is streaming: now the disk fills up under it
        seen.append(await next_event(call))
    disk.fill()
    seen += await collect(call)

    assert kind(seen[-1]) == "run_error", [kind(e) for e in seen[-3:]]
    assert seen[-1].run_error.code == "storage_unavailable"
    failure = seen[-1].run_error.message
    assert failure == "storage unavailable: the disk is full", failure
    assert "Error" not in failure  # no internal class names

    await _wait_health(harness, health_pb2.HealthCheckResponse.NOT_SERVING)
    # Not wedged: nothing runs, and each refusal says why.
    assert not (await stub.Interrupt(pb.InterruptRequest(session_id="s"))).interrupted
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await collect(stub.Run(pb.RunRequest(session_id="s", messages=[user("more")])))
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "storage unavailable" in (refused.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as not_deleted:
        await stub.DeleteSession(pb.DeleteSessionRequest(session_id="s"))
    assert not_deleted.value.code() == grpc.StatusCode.UNAVAILABLE
    reads = await stub.ListMessages(pb.ListMessagesRequest(session_id="s"))
    assert reads.messages[0].content[0].text.text == "hello"
    # A client shown the run's end from memory resumes after it, though the store does not
    # hold it yet: not refused as a point past the session's last event.
    shown_end = seen[-1].seq
    resumed = stub.Subscribe(pb.SubscribeRequest(session_id="s", after_seq=shown_end))

    disk.free()
    await _wait_health(harness, health_pb2.HealthCheckResponse.SERVING)
    after = await collect(stub.Run(pb.RunRequest(session_id="s", messages=[user("back")])))
    assert kind(after[-1]) == "run_finished"
    seen += after
    followed = [await next_event(resumed) for _ in after]
    resumed.cancel()
    assert [e.seq for e in followed] == [e.seq for e in after]

    stored = await collect(stub.Subscribe(pb.SubscribeRequest(session_id="s", until_idle=True)))
    assert _lost_and_duplicated(seen, stored) == (0, 0)
    seqs = [e.seq for e in stored]
    assert seqs == sorted(set(seqs))
    runs = await stub.ListRuns(pb.ListRunsRequest(session_id="s"))
    assert not any(r.status == pb.RUN_STATUS_RUNNING for r in runs.runs)
    ends = [e.run_id for e in stored if kind(e) in ("run_finished", "run_error")]
    assert sorted(ends) == sorted(r.id for r in runs.runs if r.id in ends)
    assert len(ends) == len(set(ends))


async def test_the_engine_starts_on_a_full_disk_and_closes_the_abandoned_run_when_it_can(
    llm: FakeOpenAI, disk: SmallDisk
) -> None:
    path = disk.path / "agentik.db"
    now = datetime.now(UTC)
    store = SqliteSessionStore(path)
    await store.begin_run("s", "r", now, create=True, reserve=64)
    started = ev.Event(1, now.timestamp(), "s", "r", ev.RunStarted())
    text = [
        ev.Event(2, now.timestamp(), "s", "r", ev.TextMessageStart("a")),
        ev.Event(3, now.timestamp(), "s", "r", ev.TextMessageContent("a", "half an ans")),
    ]
    await store.append_events("s", [started, *text])
    await store.close()
    disk.fill()
    settings = engine_settings(AGENTIK_STORE=f"sqlite:///{path}", OPENAI_BASE_URL=llm.base_url)

    async with running_engine(settings) as harness:
        assert await _health(harness) == health_pb2.HealthCheckResponse.NOT_SERVING
        session = await harness.stub.GetSession(pb.GetSessionRequest(session_id="s"))
        assert session.active_run_id == "r"

        disk.free()
        await _wait_health(harness, health_pb2.HealthCheckResponse.SERVING)
        closing = await collect(
            harness.stub.Subscribe(
                pb.SubscribeRequest(session_id="s", after_seq=3, until_idle=True)
            )
        )
        messages = await harness.stub.ListMessages(pb.ListMessagesRequest(session_id="s"))

    assert [kind(e) for e in closing] == ["text_message_end", "message_stored", "run_finished"]
    assert closing[0].seq == 65  # after the reserved block, never inside it
    assert messages.messages[-1].content[0].text.text == "half an ans"
    assert messages.messages[-1].status == pb.MESSAGE_STATUS_INTERRUPTED


async def test_while_a_run_end_waits_for_the_disk_another_caller_is_told_not_found(
    llm: FakeOpenAI, disk: SmallDisk
) -> None:
    settings = engine_settings(
        AGENTIK_STORE=f"sqlite:///{disk.path / 'agentik.db'}",
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_API_KEY="test-key",
        AGENTIK_LLM_MAX_RETRIES="0",
        AGENTIK_TOKENS="alice:alice-token,bob:bob-token",
    )
    alice = [("authorization", "Bearer alice-token")]
    bob = [("authorization", "Bearer bob-token")]
    async with running_engine(settings) as harness:
        stub = harness.stub
        await stub.CreateSession(pb.CreateSessionRequest(session_id="s"), metadata=alice)
        call = stub.Run(
            pb.RunRequest(session_id="s", messages=[user("[[chunks:400]][[slow:0.005]]")]),
            metadata=alice,
        )
        seen = [await next_event(call) for _ in range(40)]
        disk.fill()
        seen += await collect(call)
        assert kind(seen[-1]) == "run_error"

        for metadata, code in ((alice, "UNAVAILABLE"), (bob, "NOT_FOUND")):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await collect(
                    stub.Run(
                        pb.RunRequest(session_id="s", messages=[user("more")]), metadata=metadata
                    )
                )
            assert refused.value.code().name == code, refused.value.details()
            if code == "NOT_FOUND":
                assert seen[-1].run_id not in (refused.value.details() or "")
        disk.free()
