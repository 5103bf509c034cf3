"""``Caller``: who is asking. Every ``Engine`` operation takes one.

The transport authenticates the request and builds the caller; the engine alone decides
what the caller may see. A session belongs to the principal that created it: another
principal is told it does not exist. An admin sees every session.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ANONYMOUS", "Caller"]


@dataclass(frozen=True, slots=True)
class Caller:
    principal: str
    """Who the credentials name; "" when the server runs without authentication."""
    admin: bool = False
    """May see, follow and change every principal's sessions."""

    def owns(self, owner: str) -> bool:
        """Whether a session owned by ``owner`` is visible to this caller."""
        return self.admin or owner == self.principal

    @property
    def owner_filter(self) -> str | None:
        """The owner lists are filtered by: None for an admin (everything)."""
        return None if self.admin else self.principal

    def __str__(self) -> str:
        return self.principal or "(anonymous)"


ANONYMOUS = Caller("", admin=True)
"""The caller of a server with no authentication configured: it is the only principal
there is, so it sees every session (including ones made while tokens were required)."""
