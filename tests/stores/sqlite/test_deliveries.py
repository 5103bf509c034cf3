"""The SQLite store's push configs (``engine_service.stores.sqlite.deliveries``): this
engine knows which sessions may have one, and answers for the others from memory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine_service.core.clock import utc_now
from engine_service.core.deliveries import PushConfig
from engine_service.stores.sqlite import SqliteSessionStore


async def test_a_session_without_push_configs_is_answered_without_the_writer(
    tmp_path: Path,
) -> None:
    """The A2A pusher asks at each run's start and end; a session with no push config is
    answered from memory (no read queued behind the writes), also after a restart."""
    path = tmp_path / "s.db"
    config = PushConfig("c1", "t1", "s1", "https://hooks.example.com/a", utc_now(), "", "", "")
    for reopened in (False, True):
        store = SqliteSessionStore(path)
        submitted: list[object] = []
        plain = store._writer.submit

        async def counted(
            run: Callable[[], Any],
            submitted: list[object] = submitted,
            plain: Any = plain,
            **lane: Any,
        ) -> Any:
            submitted.append(run)
            return await plain(run, **lane)

        store._writer.submit = counted  # type: ignore[method-assign]
        try:
            if not reopened:
                await store.create_session("s1", "", utc_now())
                await store.create_session("s2", "", utc_now())
                await store.add_push_config(config, 4)
            submitted.clear()
            assert await store.session_push_configs("s2") == []
            assert submitted == []
            assert [c.id for c in await store.session_push_configs("s1")] == ["c1"]
            assert len(submitted) == 1
        finally:
            await store.close()
