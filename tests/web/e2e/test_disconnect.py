"""Under gunicorn, a client that leaves is noticed through the heartbeat and its call cancelled."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.fakes.fake_openai import FakeOpenAI
from tests.web.e2e.conftest import WAIT, SseStream, Stack, has, wait_for


@pytest.fixture(scope="module")
def cancelling_stack(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = Stack(llm, tmp_path_factory.mktemp("cancel"), AGENTIK_ON_DISCONNECT="cancel")
    yield running
    running.stop()


def test_with_on_disconnect_cancel_a_client_leaving_send_stops_the_turn_and_the_llm_call(
    cancelling_stack: Stack, llm: FakeOpenAI
) -> None:
    with cancelling_stack.client() as http:
        conversation_id = http.post("/agentik/conversations", json={}).json()["id"]
        sender = SseStream(
            http,
            "POST",
            f"/agentik/conversations/{conversation_id}/send",
            json={"text": "hang on [[hang]]"},
        )
        sender.read_until(has("append_text"))
        left = time.monotonic()
        sender.close()

        def idle() -> bool:
            body = http.get(f"/agentik/conversations/{conversation_id}").json()
            return body["active_run_id"] is None

        wait_for(idle, "the turn to be interrupted")
        # Noticed at the first failed heartbeat write (AGENTIK_HEARTBEAT=0.5 here).
        assert time.monotonic() - left < 5.0
        assert llm.wait_connection_closed(WAIT)
        history = http.get(f"/agentik/conversations/{conversation_id}/messages").json()
        assert history["items"][-1]["status"] == "interrupted"


def test_by_default_a_client_leaving_send_leaves_the_turn_running(
    stack: Stack,
) -> None:
    with stack.client() as http:
        conversation_id = http.post("/agentik/conversations", json={}).json()["id"]
        sender = SseStream(
            http,
            "POST",
            f"/agentik/conversations/{conversation_id}/send",
            json={"text": "carry on [[slow:0.05]]"},
        )
        sender.read_until(has("append_text"))
        sender.close()
        rest = SseStream(
            http, "GET", f"/agentik/conversations/{conversation_id}/events?until_idle=true&after=0"
        ).read_to_end()
        assert rest[-1].type == "end"
        assert httpx.get(f"{stack.base_url}/health", timeout=WAIT).status_code == 200
