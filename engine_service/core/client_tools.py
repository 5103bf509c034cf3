"""The rule for the tools a client offers with a run (AG-UI frontend tools).

The LLM APIs take a tool name of 1 to 64 letters, digits, ``_`` and ``-`` and refuse the
whole request otherwise (OpenAI: ``^[a-zA-Z0-9_-]{1,64}$``); two tools of one name make the
LLM's choice ambiguous. So a run offering such tools is refused before it starts, naming the
tool, on every surface: the gRPC ``Run``, AG-UI and whatever else fills ``RunInput.tools``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from engine_service.core.errors import InvalidInput
from engine_service.core.models import ClientTool

__all__ = ["MAX_CLIENT_TOOLS", "TOOL_NAME_RULE", "check_client_tools"]

TOOL_NAME_RULE = "1 to 64 characters of A-Z a-z 0-9 _ -"
MAX_CLIENT_TOOLS = 128
"""Tools one run may offer: OpenAI's own limit, so the LLM call never fails on it."""
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _shown(name: str) -> str:
    return repr(name) if len(name) <= 64 else repr(name[:64]) + "…"


def check_client_tools(tools: Sequence[ClientTool], is_engine_tool: Callable[[str], bool]) -> None:
    """Raise ``InvalidInput`` naming ``tools[i].name`` for a name that is empty, outside
    the LLM's rule, offered twice, or taken by an engine tool; or for too many tools."""
    if len(tools) > MAX_CLIENT_TOOLS:
        raise InvalidInput(f"tools: {len(tools)} tools offered; a run takes {MAX_CLIENT_TOOLS}")
    seen: dict[str, int] = {}
    for index, tool in enumerate(tools):
        name = tool.name
        where = f"tools[{index}].name"
        if not name:
            raise InvalidInput(f"{where} is required")
        if not _TOOL_NAME.fullmatch(name):
            raise InvalidInput(f"{where} {_shown(name)} is not a valid tool name: {TOOL_NAME_RULE}")
        if name in seen:
            raise InvalidInput(f"{where} {name!r} is already offered by tools[{seen[name]}]")
        if is_engine_tool(name):
            raise InvalidInput(f"{where} {name!r} collides with an engine tool")
        seen[name] = index
