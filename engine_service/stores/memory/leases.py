"""The memory store's run leases (``core.leases``) and the replicas alive: the runs still
running, a replica's leases renewed, and the runs whose lease ran out claimed by another."""

from __future__ import annotations

from datetime import datetime

from engine_service.core.models import RunRecord, RunStatus
from engine_service.stores.encoding import utc
from engine_service.stores.memory.dicts import MemoryDicts
from engine_service.stores.memory.entry import copy_run

__all__ = ["MemoryLeases"]


class MemoryLeases(MemoryDicts):
    """The runs' leases, a part of ``MemorySessionStore``."""

    async def running_runs(self) -> list[RunRecord]:
        runs = [
            copy_run(run)
            for entry in sorted(self._sessions.values(), key=lambda e: e.id)
            for run in sorted(entry.runs.values(), key=lambda r: r.started_at)
            if run.status is RunStatus.RUNNING
        ]
        return runs

    async def renew_leases(self, replica: str, until: datetime) -> int:
        until = utc(until, "until")
        held = 0
        for entry in self._sessions.values():
            for run in entry.runs.values():
                if run.status is RunStatus.RUNNING and run.replica == replica:
                    run.lease_until = until
                    held += 1
        return held

    async def claim_expired_runs(
        self, replica: str, now: datetime, until: datetime
    ) -> list[RunRecord]:
        now, until = utc(now, "now"), utc(until, "until")
        claimed = []
        for entry in self._sessions.values():
            for run in entry.runs.values():
                expired = run.lease_until is None or run.lease_until < now
                if run.status is RunStatus.RUNNING and expired:
                    if run.replica != replica:  # its old replica's events are refused
                        entry.last_seq = max(entry.last_seq, entry.reserved_seq)
                    run.replica, run.lease_until = replica, until
                    claimed.append(copy_run(run))
        claimed.sort(key=lambda r: (r.session_id, r.started_at))
        return claimed

    async def note_alive(self, replica: str, until: datetime) -> None:
        self._alive[replica] = utc(until, "until")

    async def replicas_alive(self, now: datetime) -> list[str]:
        now = utc(now, "now")
        return sorted(r for r, until in self._alive.items() if until > now)
