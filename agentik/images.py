"""The rule for an image URL the LLM may be sent, in one place.

The engine enforces it on every message (``engine_service/core/history.py``); the A2A
bindings check it first, so a peer's refusal names the A2A field it sent
(``message.parts[0].url``) rather than the engine's (``messages[0].content[0].image.url``).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

__all__ = ["image_type_problem", "image_url_problem"]

_IMAGE_TYPE = re.compile(r"image/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*", re.IGNORECASE)
_DATA_URL = re.compile(r"data:(image/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*)[;,]", re.IGNORECASE)
_BASE64_MARK = re.compile(r";base64,", re.IGNORECASE)
_BASE64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def image_type_problem(mime_type: str) -> str | None:
    """Why ``mime_type`` is not an image's (``... is not an image/* type``), or None."""
    if _IMAGE_TYPE.fullmatch(mime_type):
        return None
    return f"{mime_type[:80]!r} is not an image/* type"


def image_url_problem(url: str) -> str | None:
    """Why ``url`` may not be sent to the LLM as an image (``must be ...``), or None: only
    an http(s) URL with a host or a ``data:image/*`` URL (never ``file:``, ``javascript:``)
    whose base64 payload, when it says it has one, decodes (a provider refuses the whole
    request over an image it cannot read, so it would fail every later turn)."""
    if url[:5].lower() == "data:":
        if not _DATA_URL.match(url):
            return "is a data: URL of a type other than image/*"
        head, mark, payload = url.partition(",")
        if _BASE64_MARK.search(head + mark) and not _decodes(payload):
            return "is a data: URL whose base64 payload is not valid base64"
        return None
    try:
        parts = urlsplit(url)
        scheme, host = parts.scheme.lower(), parts.hostname
    except ValueError:
        scheme, host = "", None
    if scheme not in ("http", "https") or not host:
        return "must be an http(s) URL or a data:image/* URL"
    return None


def _decodes(payload: str) -> bool:
    """Whether ``payload`` is base64 (padding optional, as some encoders leave it out),
    judged without decoding it: its alphabet and length (a few ms for megabytes, where a
    decode took 40 ms of the loop for a 6 MB image, and images come again every turn)."""
    if not payload or not payload.isascii():
        return False
    body = payload.rstrip("=")
    padding = len(payload) - len(body)
    if padding > 2 or (padding and len(payload) % 4):
        return False
    if body.encode().translate(None, _BASE64_ALPHABET):
        return False  # a character outside the alphabet (deleted ones leave nothing)
    return len(body) % 4 != 1
