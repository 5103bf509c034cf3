"""A2A push (``engine_service.webhooks.a2a_push``): the updates of a run go to the push
configs of its task, the first run of its chain, however the run's end is told: by the
engine that ran it (which knows the run it resumed) or by an engine that closed or resumed
it after its own engine died (which knows only the links in the store)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from engine_service.core import events as ev
from engine_service.core.deliveries import Delivery, PushConfig
from engine_service.core.models import Interrupt, InterruptKind, RunStatus, ToolCall
from engine_service.core.run_webhooks import RunNotice
from engine_service.stores.memory import MemorySessionStore
from engine_service.webhooks.a2a_push import A2aPush

NOW = datetime(2026, 12, 5, tzinfo=UTC)
CANCELLED = ev.RunFinished(outcome=ev.Outcome.CANCELLED)


async def _asks(store: MemorySessionStore, run_id: str, *, create: bool = False) -> None:
    """Run ``run_id`` of "s" ends waiting for a person's answer."""
    await store.begin_run("s", run_id, NOW, create=create)
    call = ToolCall(f"q-{run_id}", "ask_user", "{}")
    asked = Interrupt(f"i-{run_id}", InterruptKind.QUESTION, run_id, call, "which?")
    await store.finish_run("s", run_id, RunStatus.INPUT_REQUIRED, NOW, interrupts=[asked])


async def _answers(store: MemorySessionStore, run_id: str) -> None:
    """Run ``run_id`` answers the question waiting (the store links the asker to it)."""
    await store.begin_run("s", run_id, NOW, create=False)
    await store.resolve_interrupts("s", run_id)


async def _task_with_config(store: MemorySessionStore) -> None:
    await _asks(store, "task1", create=True)
    config = PushConfig("c1", "task1", "s", "https://peer.example.com/", NOW)
    await store.add_push_config(config, 10)


def _task_ids(rows: list[Delivery]) -> set[str]:
    """The tasks the rows' updates are of."""
    ids = set()
    for row in rows:
        (update,) = json.loads(row.payload).values()
        ids.add(str(update["taskId"]))
    return ids


async def test_the_end_of_a_reply_closed_by_another_engine_is_pushed_to_its_task() -> None:
    """The reply's end as the next engine's close tells it: no run named as resumed."""
    store = MemorySessionStore()
    await _task_with_config(store)
    await _answers(store, "reply2")
    notice = RunNotice("s", "reply2", "", False, CANCELLED, [], NOW, "key")
    rows = await A2aPush(store)(notice)
    assert [r.url for r in rows] == ["https://peer.example.com/"]
    assert _task_ids(rows) == {"task1"}
    status = json.loads(rows[0].payload)["statusUpdate"]["status"]["state"]
    assert status == "TASK_STATE_CANCELED"


async def test_the_end_of_a_later_reply_goes_back_to_the_first_run_of_the_chain() -> None:
    store = MemorySessionStore()
    await _task_with_config(store)
    await _answers(store, "reply2")
    await store.finish_run("s", "reply2", RunStatus.SUCCEEDED, NOW)
    await _asks(store, "other")  # another task of the conversation, waiting
    await _answers(store, "reply3")
    ended = await A2aPush(store)(RunNotice("s", "reply2", "", False, CANCELLED, [], NOW))
    assert _task_ids(ended) == {"task1"}
    assert await A2aPush(store)(RunNotice("s", "reply3", "", False, CANCELLED, [], NOW)) == []


async def test_the_run_a_reply_names_as_resumed_finds_the_task_before_the_store_links_it() -> None:
    """As the reply starts, the engine knows what it resumes; the store links the two only
    once the reply carries out the answers."""
    store = MemorySessionStore()
    await _task_with_config(store)
    await store.begin_run("s", "reply2", NOW, create=False)
    started = RunNotice("s", "reply2", "task1", True, None, [], NOW)
    rows = await A2aPush(store)(started)
    assert _task_ids(rows) == {"task1"}
    assert await A2aPush(store)(RunNotice("s", "reply2", "", True, None, [], NOW)) == []


async def test_a_run_of_its_own_is_its_task() -> None:
    store = MemorySessionStore()
    await _task_with_config(store)
    started = await A2aPush(store)(RunNotice("s", "task1", "", True, None, [], NOW))
    assert _task_ids(started) == {"task1"}
    ended = await A2aPush(store)(RunNotice("s", "task1", "", False, CANCELLED, [], NOW))
    assert _task_ids(ended) == {"task1"}
