"""The ``/agentik`` API as the chat client uses it: JSON calls, SSE turns, and one table that
turns an HTTP refusal into a message a person can act on.

Exceptions: :class:`ChatError` (anything that ends what the user asked for, with a message and
an exit code) and its subclasses :class:`Unreachable` (no connection, or it broke) and
:class:`WaitingForPerson` (``send`` refused with 409 ``input_required``: the conversation
must be answered first).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

__all__ = [
    "EXIT_ERROR",
    "AgentikClient",
    "ChatError",
    "Event",
    "Unreachable",
    "WaitingForPerson",
    "default_url",
]

EXIT_ERROR = 1
"""Exit code for an error: the server is unreachable, refused the request, or the turn failed."""

_TIMEOUT = httpx.Timeout(30.0, connect=5.0)
_STREAM_TIMEOUT = httpx.Timeout(30.0, connect=5.0, read=300.0)
"""A turn's stream is quiet while a tool runs, but the facade sends a keep-alive comment every
``AGENTIK_HEARTBEAT`` seconds (15 by default), so a silence of minutes means a dead server."""


class ChatError(Exception):
    """What the user asked for cannot be done; ``message`` says why and what to do."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class Unreachable(ChatError):
    """The facade could not be reached, or the connection broke: worth trying again."""


class WaitingForPerson(ChatError):
    """``send`` was refused because the conversation waits for an approval or an answer."""


@dataclass(slots=True)
class Event:
    """One SSE frame of a turn: ``type`` is the event name, ``data`` its JSON."""

    type: str
    data: dict[str, Any]
    id: int | None = None


@dataclass(slots=True)
class _Frame:
    event: str = "message"
    data: list[str] = field(default_factory=list)
    id: int | None = None


def default_url(env: dict[str, str] | os._Environ[str]) -> str:
    """The facade's URL from ``AGENTIK_HTTP_ADDR`` (what ``agentik serve`` listens on); a
    wildcard host (``0.0.0.0``, ``[::]``) is reached on loopback."""
    addr = env.get("AGENTIK_HTTP_ADDR") or "127.0.0.1:8000"
    host, _, port = addr.rpartition(":")
    host = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]", "": "127.0.0.1"}.get(host, host)
    return f"http://{host}:{port}"


def _frames(lines: Iterator[str]) -> Iterator[Event]:
    """Parse SSE lines into events; comments (``: keep-alive``) and ``retry:`` are dropped."""
    frame = _Frame()
    for line in lines:
        if not line:
            if frame.data:
                yield Event(frame.event, json.loads("\n".join(frame.data)), frame.id)
            frame = _Frame()
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            frame.data.append(value)
        elif name == "event":
            frame.event = value
        elif name == "id" and value.isdigit():
            frame.id = int(value)


