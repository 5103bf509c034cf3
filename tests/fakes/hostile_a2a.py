"""A hostile (or broken) A2A 1.0 agent on loopback, for tests of our A2A client.

``HostileAgent`` serves a card at ``/.well-known/agent-card.json`` whose JSON-RPC interface is
the server itself (``/``), from a background thread (plain sockets, no a2a-sdk server), and
records every request it gets. What the card looks like is chosen when it is made (``card``):

- ``"ok"``: a valid, streaming card (``interface_urls``, when given, are its interfaces);
- ``"huge"``: a valid card of about 2 MB;
- ``"endless"``: a card body that never ends (until the client goes away);
- ``"redirect"``: HTTP 302 to ``redirect_to``'s card.

What a ``SendStreamingMessage`` does depends on the first word of the message's text:

- ``hang``: SSE headers, then nothing, until the client goes away;
- ``hang-task``: the task (WORKING), then nothing;
- ``flood N SIZE``: the task, N status updates of SIZE characters at once, then the artifact
  ``flood done`` and COMPLETED;
- ``flood-forever``: the task, then status updates at once until the client goes away;
- ``chatter``: the task, then a status update every 20 ms until the client goes away (a
  CancelTask is answered, and changes nothing);
- ``big N``: one artifact of N characters ``a``, COMPLETED;
- ``big-chunks COUNT SIZE``: one artifact in COUNT appended chunks of SIZE characters ``b``;
- ``bad-json``: SSE data that is not JSON; ``bad-json-task``: the task first, then that;
- ``http STATUS``: that HTTP status with a body naming the server's address;
- ``redirect``: HTTP 302 to ``redirect_to``;
- ``html``: HTTP 200 ``text/html``;
- ``rpc-error SIZE``: a JSON-RPC error (-32603) whose message is SIZE characters ``e``;
- anything else: a WORKING update, the artifact ``hostile heard: TEXT in CONTEXT``, COMPLETED.

Every text the server sends on a failure names its own address, so a test can check that it
never reaches a tool result.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from typing import Any

from tests.fakes.streaming_http import BackgroundServer, StreamingHandler

__all__ = ["CARD_NAME", "HostileAgent", "Seen"]

CARD_NAME = "hostile-agent"
CARD_PATH = "/.well-known/agent-card.json"
_CHATTER_EVERY = 0.02


@dataclass(frozen=True, slots=True)
class Seen:
    """One request the server got."""

    verb: str
    path: str
    rpc: str
    """The JSON-RPC method ("" for a GET)."""
    authorization: str | None
    context_id: str = ""
    text: str = ""
    task_id: str = ""
    """The task id a CancelTask or GetTask names, or a message continues."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    agent: HostileAgent

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError | OSError):
            return
        super().handle_error(request, client_address)


def _event(rpc_id: object, result: dict[str, Any]) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "id": rpc_id, "result": result})
    return f"data: {body}\n\n".encode()


def _agent_message(text: str, number: int = 0) -> dict[str, Any]:
    return {"messageId": f"hm-{number}", "role": "ROLE_AGENT", "parts": [{"text": text}]}


def _status(task_id: str, context_id: str, state: str, text: str = "") -> dict[str, Any]:
    status: dict[str, Any] = {"state": state}
    if text:
        status["message"] = _agent_message(text)
    return {"statusUpdate": {"taskId": task_id, "contextId": context_id, "status": status}}


def _artifact(task_id: str, context_id: str, text: str, *, append: bool = False) -> dict[str, Any]:
    return {
        "artifactUpdate": {
            "taskId": task_id,
            "contextId": context_id,
            "artifact": {"artifactId": "answer", "parts": [{"text": text}]},
            "append": append,
        }
    }


