"""The rule for free text a client stores as it is: a session's title.

A title is at most ``MAX_TITLE_LENGTH`` characters and holds no NUL (U+0000). PostgreSQL
cannot store NUL in text at all, so one rule for every store refuses it here, before any
store sees it. Everything else a client sends is stored as JSON (messages, state,
interrupt answers), which writes NUL as the escape ``\\u0000`` that every store keeps;
ids follow the stricter rule of ``core.ids``.
"""

from __future__ import annotations

from engine_service.core.errors import InvalidInput

__all__ = ["MAX_TITLE_LENGTH", "TITLE_FROM_MESSAGE", "check_title", "title_from"]

MAX_TITLE_LENGTH = 500
TITLE_FROM_MESSAGE = 80
"""Most characters of a first message that become an untitled conversation's title."""


def check_title(title: str) -> None:
    """Raise ``InvalidInput`` naming the rule unless ``title`` may be stored."""
    if len(title) > MAX_TITLE_LENGTH:
        raise InvalidInput(f"title is longer than {MAX_TITLE_LENGTH} characters")
    if "\x00" in title:
        raise InvalidInput("title must not contain the NUL character (U+0000)")


def title_from(text: str) -> str:
    """A title made of the start of ``text``: its words on one line, control characters
    left out, at most :data:`TITLE_FROM_MESSAGE` characters (cut at a word, with "…")."""
    words = "".join(c if c.isprintable() else " " for c in text).split()
    title = " ".join(words)
    if len(title) <= TITLE_FROM_MESSAGE:
        return title
    cut = title[: TITLE_FROM_MESSAGE - 1]
    if " " in cut[TITLE_FROM_MESSAGE // 2 :]:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip() + "…"