class AgentikClient:
    """A synchronous client of one facade, with an optional bearer token."""

    def __init__(self, url: str, token: str | None = None, token_source: str = "") -> None:
        self.url = url.rstrip("/")
        self._token_source = token_source
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=_TIMEOUT)
        self._has_token = bool(token)

    def close(self) -> None:
        self._http.close()

    # --- conversations ---------------------------------------------------------------

    def create(self, agent: str = "") -> dict[str, Any]:
        """A new conversation of ``agent`` ("": the server's default agent)."""
        return self._json("POST", "/agentik/conversations", json={"agent": agent} if agent else {})

    def agents(self) -> list[dict[str, Any]]:
        """The agents the server serves, the default one first."""
        items: list[dict[str, Any]] = self._json("GET", "/agentik/agents")["items"]
        return items

    def conversations(self, limit: int = 50) -> list[dict[str, Any]]:
        page = self._json("GET", "/agentik/conversations", params={"limit": limit})
        items: list[dict[str, Any]] = page["items"]
        return items

    def conversation(self, conversation_id: str) -> dict[str, Any]:
        return self._json("GET", f"/agentik/conversations/{conversation_id}")

    def is_idle(self, conversation_id: str) -> bool:
        """No turn in flight (one waiting for a person has ended)."""
        conversation = self.conversation(conversation_id)
        return conversation.get("active_run_id") is None

    def interrupt(self, conversation_id: str, run_id: str | None) -> None:
        body = {"run_id": run_id} if run_id else {}
        self._json("POST", f"/agentik/conversations/{conversation_id}/interrupt", json=body)

    # --- streams ---------------------------------------------------------------------

    def send(self, conversation_id: str, text: str) -> Iterator[Event]:
        return self._stream(
            "POST", f"/agentik/conversations/{conversation_id}/send", {"text": text}
        )

    def resume(self, conversation_id: str, decisions: list[dict[str, Any]]) -> Iterator[Event]:
        path = f"/agentik/conversations/{conversation_id}/resume"
        return self._stream("POST", path, {"decisions": decisions})

    def follow(self, conversation_id: str, after: int | None) -> Iterator[Event]:
        """The conversation's events after ``after`` (from now when None) until it is idle."""
        params = "?until_idle=true" + (f"&after={after}" if after is not None else "")
        return self._stream("GET", f"/agentik/conversations/{conversation_id}/events{params}")

    def _stream(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> Iterator[Event]:
        request = self._http.build_request(method, path, json=body, timeout=_STREAM_TIMEOUT)
        try:
            response = self._http.send(request, stream=True)
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from exc
        try:
            if response.status_code != 200:
                response.read()
                raise self._refused(response)
            yield from _frames(response.iter_lines())
        except httpx.TransportError as exc:
            raise Unreachable(f"the connection to agentik at {self.url} broke: {exc}") from exc
        except ValueError as exc:  # only the parser's: a consumer's errors never enter here
            raise ChatError(f"{self.url} sent an event that is not JSON: {exc}") from exc
        finally:
            response.close()

    def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from exc
        if response.status_code >= 400:
            raise self._refused(response)
        try:
            body: dict[str, Any] = response.json()
        except ValueError as exc:
            raise ChatError(f"{self.url} does not answer like agentik (not JSON)") from exc
        return body

    # --- errors ----------------------------------------------------------------------

    def _unreachable(self, exc: httpx.TransportError) -> Unreachable:
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
            return Unreachable(f"cannot reach agentik at {self.url}: is `make run` running?")
        return Unreachable(f"agentik at {self.url} did not answer: {exc}")

    def _refused(self, response: httpx.Response) -> ChatError:
        try:
            error = response.json()["error"]
            code, message = str(error["code"]), str(error["message"])
        except (ValueError, KeyError, TypeError):
            return ChatError(
                f"{self.url} does not answer like agentik (HTTP {response.status_code})"
            )
        hint = _HINTS.get(code)
        if code == "not_found" and message.startswith("no such endpoint"):
            hint = self._address_hint()  # a route the facade does not have: not a conversation
        elif code == "unauthenticated":
            hint = (
                f"the token in {self._token_source} was refused"
                if self._has_token
                else "it needs a token: set AGENTIK_TOKEN (or pass --token)"
            )
        elif code == "rate_limited" and "Retry-After" in response.headers:
            hint = f"try again in {response.headers['Retry-After']} s"
        error_type = WaitingForPerson if code == "input_required" else ChatError
        return error_type(f"agentik at {self.url}: {message}" + (f" ({hint})" if hint else ""))

    def _address_hint(self) -> str:
        """What to do about a URL whose routes are not the facade's: ``--url`` names the
        server, and the client adds ``/agentik/...`` itself."""
        if self.url.endswith("/agentik"):
            return f"leave /agentik out of --url: --url {self.url.removesuffix('/agentik')}"
        return "--url is the address `agentik serve` prints, e.g. http://127.0.0.1:8000"


_HINTS = {
    "not_found": "/list shows your conversations",
    "busy": "another turn is running: wait for it, or interrupt it",
    "forbidden_host": "connect with a loopback address, or configure tokens on the server",
}
"""What to do about a refusal, by the API's error code, where the server's message alone
does not say."""
