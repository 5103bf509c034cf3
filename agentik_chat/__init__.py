"""``agentik chat``: a terminal client on the public ``/agentik`` REST + SSE API.

It talks HTTP only (httpx), never gRPC or Flask, so it starts fast and runs on any machine
that can reach the facade. Layers: :mod:`agentik_chat.api` (requests, SSE, errors),
:mod:`agentik_chat.render` (events to the terminal), :mod:`agentik_chat.session` (turns,
Ctrl-C, human in the loop, commands) and :mod:`agentik_chat.cli` (the subcommand).
"""

from __future__ import annotations

__all__: list[str] = []
