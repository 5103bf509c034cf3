"""The runs in flight on one engine: one per session, counted per principal within the
engine's limits, found by session, stopped one by one or all at once (out of ``Engine``)."""

from __future__ import annotations

import logging
from collections import Counter

from engine_service.core.errors import Overloaded, RateLimited
from engine_service.core.flush import Elsewhere
from engine_service.core.limits import EngineLimits
from engine_service.core.store import Signal, SignalKind
from engine_service.core.turn import Run

__all__ = ["RunTable"]

log = logging.getLogger(__name__)


class RunTable:
    """This engine's runs in flight, by session."""

    def __init__(self, limits: EngineLimits) -> None:
        self._limits = limits
        self._runs: dict[str, Run] = {}
        self._callers: dict[str, tuple[str, str]] = {}
        """(principal that started it, session owner) of each session's run in flight."""
        self._by_caller: Counter[str] = Counter()

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._runs

    def __len__(self) -> int:
        return len(self._runs)

    def get(self, session_id: str) -> Run | None:
        return self._runs.get(session_id)

    def all(self) -> list[Run]:
        return list(self._runs.values())

    def check_room(self, principal: str) -> None:
        """``Overloaded`` when the engine runs its maximum, ``RateLimited`` when
        ``principal`` has its own maximum of runs in flight."""
        most = self._limits.max_concurrent_runs
        if len(self._runs) >= most:
            raise Overloaded(f"the engine is running its maximum of {most} runs")
        own_limit = self._limits.max_runs_per_caller
        if own_limit and self._by_caller[principal] >= own_limit:
            raise RateLimited(
                f"you have {own_limit} runs in flight, your limit; wait for one to end",
                retry_after=1,
            )

    def add(self, run: Run, principal: str, owner: str) -> None:
        """``run`` started by ``principal`` in a session of ``owner``."""
        self._runs[run.session_id] = run
        self._callers[run.session_id] = (principal, owner)
        self._by_caller[principal] += 1

    def remove(self, run: Run) -> bool:
        """Forget ``run`` if it is its session's run in flight; whether it was."""
        if self._runs.get(run.session_id) is not run:
            return False
        del self._runs[run.session_id]
        principal, _ = self._callers.pop(run.session_id, ("", ""))
        self._by_caller[principal] -= 1
        if self._by_caller[principal] <= 0:
            del self._by_caller[principal]
        return True

    def owner_of(self, session_id: str) -> str | None:
        """The owner of the session whose run is in flight here (None: none is)."""
        started = self._callers.get(session_id)
        return started[1] if started is not None else None

    def stop(self, session_id: str, run_id: str = "") -> str:
        """Stop the session's run here, if any (and it is ``run_id``); its id or ""."""
        run = self._runs.get(session_id)
        if run is None or (run_id and run.run_id != run_id):
            return ""
        run.stop()
        return run.run_id

    def on_signal(self, signal: Signal) -> bool:
        """What a replica says about a session, for its run here: a stop stops it, and an
        end written by another replica (which took the run over when this one's lease
        lapsed: a stalled loop, a partition) makes it stop without writing more. False
        when the session has no run here (the signal is about another replica's run)."""
        if signal.kind is SignalKind.STOP:
            self.stop(signal.session_id, signal.run_id)
            return True
        run = self._runs.get(signal.session_id)
        if run is None:
            return False
        ended = signal.kind is SignalKind.ENDED and signal.run_id == run.run_id
        if ended and run.final is None and not run.lost_at:
            log.warning(
                "run %s of session %s was closed by another replica; stopping it here",
                run.run_id,
                run.session_id,
            )
            run.lose(Elsewhere(signal.last_seq))  # ended there: nothing to follow
        return True

    def stop_all(self) -> int:
        """Stop every run here now; how many."""
        runs = self.all()
        for run in runs:
            run.stop()
        return len(runs)
