"""Stopping a run: the engine's own, another replica's (a signal through the store), or
one that waits for a person (its questions cancelled, and a sub-agent's it relayed)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from engine_service.core.caller import Caller
from engine_service.core.errors import SessionNotFound
from engine_service.core.hitl import delegation_of
from engine_service.core.ids import check_id
from engine_service.core.models import Interrupt
from engine_service.core.run_table import RunTable
from engine_service.core.sessions import Sessions
from engine_service.core.store import Signal, SignalKind

__all__ = ["Stopping"]


class Stopping(Sessions):
    """``Sessions`` and stopping runs; ``_runs`` is the engine's table of runs in flight."""

    _runs: RunTable

    async def stop_run(self, caller: Caller, session_id: str, run_id: str = "") -> tuple[bool, str]:
        """Stop the session's run in flight; (False, "") when it is idle."""
        check_id(session_id, "session_id")
        if run_id:
            check_id(run_id, "run_id")
        owner = self._runs.owner_of(session_id)
        if owner is not None and caller.owns(owner):
            ending = self._runs.get(session_id)
            if ending is not None and ending.final is not None and ending.task is not None:
                # The run has ended and its end is being stored: nothing is left to stop
                # but what it may have asked a person, pending once that is stored.
                await asyncio.wait([ending.task])
            else:
                stopped = self.stop_local(session_id, run_id)  # no store read: no waiting
                if stopped:
                    return True, stopped
        session = await self._session(caller, session_id, "session_id")  # not theirs → not found
        stopped = self.stop_local(session_id, run_id)
        remote = session.active_run_id
        if not stopped and self.store.shared and remote and run_id in ("", remote):
            # Held by another replica: it stops the run when the signal reaches it.
            await self.store.signal(Signal(SignalKind.STOP, session_id, remote))
            return True, remote
        asked_by = {i.run_id for i in session.interrupts}
        if not stopped and not remote and asked_by and run_id in ("", *asked_by):
            # Waiting for a person: stop waiting. The run that asked ends interrupted; its
            # unanswered calls read as unanswered to the LLM on the next run.
            cancelled = await self._writing(self.store.cancel_interrupts(session_id))
            await self._stop_sub_agents(caller, session.interrupts)
            if cancelled:
                return True, cancelled[-1]
        return bool(stopped), stopped

    async def _stop_sub_agents(self, caller: Caller, asked: Sequence[Interrupt]) -> None:
        """A sub-agent's question asked here (``tools/agents.py``): it stops waiting too."""
        for child in {d[0] for i in asked if (d := delegation_of(i))}:
            with contextlib.suppress(SessionNotFound):
                await self.stop_run(caller, child)

    def stop_local(self, session_id: str, run_id: str = "") -> str:
        """Stop the local run of a session, if any; returns its id or ""."""
        return self._runs.stop(session_id, run_id)
