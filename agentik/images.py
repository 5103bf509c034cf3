"""The rule for an image URL the LLM may be sent, in one place.

The engine enforces it on every message (``engine_service/core/history.py``); the A2A
bindings check it first, so a peer's refusal names the A2A field it sent
(``message.parts[0].url``) rather than the engine's (``messages[0].content[0].image.url``).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

__all__ = ["image_url_problem"]

_DATA_URL = re.compile(r"data:(image/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*)[;,]", re.IGNORECASE)


def image_url_problem(url: str) -> str | None:
    """Why ``url`` may not be sent to the LLM as an image (``must be ...``), or None: only
    an http(s) URL with a host or a ``data:image/*`` URL (never ``file:``, ``javascript:``)."""
    if url[:5].lower() == "data:":
        return None if _DATA_URL.match(url) else "is a data: URL of a type other than image/*"
    try:
        parts = urlsplit(url)
        scheme, host = parts.scheme.lower(), parts.hostname
    except ValueError:
        scheme, host = "", None
    if scheme not in ("http", "https") or not host:
        return "must be an http(s) URL or a data:image/* URL"
    return None
