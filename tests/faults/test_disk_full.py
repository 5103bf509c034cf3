"""A full disk under the whole stack: `/health` says so, turns fail with the cause in words,
nothing stored is lost, and everything works again once space returns."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from tests.fakes.fake_openai import FakeOpenAI
from tests.faults.conftest import WITHIN, new_conversation
from tests.faults.ledger import Ledger, audit, follow, poll, send_request, store_view
from tests.small_disk import SmallDisk, small_disk
from tests.web.e2e.conftest import Stack

pytestmark = [pytest.mark.processes, pytest.mark.timeout(180)]

CAUSE = "storage unavailable: the disk is full"


@pytest.fixture(scope="module")
def disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SmallDisk]:
    with small_disk(tmp_path_factory.mktemp("small") / "disk") as mounted:
        yield mounted


@pytest.fixture(scope="module")
def stack(
    llm: FakeOpenAI, disk: SmallDisk, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    running = Stack(
        llm, tmp_path_factory.mktemp("disk-full"), AGENTIK_STORE=f"sqlite:///{disk.path}/a.db"
    )
    yield running
    running.stop()


async def _health(http: httpx.AsyncClient) -> int:
    return (await http.get("/health")).status_code


async def test_a_full_disk_fails_turns_clearly_and_the_stack_recovers_when_space_returns(
    stack: Stack, http: httpx.AsyncClient, disk: SmallDisk
) -> None:
    conversation_id = await new_conversation(http)
    before = Ledger(conversation_id)
    assert await follow(http, before, send_request(conversation_id, "hello"), WITHIN)
    assert before.frames[-1].type == "end"

    failed = Ledger(conversation_id)
    turn = asyncio.create_task(
        follow(http, failed, send_request(conversation_id, "[[slow:0.01]] [[chunks:300]]"), WITHIN)
    )
    await poll(lambda: failed.count("append_text") >= 3, "the turn to stream", WITHIN)
    disk.fill()  # under the streaming turn
    assert await turn
    assert failed.frames[-1].type == "error"
    error = failed.frames[-1].data or {}
    assert (error["code"], error["message"]) == ("storage_unavailable", CAUSE)

    await poll(lambda: _is(http, 503), "/health to say 503", WITHIN)
    refused = await http.post(f"/agentik/conversations/{conversation_id}/send", json={"text": "x"})
    assert refused.status_code == 503
    assert "storage unavailable" in refused.json()["error"]["message"]
    assert "Traceback" not in refused.text and "sqlite" not in refused.text.lower()
    history = await http.get(f"/agentik/conversations/{conversation_id}/messages")
    assert (
        history.status_code == 200 and history.json()["items"][0]["content"][0]["text"] == "hello"
    )

    disk.free()
    await poll(lambda: _is(http, 200), "/health to say 200 again", WITHIN)
    after = Ledger(conversation_id)
    assert await follow(http, after, send_request(conversation_id, "back"), WITHIN)
    assert after.frames[-1].type == "end"

    target = f"127.0.0.1:{stack.grpc_port}"
    views = {conversation_id: await store_view(http, target, conversation_id, WITHIN)}
    streams = [("before", before), ("failed", failed), ("after", after)]
    result = audit(streams, views)
    # Each stream read only its own turn: together they hold every stored id, once.
    assert not result.duplicated and not result.unknown and not result.differing, str(result)
    assert not result.store_problems, str(result)
    received = [i for _, ledger in streams for i in ledger.ids]
    assert sorted(received) == views[conversation_id].expected_ids


async def _is(http: httpx.AsyncClient, status: int) -> bool:
    return await _health(http) == status
