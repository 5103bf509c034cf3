"""The conversations one principal may have stored (``[auth] max_sessions_per_caller``).

A conversation costs nothing in LLM tokens to make, so neither ``requests_per_minute`` nor
``tokens_per_day`` (both off by default) bound how many one token keeps; each may also hold
megabytes of messages. With authentication on, a principal may hold this many (10,000 by
default); the next is refused with ``QuotaExceeded`` naming the setting until it deletes
some. Without authentication there is one caller, the operator's, and no limit.

Counted where a conversation is made, with one count of the principal's sessions on the
store's index by owner: before ``CreateSession`` and ``ForkSession`` make one, and after a
run made one (``create_session``: most runs continue a conversation, and cost nothing
here). Concurrent creates of one principal at its limit may pass it by a few, or (a run's)
be refused together: a quota, not an exact count.
"""

from __future__ import annotations

from engine_service.core.errors import QuotaExceeded
from engine_service.core.store import SessionStore

__all__ = ["SessionQuota"]


class SessionQuota:
    """Whether a principal may have one more conversation."""

    def __init__(self, store: SessionStore, limit: int) -> None:
        """``limit``: conversations one principal may have; 0: no limit."""
        self.store = store
        self.limit = limit

    def _refusal(self, principal: str) -> QuotaExceeded:
        return QuotaExceeded(
            f"you ({principal}) have {self.limit:,} conversations stored, the most [auth] "
            "max_sessions_per_caller (AGENTIK_MAX_SESSIONS_PER_CALLER) allows; delete some to "
            "start new ones"
        )

    async def check_room(self, principal: str) -> None:
        """Before making a conversation: ``QuotaExceeded`` when ``principal`` has its most."""
        if self.limit and await self.store.count_sessions(principal) >= self.limit:
            raise self._refusal(principal)

    async def check_made(self, principal: str) -> None:
        """After a conversation was made for ``principal``: ``QuotaExceeded`` when that one
        took it past its most (the maker then deletes it)."""
        if self.limit and await self.store.count_sessions(principal) > self.limit:
            raise self._refusal(principal)
