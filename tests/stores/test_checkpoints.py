"""The checkpoint API every store shares (``core.context``): a compaction's summary and
the messages it covers, so a run reads only the messages after it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from engine_service.core.errors import InvalidInput, SessionNotFound
from engine_service.core.models import Message, Role, TextPart
from engine_service.core.store import Checkpoint
from engine_service.stores import SessionStore

T0 = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)


def message(message_id: str) -> Message:
    return Message(id=message_id, role=Role.USER, content=[TextPart(message_id)], created_at=T0)


async def seeded(store: SessionStore, count: int) -> list[str]:
    await store.create_session("s1", "", T0)
    ids = [f"m{i}" for i in range(count)]
    await store.append_messages("s1", [message(i) for i in ids])
    return ids


async def test_without_a_checkpoint_every_message_is_the_context(store: SessionStore) -> None:
    ids = await seeded(store, 5)

    checkpoint, messages = await store.context_messages("s1")

    assert checkpoint is None
    assert [m.id for m in messages] == ids


async def test_a_checkpoint_covers_the_messages_through_its_id(store: SessionStore) -> None:
    await seeded(store, 6)

    saved = await store.save_checkpoint("s1", Checkpoint("m2", "they said hello", 4))
    checkpoint, messages = await store.context_messages("s1")

    assert saved == Checkpoint("m2", "they said hello", 4, covered=3)
    assert checkpoint == saved
    assert [m.id for m in messages] == ["m3", "m4", "m5"]
    # Every message is still stored, and the count still counts them all.
    assert len(await store.all_messages("s1")) == 6
    assert (await store.get_session("s1")).message_count == 6


async def test_a_later_checkpoint_replaces_the_earlier_and_new_messages_follow_it(
    store: SessionStore,
) -> None:
    await seeded(store, 4)
    await store.save_checkpoint("s1", Checkpoint("m1", "first", 1))
    await store.append_messages("s1", [message("m4")])

    await store.save_checkpoint("s1", Checkpoint("m3", "", 0))
    checkpoint, messages = await store.context_messages("s1")

    assert checkpoint == Checkpoint("m3", "", 0, covered=4)
    assert [m.id for m in messages] == ["m4"]


async def test_a_checkpoint_through_an_unknown_message_is_refused(store: SessionStore) -> None:
    await seeded(store, 2)

    with pytest.raises(InvalidInput, match="not a message of the session"):
        await store.save_checkpoint("s1", Checkpoint("nope", "x", 1))
    with pytest.raises(SessionNotFound):
        await store.save_checkpoint("other", Checkpoint("m0", "x", 1))
    with pytest.raises(SessionNotFound):
        await store.context_messages("other")
    assert (await store.context_messages("s1"))[0] is None


async def test_replacing_the_history_drops_the_checkpoint(store: SessionStore) -> None:
    await seeded(store, 3)
    await store.save_checkpoint("s1", Checkpoint("m1", "x", 1))

    await store.replace_messages("s1", [message("n0"), message("n1")])

    checkpoint, messages = await store.context_messages("s1")
    assert checkpoint is None
    assert [m.id for m in messages] == ["n0", "n1"]


async def test_deleting_the_session_deletes_its_checkpoint(store: SessionStore) -> None:
    await seeded(store, 2)
    await store.save_checkpoint("s1", Checkpoint("m0", "x", 1))
    await store.delete_session("s1")
    await store.create_session("s1", "", T0)

    assert await store.context_messages("s1") == (None, [])


async def test_known_message_ids_are_those_of_the_session(store: SessionStore) -> None:
    await seeded(store, 3)
    await store.create_session("s2", "", T0)
    await store.append_messages("s2", [message("x9")])
    many = [f"q{i}" for i in range(1200)] + ["m2", "x9", "m0"]

    assert await store.known_message_ids("s1", many) == {"m0", "m2"}
    assert await store.known_message_ids("s1", []) == set()


async def test_a_runs_context_is_the_checkpoint_the_messages_after_it_and_the_known_ids(
    store: SessionStore,
) -> None:
    """``run_context``: what a new run reads before it starts, in one call (one operation
    of SQLite's writer, one PostgreSQL snapshot): the same as the two reads it replaces."""
    await seeded(store, 4)
    await store.save_checkpoint("s1", Checkpoint("m1", "summary", 5))
    await store.create_session("s2", "", T0)
    await store.append_messages("s2", [message("x9")])
    asked = [f"q{i}" for i in range(700)] + ["m3", "x9", "m0"]

    checkpoint, history, known = await store.run_context("s1", asked)

    assert (checkpoint, history) == await store.context_messages("s1")
    assert checkpoint is not None and checkpoint.through_id == "m1"
    assert [m.id for m in history] == ["m2", "m3"]
    assert known == await store.known_message_ids("s1", asked) == {"m0", "m3"}
    none, others, unknown = await store.run_context("s2", [])
    assert none is None and [m.id for m in others] == ["x9"] and unknown == set()
    with pytest.raises(SessionNotFound):
        await store.run_context("other", ["m0"])


async def test_recent_messages_are_the_last_ones_oldest_first(store: SessionStore) -> None:
    ids = await seeded(store, 7)

    assert [m.id for m in await store.recent_messages("s1", 3)] == ids[-3:]
    assert [m.id for m in await store.recent_messages("s1", 50)] == ids
    assert await store.recent_messages("s1", 0) == []
    with pytest.raises(SessionNotFound):
        await store.recent_messages("other", 3)


async def test_a_runs_messages_are_paged_by_index(store: SessionStore) -> None:
    await store.create_session("s1", "", T0)
    made = []
    for index in range(9):
        one = message(f"m{index}")
        one.run_id = "r1" if index % 3 else "r2"
        made.append(one)
    await store.append_messages("s1", made)

    page, more = await store.list_run_messages("s1", "r1", "", 4)
    assert ([m.id for m in page], more) == (["m1", "m2", "m4", "m5"], True)
    page, more = await store.list_run_messages("s1", "r1", "m5", 4)
    assert ([m.id for m in page], more) == (["m7", "m8"], False)
    assert [m.id for m in (await store.list_run_messages("s1", "r2", "", 0))[0]] == [
        "m0",
        "m3",
        "m6",
    ]
    with pytest.raises(InvalidInput, match="not a message of the run"):
        await store.list_run_messages("s1", "r1", "m3", 4)
    assert await store.list_run_messages("s1", "none", "", 4) == ([], False)
