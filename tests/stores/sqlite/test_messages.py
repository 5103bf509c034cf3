"""The SQLite store's messages (``engine_service.stores.sqlite.messages``): a run's input
and the events before it are one transaction."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from engine_service.core import events as ev
from engine_service.core.errors import InvalidInput
from engine_service.core.models import Message, Role, TextPart
from engine_service.stores.sqlite import SqliteSessionStore

T0 = datetime(2025, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)


def message(message_id: str) -> Message:
    return Message(id=message_id, role=Role.USER, content=[TextPart("hello")], created_at=T0)


def event(seq: int, body: ev.EventBody) -> ev.Event:
    return ev.Event(seq, 1_700_000_000.123456 + seq, "s1", "r1", body)


async def test_sqlite_stores_a_runs_input_and_its_events_in_one_transaction(
    tmp_path: Path,
) -> None:
    """Events refused (their seqs do not follow the last) roll the messages back too."""
    store = SqliteSessionStore(tmp_path / "one.db")
    try:
        await store.create_session("s1", "", T0)
        await store.append_events("s1", [event(1, ev.RunStarted())])
        with pytest.raises(InvalidInput):
            await store.append_messages_and_events(
                "s1", [message("a")], [event(1, ev.StepStarted("x"))]
            )
        assert await store.all_messages("s1") == []
        assert (await store.get_session("s1")).last_seq == 1
    finally:
        await store.close()
