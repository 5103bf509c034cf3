"""The id rule of an MCP message, one for ``/mcp`` (``routes``) and ``agentik mcp``'s stdin
(agentik_mcp/stdio.py), checked before the MCP SDK parses the message.

The SDK reads a message whose ``id`` is neither a string nor an integer (``1.5``, ``true``,
``null``, an object) as a notification, and answers nothing: over HTTP a bare 202, on stdio
no line at all; the client waited for its own timeout. MCP ids are strings or integers, and
a request's is never null. Integers are echoed as given, however large (JSON has no limit;
Python's parser stops at 4,300 digits, a refusal of its own).
"""

from __future__ import annotations

from typing import Any

__all__ = ["ID_PROBLEM", "id_problem"]

ID_PROBLEM = "id must be a string or an integer"


def id_problem(message: dict[str, Any]) -> str | None:
    """Why ``message``'s id cannot be answered, or None when it can (or there is none: a
    notification). A response's id may be null (an error answering a message that could
    not be read); a request's may not."""
    if "id" not in message:
        return None
    found = message["id"]
    if isinstance(found, str) or (isinstance(found, int) and not isinstance(found, bool)):
        return None
    if found is None and "method" not in message:
        return None
    return ID_PROBLEM
