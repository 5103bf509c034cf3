"""Reading sessions, messages and run records, as a caller may see them.

Every read takes the ``Caller``: a session belongs to the principal that created it; to
anyone else (but an admin) it does not exist — the same ``SessionNotFound`` an unknown id
gets, so no answer hints at it. Every page is one gRPC message: it holds what fits in
``max_event_bytes`` (``core.bounds``).
"""

from __future__ import annotations

from engine_service.core.agents import Agents
from engine_service.core.bounds import (
    MESSAGE_ROOM,
    bound_run,
    bound_session,
    bounded_page,
    fit_page,
    run_size,
    session_size,
)
from engine_service.core.caller import Caller
from engine_service.core.chains import MAX_LAST_MESSAGES, RunChain, fit_chains, page_chains
from engine_service.core.deliveries import Delivery
from engine_service.core.errors import Forbidden, InvalidInput, RunNotFound, SessionNotFound
from engine_service.core.ids import check_id
from engine_service.core.limits import EngineLimits
from engine_service.core.models import Message, ReconcileMode, RunInput, RunRecord, Session
from engine_service.core.store import SessionStore

__all__ = ["MAX_PAGE", "Records"]

MAX_PAGE = 1000
MAX_CHAIN_PAGE = 100
"""Most runs one ListRunChains page reads."""


