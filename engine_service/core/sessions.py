"""The write side of sessions: created (with a default webhook), renamed, forked. The
engine deletes them itself (a deletion ends their runs and hubs)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol, TypeVar

from engine_service.core.agents import Agents
from engine_service.core.bounds import bound_session
from engine_service.core.caller import Caller
from engine_service.core.clock import utc_now
from engine_service.core.fork import fork_session
from engine_service.core.history import new_id
from engine_service.core.ids import check_id
from engine_service.core.models import Session
from engine_service.core.notices import Notices
from engine_service.core.quota import SessionQuota
from engine_service.core.records import Records
from engine_service.core.text import check_title

__all__ = ["Sessions"]

T = TypeVar("T")


class _Writing(Protocol):
    def __call__(self, call: Awaitable[T], /) -> Awaitable[T]: ...


class Sessions(Records):
    """``Records`` and the session writes; ``_writing`` and ``notices`` are the engine's."""

    _writing: _Writing
    """A store write whose storage failure marks the store unhealthy (``core.health``)."""
    notices: Notices
    agents: Agents
    quota: SessionQuota
    """The conversations one principal may have (``core.quota``)."""

    async def create_session(
        self,
        caller: Caller,
        title: str = "",
        session_id: str = "",
        webhook_url: str = "",
        agent: str = "",
    ) -> Session:
        """A new conversation of ``agent`` ("": the default agent), for good."""
        check_title(title)
        if session_id:
            check_id(session_id, "session_id")
        profile = self.agents.get(agent)
        if webhook_url:
            self.notices.check_webhook(webhook_url)
        await self.quota.check_room(caller.principal)
        session_id = session_id or new_id()
        made = await self._writing(
            self.store.create_session(
                session_id, title, utc_now(), owner=caller.principal, agent=profile.name
            )
        )
        if webhook_url:
            made = await self._writing(
                self.store.set_session_webhook(session_id, webhook_url, utc_now())
            )
        return made

    async def set_session_webhook(self, caller: Caller, session_id: str, url: str) -> Session:
        """Set (``url`` "" clears) the session's default run webhook."""
        await self._session(caller, session_id)
        if url:
            self.notices.check_webhook(url)
        updated = await self._writing(self.store.set_session_webhook(session_id, url, utc_now()))
        return bound_session(updated, self._event_limit)

    async def rename_session(self, caller: Caller, session_id: str, title: str) -> Session:
        await self._session(caller, session_id)
        check_title(title)
        renamed = await self._writing(self.store.rename_session(session_id, title, utc_now()))
        return bound_session(renamed, self._event_limit)

    async def fork_session(
        self, caller: Caller, session_id: str, up_to_message_id: str, new_session_id: str = ""
    ) -> Session:
        """A copy of the session up to a message, owned by ``caller`` (``core.fork``)."""
        await self.quota.check_room(caller.principal)
        forked = await self._writing(
            fork_session(
                self.store, caller, session_id, up_to_message_id, new_session_id, utc_now()
            )
        )
        return bound_session(forked, self._event_limit)
