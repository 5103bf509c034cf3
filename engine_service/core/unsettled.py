"""Runs that ended but whose end could not be stored (the store failed), out of ``Engine``.

Each is held by its session until the store writes again (``store_all``, when a write
probe succeeds; ``store_at_shutdown``); meanwhile its conversation refuses new work with
``StorageUnavailable`` (``refuse``). A settled run is handed to ``on_settled``: one
found closed by another replica meanwhile has ``lost_at`` set, and its followers are the
engine's to point at what that replica stored (``Hubs.lost``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from engine_service.core.errors import InvalidInput, StorageUnavailable
from engine_service.core.turn import Run

__all__ = ["Unsettled"]

log = logging.getLogger(__name__)


class Unsettled:
    """The runs whose end waits to be stored, by session."""

    def __init__(self, *, on_settled: Callable[[Run], None]) -> None:
        self._runs: dict[str, Run] = {}
        self._on_settled = on_settled

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._runs

    def hold(self, run: Run) -> None:
        self._runs[run.session_id] = run

    def refuse(self, session_id: str) -> None:
        """``StorageUnavailable`` when the session's last run's end is not stored yet."""
        run = self._runs.get(session_id)
        if run is not None:
            raise StorageUnavailable(
                f"storage unavailable: the end of run {run.run_id!r} of this conversation "
                "is not stored yet; it is stored as soon as the store writes again"
            )

    async def store_all(self) -> None:
        """Store the ends that waited (``StorageUnavailable`` if the store fails again)."""
        for run in list(self._runs.values()):
            await self._settle_late(run)
            self._settled(run)

    @staticmethod
    async def _settle_late(run: Run) -> None:
        """Store the end of a run that could not be stored when it ended. With a shared
        store another replica may have closed the run meanwhile (our lease lapsed while
        the store failed): its end is the stored one, and ours is dropped unseen (by
        ``on_settled``, as for a run lost while it ran)."""
        try:
            await run.settle()
        except InvalidInput:
            elsewhere = await run.closed_elsewhere()
            if elsewhere is None:
                raise
            log.warning("run %s was closed by another replica meanwhile", run.run_id)
            run.note_lost(elsewhere)

    async def store_at_shutdown(self) -> None:
        """Store what can be stored; the rest is closed by the next start."""
        for run in list(self._runs.values()):
            try:
                await run.settle()
            except StorageUnavailable:
                log.error("run %s ends unstored; the next start closes it", run.run_id)

    def _settled(self, run: Run) -> None:
        if self._runs.get(run.session_id) is run:
            del self._runs[run.session_id]
        self._on_settled(run)
