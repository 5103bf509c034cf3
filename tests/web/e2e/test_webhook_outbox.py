"""The webhook outbox of a conversation that is deleted, on the whole stack (the engine on a
SQLite file, gunicorn): its deliveries go with it, the one waiting for a retry and the one
that failed for good, so nothing of it is POSTed later or listed as failed."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.engine.webhooks.receiver import Receiver
from tests.fakes.fake_openai import FakeOpenAI, FakeReply
from tests.web.e2e.conftest import Stack, wait_for


@pytest.fixture(scope="module")
def hook() -> Iterator[Receiver]:
    with Receiver() as receiver:
        receiver.status = 503  # every attempt fails: deliveries wait in the outbox
        yield receiver


@pytest.fixture(scope="module")
def store_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("outbox") / "agentik.db"


@pytest.fixture(scope="module")
def stack(
    llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory, store_file: Path
) -> Iterator[Stack]:
    running = Stack(
        llm,
        tmp_path_factory.mktemp("stack"),
        AGENTIK_STORE=f"sqlite:///{store_file}",
        AGENTIK_WEBHOOKS_ALLOW_PRIVATE="1",
        AGENTIK_WEBHOOKS_MAX_ATTEMPTS="2",
        AGENTIK_WEBHOOKS_BASE_DELAY="3",
        AGENTIK_WEBHOOKS_POLL_INTERVAL="0.05",
    )
    yield running
    running.stop()


def outbox(store_file: Path) -> dict[str, tuple[str, int]]:
    """The engine's outbox as stored: each delivery's status and attempts."""
    with sqlite3.connect(f"file:{store_file}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT id, status, attempts FROM deliveries").fetchall()
    conn.close()
    return {row[0]: (row[1], row[2]) for row in rows}


def run_with_webhook(
    http: httpx.Client, llm: FakeOpenAI, store_file: Path, conversation: str, url: str
) -> str:
    """One turn told to ``url``, its stream read to the end; its webhook's delivery id."""
    before = set(outbox(store_file))
    llm.enqueue(FakeReply(text="the answer the conversation holds"))
    sent = http.post(
        f"/agentik/conversations/{conversation}/send", json={"text": "hi", "webhook": {"url": url}}
    )
    assert sent.status_code == 200, sent.text
    assert "event: end" in sent.text
    (added,) = set(outbox(store_file)) - before  # stored with the run's end
    return added


def test_deleting_a_conversation_takes_its_pending_and_failed_webhooks_with_it(
    stack: Stack, llm: FakeOpenAI, hook: Receiver, store_file: Path
) -> None:
    with stack.client() as http:
        doomed = http.post("/agentik/conversations", json={}).json()["id"]
        kept = http.post("/agentik/conversations", json={}).json()["id"]

        failed = run_with_webhook(http, llm, store_file, doomed, hook.url)
        wait_for(lambda: outbox(store_file)[failed][0] == "failed", "the webhook to fail")
        pending = run_with_webhook(http, llm, store_file, doomed, hook.url)
        other = run_with_webhook(http, llm, store_file, kept, hook.url)
        wait_for(
            lambda: all(outbox(store_file)[key][1] >= 1 for key in (pending, other)),
            "the first attempts",
        )
        assert outbox(store_file)[pending][0] == "pending"  # a retry is due later
        listed = http.get("/agentik/webhooks/failed?limit=100").json()["items"]
        assert failed in [item["id"] for item in listed]

        assert http.delete(f"/agentik/conversations/{doomed}").status_code == 204

        stored = outbox(store_file)
        assert failed not in stored and pending not in stored  # nothing left to POST
        assert stored[other] == ("pending", 1)  # another conversation's stays
        listed = http.get("/agentik/webhooks/failed?limit=100").json()["items"]
        assert failed not in [item["id"] for item in listed]
