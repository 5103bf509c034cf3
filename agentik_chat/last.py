"""The last conversation ``agentik chat`` used, per server, for ``--continue``.

Stored in ``$XDG_STATE_HOME/agentik/chat.json`` (``~/.local/state/agentik/chat.json`` when
``XDG_STATE_HOME`` is unset): ``{"last": {"http://127.0.0.1:8000": "<conversation id>"}}``.
Only ids, never a message or a token. A file that cannot be read or written is ignored:
``--continue`` then says there is no last conversation.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["last_conversation", "remember_conversation", "state_file"]


def state_file(environ: Mapping[str, str]) -> Path:
    base = environ.get("XDG_STATE_HOME") or str(
        Path(environ.get("HOME") or "~").expanduser() / ".local" / "state"
    )
    return Path(base) / "agentik" / "chat.json"


def _read(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    last = data.get("last") if isinstance(data, dict) else None
    if not isinstance(last, dict):
        return {}
    return {str(k): str(v) for k, v in last.items() if isinstance(v, str)}


def last_conversation(url: str, environ: Mapping[str, str] = os.environ) -> str | None:
    """The id of the last conversation used with the facade at ``url``, if any."""
    return _read(state_file(environ)).get(url.rstrip("/"))


def remember_conversation(
    url: str, conversation_id: str, environ: Mapping[str, str] = os.environ
) -> None:
    """Note ``conversation_id`` as the last one used with ``url`` (best effort)."""
    path = state_file(environ)
    last = _read(path)
    if last.get(url.rstrip("/")) == conversation_id:
        return
    last[url.rstrip("/")] = conversation_id
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps({"last": last}, indent=1) + "\n")
        temporary.replace(path)
