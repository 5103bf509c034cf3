"""The LLM connection dies mid-stream: the run ends with an error, nothing else is harmed."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.fakes.fake_openai import FakeOpenAI
from tests.faults.conftest import WITHIN, new_conversation
from tests.faults.ledger import Ledger, StoreView, audit, follow, poll, send_request, store_view
from tests.web.e2e.conftest import Stack

pytestmark = [pytest.mark.processes, pytest.mark.timeout(120)]

FREE_WITHIN = 5.0
"""How soon after its error event the conversation must take a new send, in seconds."""


async def _idle(http: httpx.AsyncClient, conversation_id: str) -> bool:
    response = await http.get(f"/agentik/conversations/{conversation_id}")
    return response.json()["active_run_id"] is None


async def _after_the_failed_turn(
    stack: Stack, http: httpx.AsyncClient, failed: Ledger, user_text: str
) -> StoreView:
    """What must hold after a turn whose LLM died: an error event ended it, the conversation
    is free (a new send works), the user's message is stored, and no id was lost or repeated."""
    conversation_id = failed.conversation_id
    error = failed.frames[-1]
    assert error.type == "error", [f.type for f in failed.frames]
    assert error.data is not None and error.data["code"] and error.data["message"]
    # The run's end is published before the engine lets the conversation go: a moment.
    await poll(lambda: _idle(http, conversation_id), "the conversation to be free", FREE_WITHIN)

    again = Ledger(conversation_id)
    assert await follow(http, again, send_request(conversation_id, "are you back?"), WITHIN)
    assert again.frames[-1].type == "end"
    assert again.text() == "Echo: are you back?"

    history = await http.get(f"/agentik/conversations/{conversation_id}/messages")
    users = [m for m in history.json()["items"] if m["role"] == "user"]
    assert [m["content"][0]["text"] for m in users] == [user_text, "are you back?"]

    view = await store_view(http, f"127.0.0.1:{stack.grpc_port}", conversation_id, WITHIN)
    both = Ledger(conversation_id, failed.frames + again.frames)
    result = audit([("both turns", both)], {conversation_id: view})
    assert result.clean(), str(result)
    return view


async def test_an_llm_dropping_mid_answer_ends_the_run_in_an_error_and_frees_the_conversation(
    stack: Stack, http: httpx.AsyncClient
) -> None:
    conversation_id = await new_conversation(http)
    text = "tell me a story [[drop]]"
    failed = Ledger(conversation_id)
    assert await follow(http, failed, send_request(conversation_id, text), WITHIN)
    assert failed.count("append_text") >= 1, "the fake drops after the first text chunk"
    await _after_the_failed_turn(stack, http, failed, text)


async def test_an_llm_server_stopped_mid_stream_ends_the_run_in_an_error_and_a_later_send_works(
    stack: Stack, http: httpx.AsyncClient, llm: FakeOpenAI
) -> None:
    conversation_id = await new_conversation(http)
    text = "a long one [[slow:0.05]] [[chunks:400]]"
    failed = Ledger(conversation_id)
    turn = asyncio.create_task(follow(http, failed, send_request(conversation_id, text), WITHIN))
    stopped = False
    try:
        await poll(lambda: failed.count("append_text") >= 3, "the answer to stream", WITHIN)
        stopped = True
        await asyncio.to_thread(llm.stop)  # cuts every open connection
        assert await turn
    finally:
        turn.cancel()
        if stopped:
            llm.start()  # again on the same port, for the next send
    assert 3 <= failed.count("append_text") < 400
    await _after_the_failed_turn(stack, http, failed, text)
