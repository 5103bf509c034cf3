"""Fork: a new conversation holding a copy of another's history up to one of its messages.

The copy belongs to the caller, whoever owned the original; a conversation the caller
cannot see cannot be forked (``SessionNotFound``, as for an id that does not exist). The
original is untouched. A run in progress in the original does not stop the fork: the
messages stored so far are copied (the run's answer, still streaming, is not).
"""

from __future__ import annotations

from datetime import datetime

from engine_service.core.caller import Caller
from engine_service.core.errors import InvalidInput, SessionNotFound
from engine_service.core.history import new_id
from engine_service.core.ids import check_id
from engine_service.core.models import Session
from engine_service.core.store import SessionStore

__all__ = ["fork_session"]


async def fork_session(
    store: SessionStore,
    caller: Caller,
    session_id: str,
    up_to_message_id: str,
    new_session_id: str,
    now: datetime,
) -> Session:
    """The new session (``new_session_id``, or a fresh id when empty)."""
    check_id(session_id, "session_id")
    if new_session_id:
        check_id(new_session_id, "new_session_id")
    if not up_to_message_id:
        raise InvalidInput(
            "up_to_message_id must name the last message to copy (a message of the session)"
        )
    check_id(up_to_message_id, "up_to_message_id")
    source = await store.get_session(session_id)
    if not caller.owns(source.owner):
        raise SessionNotFound(session_id)
    return await store.fork_session(
        session_id,
        up_to_message_id,
        new_session_id or new_id(),
        now,
        owner=caller.principal,
        source_owner=source.owner,
        title=source.title,
    )
