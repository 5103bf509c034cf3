"""A2A ListTasks costs one request of the caller's rate and bounded engine work, however
many tasks the page lists and however long their conversations are."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from agentik.a2a.rules import LISTED_MESSAGES
from engine_service.core.models import ContentPart, Message, Role, RunStatus, TextPart
from engine_service.stores import SqliteSessionStore
from tests.fakes.fake_openai import FakeOpenAI
from tests.web.a2a.conftest import V10
from tests.web.conftest import BackgroundEngine, engine_settings, web_settings
from web_facade import create_app
from web_facade.engine_client import EngineClient

ALICE = {"Authorization": "Bearer secret-a", **V10}
PER_MINUTE = 30
TASKS = 34
LONG = 3000
"""Messages of the one long task."""


def _message(message_id: str, run_id: str, role: Role) -> Message:
    text: list[ContentPart] = [TextPart(f"text of {message_id}")]
    return Message(
        id=message_id, role=role, content=text, created_at=datetime.now(UTC), run_id=run_id
    )


async def _fill(path: Path) -> None:
    """``TASKS`` one-turn tasks of alice's in context ``short``, one task of ``LONG``
    messages in context ``long``."""
    store = SqliteSessionStore(path)
    try:
        for session, runs, size in (("short", TASKS, 2), ("long", 1, LONG)):
            for index in range(runs):
                run_id = f"{session}-{index}"
                now = datetime.now(UTC)
                await store.begin_run(session, run_id, now, create=True, owner="alice")
                roles = [Role.USER, Role.ASSISTANT]
                messages = [_message(f"{run_id}-m{n}", run_id, roles[n % 2]) for n in range(size)]
                await store.append_messages(session, messages)
                await store.finish_run(session, run_id, RunStatus.SUCCEEDED, datetime.now(UTC))
    finally:
        await store.close()


@pytest.fixture
def client(llm: FakeOpenAI, tmp_path: Path) -> Iterator[FlaskClient]:
    path = tmp_path / "sessions.db"
    asyncio.run(_fill(path))
    settings = engine_settings(
        llm,
        AGENTIK_STORE=f"sqlite:///{path}",
        AGENTIK_TOKENS="alice:secret-a",
        AGENTIK_REQUESTS_PER_MINUTE=str(PER_MINUTE),
    )
    engine = BackgroundEngine(settings)
    target = engine.start()
    engine_client = EngineClient(target)
    app = create_app(web_settings(target), engine_client)
    app.testing = True
    try:
        yield app.test_client()
    finally:
        engine_client.close()
        engine.stop()


def _rpc(client: FlaskClient, method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    response = client.post("/", json=body, headers=ALICE)
    reply: dict[str, Any] = response.get_json()
    return reply


def test_listing_more_tasks_than_the_rate_allows_costs_one_request(client: FlaskClient) -> None:
    listed = _rpc(client, "ListTasks", {"contextId": "short", "pageSize": 50})
    assert "error" not in listed, listed
    assert len(listed["result"]["tasks"]) == TASKS
    assert all(len(task["history"]) == 2 for task in listed["result"]["tasks"])
    # Each list takes one request of alice's 30: 29 more pass, the next is refused.
    for _ in range(PER_MINUTE - 1):
        again = _rpc(client, "ListTasks", {"contextId": "short", "pageSize": 50})
        assert len(again["result"]["tasks"]) == TASKS, again
    refused = client.post(
        "/",
        json={"jsonrpc": "2.0", "id": 2, "method": "ListTasks", "params": {}},
        headers=ALICE,
    )
    assert refused.status_code == 429


def test_a_task_of_a_long_conversation_lists_its_latest_messages_only(
    client: FlaskClient,
) -> None:
    started = time.monotonic()
    listed = _rpc(client, "ListTasks", {"contextId": "long", "includeArtifacts": True})
    elapsed = time.monotonic() - started
    (task,) = listed["result"]["tasks"]
    history = task["history"]
    assert len(history) == LISTED_MESSAGES
    assert history[-1]["messageId"] == f"long-0-m{LONG - 1}"
    assert len(task["artifacts"]) == LISTED_MESSAGES // 2
    assert elapsed < 5.0, elapsed  # generous: the point is that it reads 101 messages