class _Handler(StreamingHandler):
    server: _Server

    @property
    def owner(self) -> HostileAgent:
        return self.server.agent

    # -- the card ---------------------------------------------------------------------

    def do_GET(self) -> None:
        agent = self.server.agent
        agent._record(Seen("GET", self.path, "", self.headers.get("Authorization")))
        if self.path != CARD_PATH:
            self._send(404, "text/plain", f"nothing at {self.path} on {agent.url}".encode())
            return
        if agent.card == "redirect":
            self._redirect(agent.redirect_to.rstrip("/") + CARD_PATH)
        elif agent.card == "huge":
            card = agent.card_json()
            card["description"] = "x" * (2 * 1024 * 1024)
            self._send(200, "application/json", json.dumps(card).encode())
        elif agent.card == "endless":
            self._start_chunked("application/json")
            if self._chunk(b'{"name": "' + CARD_NAME.encode() + b'", "description": "'):
                filler = b"y" * 65536
                while not agent._stopping.is_set() and self._chunk(filler):
                    pass
            self.close_connection = True
        else:
            self._send(200, "application/json", json.dumps(agent.card_json()).encode())

    # -- JSON-RPC ---------------------------------------------------------------------

    def do_POST(self) -> None:
        agent = self.server.agent
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            request = json.loads(raw)
            method = str(request.get("method", ""))
            params = request.get("params") or {}
        except (ValueError, AttributeError):
            request, method, params = {}, "", {}
        message = params.get("message") or {}
        text = "".join(str(p.get("text", "")) for p in message.get("parts") or [])
        context_id = str(message.get("contextId", ""))
        task_id = str(params.get("id", "") or message.get("taskId", ""))
        seen = Seen(
            "POST",
            self.path,
            method,
            self.headers.get("Authorization"),
            context_id,
            text,
            task_id,
        )
        agent._record(seen)
        rpc_id = request.get("id")
        if method == "CancelTask":
            agent._cancelled(task_id)
            task = {"id": task_id, "contextId": "", "status": {"state": "TASK_STATE_CANCELED"}}
            self._send_json({"jsonrpc": "2.0", "id": rpc_id, "result": task})
        elif method == "GetTask":
            task = {"id": task_id, "contextId": "", "status": {"state": "TASK_STATE_WORKING"}}
            self._send_json({"jsonrpc": "2.0", "id": rpc_id, "result": task})
        elif method in ("SendStreamingMessage", "SendMessage"):
            self._answer(rpc_id, text, context_id)
        else:
            error = {"code": -32601, "message": f"no method {method!r} at {agent.url}"}
            self._send_json({"jsonrpc": "2.0", "id": rpc_id, "error": error})

    def _answer(self, rpc_id: object, text: str, context_id: str) -> None:
        agent = self.server.agent
        words = text.split()
        mode = words[0] if words else ""
        numbers = [int(w) for w in words[1:] if w.isdigit()]
        task_id = f"hostile-task-{next(agent._ids)}"
        working = {"state": "TASK_STATE_WORKING"}
        task = {"task": {"id": task_id, "contextId": context_id, "status": working}}

        def status(state: str, words: str = "") -> bytes:
            return _event(rpc_id, _status(task_id, context_id, state, words))

        if mode == "http":
            status_code = numbers[0] if numbers else 500
            body = f"hostile failure at {agent.url} ({agent.host}:{agent.port})".encode()
            self._send(status_code, "text/plain", body)
            return
        if mode == "redirect":
            self._redirect(agent.redirect_to.rstrip("/") + "/")
            return
        if mode == "html":
            page = f"<html><body>hostile page at {agent.url}</body></html>".encode()
            self._send(200, "text/html", page)
            return
        if mode == "rpc-error":
            size = numbers[0] if numbers else 10
            error = {"code": -32603, "message": "e" * size}
            self._send_json({"jsonrpc": "2.0", "id": rpc_id, "error": error})
            return
        self._start_chunked("text/event-stream")
        if mode == "hang":
            self._wait(float("inf"))
            return
        if mode == "bad-json":
            self._chunk(f"data: {{not json from {agent.url}\n\n".encode())
            self._end()
            return
        if not self._chunk(_event(rpc_id, task)):
            return
        if mode == "hang-task":
            self._wait(float("inf"))
        elif mode == "bad-json-task":
            self._chunk(f"data: {{not json from {agent.url}\n\n".encode())
            self._end()
        elif mode == "flood":
            count, size = [*numbers, 1000, 100][:2]
            update = status("TASK_STATE_WORKING", "f" * size)
            for _ in range(count):
                if not self._chunk(update):
                    return
            self._finish(rpc_id, task_id, context_id, "flood done")
        elif mode == "flood-forever":
            update = status("TASK_STATE_WORKING", "flooding")
            while not agent._stopping.is_set() and self._chunk(update):
                pass
            self.close_connection = True
        elif mode == "chatter":
            for number in itertools.count(1):
                line = status("TASK_STATE_WORKING", f"chatter {number}")
                if not self._chunk(line) or not self._wait(_CHATTER_EVERY):
                    return
        elif mode == "big":
            size = numbers[0] if numbers else 1_000_000
            if self._chunk(_event(rpc_id, _artifact(task_id, context_id, "a" * size))):
                self._finish(rpc_id, task_id, context_id, "")
        elif mode == "big-chunks":
            count, size = [*numbers, 10, 10_000][:2]
            for _ in range(count):
                chunk = _artifact(task_id, context_id, "b" * size, append=True)
                if not self._chunk(_event(rpc_id, chunk)):
                    return
            self._finish(rpc_id, task_id, context_id, "")
        else:
            if self._chunk(status("TASK_STATE_WORKING", f"looking at: {text}")):
                heard = f"hostile heard: {text} in {context_id}"
                self._finish(rpc_id, task_id, context_id, heard)

    def _finish(self, rpc_id: object, task_id: str, context_id: str, artifact: str) -> None:
        if artifact and not self._chunk(_event(rpc_id, _artifact(task_id, context_id, artifact))):
            return
        done = _status(task_id, context_id, "TASK_STATE_COMPLETED")
        done["statusUpdate"]["final"] = True
        if self._chunk(_event(rpc_id, done)):
            self._end()

    # -- HTTP -------------------------------------------------------------------------

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self._write(body)

    def _send_json(self, payload: object) -> None:
        self._send(200, "application/json", json.dumps(payload).encode())

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _start_chunked(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> bool:
        return self._write(b"%x\r\n%s\r\n" % (len(data), data))

    def _end(self) -> None:
        self._write(b"0\r\n\r\n")


class HostileAgent(BackgroundServer):
    """The server; use as a context manager. ``url`` is its base URL (no trailing slash)."""

    thread_name = "hostile-a2a"

    def __init__(
        self,
        *,
        card: str = "ok",
        interface_urls: tuple[str, ...] = (),
        redirect_to: str = "",
        host: str = "127.0.0.1",
    ) -> None:
        super().__init__(host, 0)
        self.card = card
        self.interface_urls = interface_urls
        """The JSON-RPC interfaces the card names, in order; empty: this server's own."""
        self.redirect_to = redirect_to
        self._seen: list[Seen] = []
        self._cancelled_ids: list[str] = []
        self._gone_count = 0
        self._ids = itertools.count(1)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def card_json(self) -> dict[str, Any]:
        return {
            "name": CARD_NAME,
            "description": "Misbehaves on purpose.",
            "version": "1.0.0",
            "supportedInterfaces": [
                {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
                for url in self.interface_urls or (f"{self.url}/",)
            ],
            "capabilities": {"streaming": True},
            "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"],
            "skills": [
                {"id": "harm", "name": "Harm", "description": "Breaks things", "tags": ["t"]}
            ],
        }

    # -- what it saw ------------------------------------------------------------------

    def seen(self) -> list[Seen]:
        with self._lock:
            return list(self._seen)

    def calls(self) -> list[Seen]:
        """The JSON-RPC requests (not the card)."""
        return [s for s in self.seen() if s.verb == "POST"]

    def cancelled(self) -> list[str]:
        with self._lock:
            return list(self._cancelled_ids)

    @property
    def gone(self) -> int:
        """How many times a client went away before a response was complete."""
        with self._lock:
            return self._gone_count

    def open_connections(self) -> int:
        with self._lock:
            return len(self._sockets)

    # -- lifecycle --------------------------------------------------------------------

    def _make_server(self) -> _Server:
        server = _Server((self.host, self.port), _Handler)
        server.agent = self
        return server

    # -- for the handler --------------------------------------------------------------

    def _record(self, seen: Seen) -> None:
        with self._lock:
            self._seen.append(seen)

    def _cancelled(self, task_id: str) -> None:
        with self._lock:
            self._cancelled_ids.append(task_id)

    def _note_closed(self) -> None:
        with self._lock:
            self._gone_count += 1
