"""A message larger than the model's context budget is refused before the turn starts,
on every HTTP surface, as ``context_too_long`` naming both sizes (docs/conversations.md)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flask import Flask

from tests.fakes.fake_openai import FakeOpenAI
from tests.web.conftest import ApiClient, BackgroundEngine, engine_settings, web_settings
from web_facade import create_app
from web_facade.engine_client import EngineClient

HUGE = "x" * 20_000  # about 5,000 tokens; the budget of a 4,000-token window is 3,000


@pytest.fixture(scope="module")
def small_window_app(llm: FakeOpenAI) -> Iterator[Flask]:
    engine = BackgroundEngine(engine_settings(llm, AGENTIK_CONTEXT_TOKENS="4000"))
    target = engine.start()
    client = EngineClient(web_settings(target).web.engine_target)
    app = create_app(web_settings(target), client)
    app.testing = True
    yield app
    client.close()
    engine.stop()


def test_agentik_refuses_a_message_larger_than_the_budget_with_both_sizes(
    small_window_app: Flask,
) -> None:
    api = ApiClient(small_window_app.test_client())
    conversation_id = api.new_conversation()

    response = api.call(
        "POST", f"/agentik/conversations/{conversation_id}/send", json={"text": HUGE}
    )

    assert response.status_code == 400
    error = response.get_json()["error"]
    assert error["code"] == "context_too_long"
    assert "about 5,00" in error["message"] and "budget of 2,9" in error["message"]
    messages = api.call("GET", f"/agentik/conversations/{conversation_id}/messages")
    assert messages.get_json()["items"] == []  # nothing was stored


def test_agui_refuses_it_before_the_stream_opens(small_window_app: Flask) -> None:
    client = small_window_app.test_client()
    body: dict[str, object] = {
        "threadId": "t-huge",
        "runId": "r-huge",
        "messages": [{"id": "u1", "role": "user", "content": HUGE}],
        "tools": [],
        "context": [],
        "state": None,
        "forwardedProps": {},
    }

    response = client.post("/agui", json=body)

    assert response.status_code == 400
    assert response.get_json()["error"]["code"] == "context_too_long"
