"""A2A over the engine, free of any transport: what every A2A binding shares.

A task is a chain of runs of a conversation (``convert``); a person's reply to a task that
waits for input becomes the engine's resume entries (``interrupts``); the rules every
binding checks alike (``rules``) and the A2A errors they raise (``errors``); the agent card
and its signature (``card``, ``signing``), built from settings alone. The JSON-RPC
binding (``web_facade/a2a/``) and the gRPC binding (``engine_service/a2a/``) each call the
engine their own way and answer with these.
"""

from __future__ import annotations

import sys

__all__: list[str] = []


def _types_without_starlette() -> None:
    """Import a2a-sdk's types (``a2a.types``) without starlette.

    ``a2a.types`` imports ``a2a.utils.proto_utils``, which imports starlette (and with it
    anyio) when it is installed, as the MCP SDK installs it, for one type annotation: 1.6
    MiB in the engine and in each web worker, which serve no ASGI at start. The import here
    finds starlette absent (the SDK then annotates with ``Any``); starlette stays importable
    for what needs it later (the facade's ``/mcp``). Done once, when this package is first
    imported, before any of its modules imports the types.
    """
    if "a2a.types" in sys.modules or "starlette" in sys.modules:
        return
    sys.modules["starlette"] = None  # type: ignore[assignment]  # import's "not installed"
    try:
        import a2a.types  # noqa: F401
    finally:
        if sys.modules.get("starlette", 0) is None:
            del sys.modules["starlette"]


_types_without_starlette()
