"""The SQLite store as a whole (``engine_service.stores.sqlite.store``): the calls of a
run's turn, across its parts, keep their statements few."""

from __future__ import annotations

from pathlib import Path

from engine_service.core.clock import utc_now
from engine_service.core.events import Event, TextMessageContent, Usage
from engine_service.core.models import Message, Role, RunStatus, TextPart
from engine_service.stores.sqlite import SqliteSessionStore


def _events(first: int, count: int, session_id: str = "s") -> list[Event]:
    return [
        Event(seq, 0.0, session_id, "r", TextMessageContent("m", f"w{seq}"))
        for seq in range(first, first + count)
    ]


async def test_a_short_turns_writes_take_few_statements(tmp_path: Path) -> None:
    """Under load every statement the writer thread runs waits for the GIL again, so the
    calls of a turn keep their statements few: the session's checks are one read each
    (begin_run: the session, its interrupts and the run id; messages: the session and
    their last position), events' check is the update that moves the last seq, a run's
    end one update per table."""
    store = SqliteSessionStore(tmp_path / "s.db")
    now = utc_now()
    statements: list[str] = []
    try:
        store._conn.set_trace_callback(statements.append)
        await store.begin_run(
            "s", "r", now, create=True, reserve=8, owner="o", require_owner=True,
            admit=lambda pending: None,
        )  # fmt: skip
        begin = len(statements)
        asked = Message("m1", Role.USER, [TextPart("hi")], created_at=now, run_id="r")
        await store.append_messages("s", [asked], title="hi", now=now)
        messages = len(statements) - begin
        await store.append_events("s", _events(1, 3), reserve_through=20)
        events = len(statements) - begin - messages
        await store.finish_run(
            "s", "r", RunStatus.SUCCEEDED, now, events=_events(4, 1), usage=Usage(3, 4, 7)
        )
        finish = len(statements) - begin - messages - events
    finally:
        store._conn.set_trace_callback(None)
        await store.close()
    statements = [s for s in statements if not s.startswith("PRAGMA busy_timeout")]
    work = [s.split()[0] for s in statements if s.split()[0] not in ("BEGIN", "COMMIT")]
    # begin_run: the read, the session, the taken run id, the run, the session's run, its load
    assert begin <= 2 + 2 + 6, statements
    # the read (session and position), the insert, the title
    assert messages <= 2 + 2 + 3, statements
    # one update (that they follow the last seq, the seq and the reservation), three inserts
    assert events <= 2 + 2 + 4, statements
    # the update of last seq, the insert; the run's status; the run; the session
    assert finish <= 2 + 2 + 5, statements
    assert len(work) == 6 + 3 + 4 + 5, work