class Records:
    """The read side of the engine's API (``Engine`` is one)."""

    agents: Agents
    """The agents served (set by ``Engine``): what an ``agent`` filter may name."""

    def __init__(self, store: SessionStore, limits: EngineLimits) -> None:
        self.store = store
        self.limits = limits

    # -- access -----------------------------------------------------------------

    async def _session(self, caller: Caller, session_id: str, what: str = "session_id") -> Session:
        """The session if ``caller`` may see it; ``SessionNotFound`` otherwise, as for an
        id that does not exist."""
        check_id(session_id, what)
        session = await self.store.get_session(session_id)
        if not caller.owns(session.owner):
            raise SessionNotFound(session_id)
        return session

    async def _refuse_empty_history(self, caller: Caller, run_input: RunInput) -> None:
        """A run without new messages answers the stored history; with none, refuse."""
        if run_input.reconcile is ReconcileMode.APPEND:
            try:
                session = await self._session(caller, run_input.session_id, "session_id")
            except SessionNotFound:
                if not run_input.create_session:
                    raise
            else:
                if session.message_count > 0:
                    return
        raise InvalidInput(
            "messages: a run needs at least one message, and this conversation has no "
            "history to answer"
        )

    # -- sessions -----------------------------------------------------------------

    async def get_session(self, caller: Caller, session_id: str) -> Session:
        return bound_session(await self._session(caller, session_id), self._event_limit)

    async def list_sessions(
        self, caller: Caller, offset: int, limit: int, agent: str = ""
    ) -> tuple[list[Session], int]:
        """A page of the caller's sessions (only agent ``agent``'s when given)."""
        if offset < 0:
            raise InvalidInput("offset must not be negative")
        if limit < 0 or limit > MAX_PAGE:
            raise InvalidInput(f"limit must be between 1 and {MAX_PAGE}")
        agents = self.agents.stored_as(agent)
        sessions, total = await self.store.list_sessions(
            offset, limit or 50, owner=caller.owner_filter, agents=agents
        )
        # One page is one gRPC message: fewer items when they would not fit (the caller
        # pages on by offset; ``total`` says how many there are).
        bounded = [bound_session(s, self._event_limit) for s in sessions]
        return fit_page(bounded, session_size, self._event_limit), total

    async def list_messages(
        self, caller: Caller, session_id: str, after_id: str, limit: int, run_id: str = ""
    ) -> tuple[list[Message], bool]:
        await self._session(caller, session_id)
        if limit < 0 or limit > MAX_PAGE:
            raise InvalidInput(f"limit must be between 1 and {MAX_PAGE}")
        # Checked here, so no store's error echoes a huge one back (gRPC cannot even send it).
        if after_id:
            check_id(after_id, "after_message_id")
        if run_id:
            check_id(run_id, "run_id")
        limit = limit or 100
        if not run_id:
            page, more = await self.store.list_messages(session_id, after_id, limit)
        else:
            await self.store.get_run(session_id, run_id)  # unknown run → RunNotFound
            # By index, not a read of the whole history (A2A reads a task's messages so).
            page, more = await self.store.list_run_messages(session_id, run_id, after_id, limit)
        # One page is one gRPC message: it holds what fits in max_event_bytes, each
        # message clipped to fit (rows stored before the bound, or under a larger one).
        bounded = bounded_page(page, self._message_limit, self.limits.run.max_event_bytes)
        return bounded, more or len(bounded) < len(page)

    @property
    def _event_limit(self) -> int:
        """The most bytes one event, message, page or record may take (``core.bounds``)."""
        return self.limits.run.max_event_bytes

    @property
    def _message_limit(self) -> int:
        """The most bytes one message may hold (``core.bounds``)."""
        return self.limits.run.max_event_bytes - MESSAGE_ROOM

    # -- runs as records ----------------------------------------------------------

    async def get_run(self, caller: Caller, run_id: str, session_id: str = "") -> RunRecord:
        check_id(run_id, "run_id")
        if session_id:
            try:
                await self._session(caller, session_id)
            except SessionNotFound:
                raise RunNotFound(run_id) from None
            run = await self.store.get_run(session_id, run_id)
        else:
            run = await self.store.find_run(run_id, owner=caller.owner_filter)
        return bound_run(run, self._event_limit)

    async def list_runs(
        self, caller: Caller, session_id: str, offset: int, limit: int, agent: str = ""
    ) -> tuple[list[RunRecord], int]:
        """A page of runs, newest first, of one session or all the caller's; only of
        agent ``agent``'s sessions when given."""
        if offset < 0:
            raise InvalidInput("offset must not be negative")
        if limit < 0 or limit > MAX_PAGE:
            raise InvalidInput(f"limit must be between 1 and {MAX_PAGE}")
        agents = self.agents.stored_as(agent)
        if session_id:
            await self._session(caller, session_id)
        runs, total = await self.store.page_runs(
            session_id, offset, limit or 50, owner=caller.owner_filter, agents=agents
        )
        bounded = [bound_run(r, self._event_limit) for r in runs]
        return fit_page(bounded, run_size, self._event_limit), total

    async def list_run_chains(
        self,
        caller: Caller,
        session_id: str,
        offset: int,
        limit: int,
        last_messages: int,
        agent: str = "",
    ) -> tuple[list[RunChain], int, int]:
        """A page of runs as chains (``core/chains.py``), each with its latest messages,
        bounded to one message of ``max_event_bytes``; the runs in all, and how many runs of
        the page the chains cover (the next page starts after them). Only the runs of agent
        ``agent``'s conversations when it is given (an A2A agent's own tasks)."""
        if not 0 <= limit <= MAX_CHAIN_PAGE:
            raise InvalidInput(f"limit must be between 1 and {MAX_CHAIN_PAGE}")
        if not 0 <= last_messages <= MAX_LAST_MESSAGES:
            raise InvalidInput(f"last_messages must be between 0 and {MAX_LAST_MESSAGES}")
        page, total = await self.list_runs(caller, session_id, offset, limit or 50, agent)
        chains = await page_chains(self.store, page, last_messages)
        fitted = fit_chains(chains, self._message_limit, self._event_limit)
        if len(fitted) == len(chains):
            return fitted, total, len(page)
        first_left_out = chains[len(fitted)].runs[0].id
        return fitted, total, [run.id for run in page].index(first_left_out)

    async def list_failed_webhooks(
        self, caller: Caller, offset: int, limit: int
    ) -> tuple[list[Delivery], int]:
        """A page of the deliveries that gave up, newest first: for admins only."""
        if not caller.admin:
            raise Forbidden("only admins may list failed webhooks")
        if offset < 0:
            raise InvalidInput("offset must not be negative")
        if limit < 0 or limit > 1000:
            raise InvalidInput("limit must be between 1 and 1000")
        return await self.store.failed_deliveries(offset, limit or 50)
