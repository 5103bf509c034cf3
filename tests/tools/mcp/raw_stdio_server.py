"""A bare JSON-RPC MCP server on stdio (no SDK, which keeps a tool away from its stdout).

Tools: ``bigline`` writes ``size`` bytes to stdout with no newline, then nothing more (a
server printing a blob, or a result it never ends); ``pid`` answers its process id.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

_OUT = sys.stdout.buffer
_TOOLS = [
    {"name": "bigline", "inputSchema": {"type": "object", "properties": {"size": {}}}},
    {"name": "pid", "inputSchema": {"type": "object"}},
]


def _send(message: dict[str, Any]) -> None:
    _OUT.write(json.dumps(message).encode() + b"\n")
    _OUT.flush()


def _answer(request: dict[str, Any]) -> dict[str, Any] | None:
    method, params = request.get("method"), request.get("params") or {}
    # An older protocol: the client then speaks initialize, tools/list and tools/call.
    if method == "initialize":
        return {
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "raw", "version": "1"},
        }
    if method == "tools/list":
        return {"tools": _TOOLS}
    if method == "tools/call" and params.get("name") == "bigline":
        size = int(params.get("arguments", {}).get("size", 0))
        while size > 0:
            piece = min(size, 1 << 20)
            _OUT.write(b"x" * piece)
            size -= piece
        _OUT.flush()
        return None
    if method == "tools/call":
        return {"content": [{"type": "text", "text": str(os.getpid())}]}
    return {}


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        result = _answer(request)
        if "id" in request and result is not None:
            _send({"jsonrpc": "2.0", "id": request["id"], "result": result})


if __name__ == "__main__":
    main()
