"""A real HTTP fake of the OpenAI Chat Completions API, for tests and benchmarks.

``FakeOpenAI`` serves ``POST /v1/chat/completions`` on 127.0.0.1 (port 0 by default) from a
background thread: streamed (SSE ``data: {...}`` chunks, then ``data: [DONE]``) or as one JSON
body, over HTTP/1.1 with keep-alive and chunked transfer encoding.

What it answers, in order:

1. a scripted ``FakeReply`` from the FIFO filled by ``enqueue()``;
2. otherwise a rule-based default: if the conversation ends with tool results it answers
   ``Result: <content>`` (several trailing results are joined with ``"; "``); otherwise it echoes
   the last user message as ``Echo: <text>`` in word chunks, after applying the directives below.

A context window (``context_window``): each request's prompt is counted the fake's own
way (``count_tokens``: a quarter of the characters of each message's text and tool calls,
plus 4 a message, plus the tools' JSON), recorded in ``prompt_tokens``, reported as the
usage's ``prompt_tokens``, and a request larger than the window is answered like OpenAI:
HTTP 400 ``{"error": {"code": "context_length_exceeded", ...}}``.

A request whose system message starts with ``SUMMARY_MARK`` (agentik's summariser) is
answered by ``summary_reply`` when set, else with a short summary naming how many lines
it read.

Directives in the last user message (removed from the echoed text), so tests that cross process
boundaries can steer the fake through the product's own input:

``[[tool:NAME {json args}]]``
    call tool NAME with these arguments (``{}`` if omitted); several directives make parallel
    calls. The tool call ids are ``call_1``, ``call_2``, ... in server order.
``[[slow:SECONDS]]``
    wait that long before each chunk.
``[[chunks:N]]``
    stream exactly N text chunks ``"w0 "``, ``"w1 "``, ... instead of the echo (benchmarks).
``[[reason]]``
    stream a few ``reasoning_content`` chunks before the text.
``[[error:STATUS]]``
    answer that HTTP status with an OpenAI-style error body.
``[[cached:N]]``
    report N of the prompt tokens as cached (``usage.prompt_tokens_details.cached_tokens``).
``[[hang]]``
    send the first text chunk, then hang until the client goes away or the fake stops.
``[[drop]]``
    send the first text chunk, then close the connection mid-stream.

``connection_closed`` is set (and ``closed_mid_stream`` counts up) whenever a client goes away
before its response was complete: seen when a write fails or, while the fake waits (slow or
hanging streams), when the socket reads EOF.

Run it on its own with ``python -m tests.fakes.fake_openai --port 0``: it prints its base URL.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import itertools
import json
import re
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any

from tests.fakes.streaming_http import BackgroundServer, StreamingHandler

__all__ = ["FakeOpenAI", "FakeReply", "FakeToolCall"]

"""How often a waiting handler looks at the stop flag, in seconds."""

_ERROR_KINDS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "bad_request"),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "forbidden"),
    404: ("invalid_request_error", "not_found"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
    500: ("server_error", "internal_error"),
    503: ("server_error", "overloaded"),
}

_DIRECTIVE = re.compile(
    r"\[\[(?:tool:(?P<tool>[\w.\-]+)\s*(?P<args>\{.*?\})?\s*"
    r"|(?P<kind>slow|chunks|reason|error|hang|drop|cached)(?::(?P<arg>[^\]]*))?)\]\]",
    re.DOTALL,
)
_WORD = re.compile(r"\S+\s*")


@dataclass(slots=True)
class FakeToolCall:
    """One tool call in a scripted reply; its arguments are streamed in ``fragments`` pieces."""

    name: str
    arguments: str | dict[str, Any] = "{}"
    id: str = ""
    fragments: int = 3

    def arguments_text(self) -> str:
        """The arguments as the JSON text the fake sends."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


@dataclass(slots=True)
class FakeReply:
    """A scripted answer. Chunk counts (``*_after``) include the first ``role`` chunk.

    ``text`` and ``reasoning`` given as one string are split into word chunks.
    """

    text: str | list[str] = ""
    reasoning: str | list[str] = ""
    reasoning_field: str = "reasoning_content"
    """``reasoning_content`` (DeepSeek, vLLM) or ``reasoning`` (OpenRouter, Ollama)."""
    tool_calls: list[FakeToolCall] = field(default_factory=list)
    interleave_tool_calls: bool = False
    """Send the tool calls' argument fragments round-robin, to exercise assembly by index."""
    usage: tuple[int, int] | None = None
    """(prompt, completion) tokens; counted from the words when None."""
    cached_tokens: int = 0
    """Reported as ``usage.prompt_tokens_details.cached_tokens`` when not zero."""
    finish_reason: str = ""
    """Empty means ``tool_calls`` when there are tool calls, else ``stop``."""
    delay: float = 0.0
    endless: bool = False
    """After the text, the same text again and again, for as long as the client reads (a
    model stuck in a loop, with no ``max_tokens``)."""
    comments_after: int | None = None
    """After this many chunks, only SSE comments (``: keep-alive``, as proxies send while
    they wait), one every ``comment_every`` seconds, until the client goes away."""
    comment_every: float = 0.05
    hang_after: int | None = None
    drop_after: int | None = None
    malformed_after: int | None = None
    send_done: bool = True
    status: int = 200
    error_message: str = ""
    error_body: dict[str, Any] | None = None
    """The whole JSON error body to answer with (with ``status``), instead of the default."""


def _words(text: str | list[str]) -> list[str]:
    if isinstance(text, list):
        return text
    return _WORD.findall(text)


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


SUMMARY_MARK = "You summarise conversations"


def count_tokens(body: dict[str, Any]) -> int:
    """The fake's own count of a request's prompt tokens."""
    tokens = 0
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        text = _message_text(message)
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {} if isinstance(call, dict) else {}
            text += str(function.get("name", "")) + str(function.get("arguments", ""))
        tokens += 4 + (len(text) + 3) // 4
    if body.get("tools"):
        tokens += len(json.dumps(body["tools"])) // 4
    return tokens


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeOpenAI

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up is normal here (interrupts, cancelled runs, idle keep-alive
        connections closed): no traceback on the terminal for it."""
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


class _Handler(StreamingHandler):
    """Serves one connection; a stream is written chunk by chunk straight to the socket."""

    server: _Server

    @property
    def owner(self) -> FakeOpenAI:
        return self.server.fake

    def do_GET(self) -> None:
        """``GET /v1/models``: the fake's ``models`` (404 when it has none, like servers
        without the route)."""
        fake = self.server.fake
        if self.path.rstrip("/") not in ("/v1/models", "/models") or fake.models is None:
            self._send_error(404, f"no route for {self.path}")
            return
        if fake.api_key is not None and self.headers.get("Authorization") != (
            f"Bearer {fake.api_key}"
        ):
            self._send_error(401, "Incorrect API key provided.")
            return
        data = [{"id": name, "object": "model", "owned_by": "fake"} for name in fake.models]
        self._send_json(200, {"object": "list", "data": data})

    def do_POST(self) -> None:
        fake = self.server.fake
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._send_error(404, f"no route for {self.path}")
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._send_error(400, "the request body is not valid JSON")
            return
        fake._record(body)
        if fake.api_key is not None and self.headers.get("Authorization") != (
            f"Bearer {fake.api_key}"
        ):
            self._send_error(401, "Incorrect API key provided.")
            return
        prompt = count_tokens(body)
        with fake._lock:
            fake.prompt_tokens.append(prompt)
        if fake.context_window is not None and prompt > fake.context_window:
            with fake._lock:
                fake.overflows += 1
            message = (
                f"This model's maximum context length is {fake.context_window} tokens. However,"
                f" your messages resulted in {prompt} tokens. Please reduce the length of the"
                " messages."
            )
            error = {
                "message": message,
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
            self._send_json(400, {"error": error})
            return
        reply = fake._next_reply(body)
        if reply.usage is None and fake.context_window is not None:
            reply.usage = (prompt, len(_words(reply.text)))
        if reply.status != 200 and reply.error_body is not None:
            self._send_json(reply.status, reply.error_body)
        elif reply.status != 200:
            self._send_error(reply.status, reply.error_message or f"fake error {reply.status}")
        elif body.get("stream"):
            self._stream(body, reply)
        else:
            self._complete(body, reply)

    def _send_error(self, status: int, message: str) -> None:
        kind, code = _ERROR_KINDS.get(status, ("api_error", "error"))
        payload = {"error": {"message": message, "type": kind, "param": None, "code": code}}
        self._send_json(status, payload)

    def _send_json(self, status: int, payload: object) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self._write(data)

    def _stream(self, body: dict[str, Any], reply: FakeReply) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        for index, event in enumerate(_events(body, reply, with_usage)):
            if reply.delay and not self._wait(reply.delay):
                return
            if index == reply.hang_after:
                self._wait(float("inf"))
                self.close_connection = True
                return
            if index == reply.comments_after:
                while self._chunk(b": keep-alive\n\n") and self._wait(reply.comment_every):
                    pass
                self.close_connection = True
                return
            if index == reply.drop_after:
                self._drop()
                return
            if index == reply.malformed_after and not self._chunk(
                b'data: {"choices": [{"delta"\n\n'
            ):
                return
            if not self._chunk(event):
                return
        # A fault asked for after more chunks than there are happens before the body ends.
        if reply.hang_after is not None:
            self._wait(float("inf"))
            self.close_connection = True
        elif reply.drop_after is not None:
            self._drop()
        else:
            self._write(b"0\r\n\r\n")

    def _chunk(self, event: bytes) -> bool:
        return self._write(b"%x\r\n%s\r\n" % (len(event), event))

    def _drop(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _complete(self, body: dict[str, Any], reply: FakeReply) -> None:
        if reply.delay and not self._wait(reply.delay):
            return
        if reply.hang_after is not None:
            self._wait(float("inf"))
            self.close_connection = True
            return
        if reply.drop_after is not None:
            self._drop()
            return
        self._send_json(200, _completion(body, reply))


def _usage(body: dict[str, Any], reply: FakeReply, produced: int) -> dict[str, Any]:
    if reply.usage is not None:
        prompt, completion = reply.usage
    else:
        messages = body.get("messages") or []
        prompt = sum(len(_message_text(m).split()) for m in messages if isinstance(m, dict))
        completion = produced
    out: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if reply.cached_tokens:
        out["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
    return out


def _finish_reason(reply: FakeReply) -> str:
    return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")


def _tool_call_fragments(reply: FakeReply) -> Iterator[dict[str, Any]]:
    """Tool call deltas: a head with id and name, then the arguments in pieces."""
    per_call: list[list[dict[str, Any]]] = []
    for index, call in enumerate(reply.tool_calls):
        call_id = call.id or f"call_{index + 1}"
        head = {"index": index, "id": call_id, "type": "function"}
        pieces: list[dict[str, Any]] = [{**head, "function": {"name": call.name, "arguments": ""}}]
        args = call.arguments_text()
        size = max(1, -(-len(args) // max(1, call.fragments)))
        pieces += [
            {"index": index, "function": {"arguments": args[i : i + size]}}
            for i in range(0, len(args), size)
        ]
        per_call.append(pieces)
    if reply.interleave_tool_calls:
        for group in itertools.zip_longest(*per_call):
            yield from (piece for piece in group if piece is not None)
    else:
        for pieces in per_call:
            yield from pieces


def _events(body: dict[str, Any], reply: FakeReply, with_usage: bool) -> Iterator[bytes]:
    """The SSE events of one streamed reply, as bytes ready to write."""
    base: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": str(body.get("model", "fake")),
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return b"data: %s\n\n" % json.dumps({**base, "choices": [choice]}).encode()

    # Text chunks are the hot path of benchmarks: splice the text into a prebuilt frame.
    head, _, tail = chunk({"content": "\x00"}).partition(b'"\\u0000"')
    yield chunk({"role": "assistant", "content": ""})
    produced = 0
    for piece in _words(reply.reasoning):
        produced += 1
        yield chunk({reply.reasoning_field: piece})
    for piece in _words(reply.text):
        produced += 1
        yield head + json.dumps(piece).encode() + tail
    while reply.endless and reply.text:
        for piece in _words(reply.text):
            yield head + json.dumps(piece).encode() + tail
    for fragment in _tool_call_fragments(reply):
        produced += 1
        yield chunk({"tool_calls": [fragment]})
    yield chunk({}, _finish_reason(reply))
    if with_usage:
        usage = {**base, "choices": [], "usage": _usage(body, reply, produced)}
        yield b"data: %s\n\n" % json.dumps(usage).encode()
    if reply.send_done:
        yield b"data: [DONE]\n\n"


def _completion(body: dict[str, Any], reply: FakeReply) -> dict[str, Any]:
    """The non-streamed ``chat.completion`` for a reply."""
    text = "".join(_words(reply.text))
    message: dict[str, Any] = {"role": "assistant", "content": text or None, "refusal": None}
    if reply.reasoning:
        message[reply.reasoning_field] = "".join(_words(reply.reasoning))
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id or f"call_{index + 1}",
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_text()},
            }
            for index, call in enumerate(reply.tool_calls)
        ]
    produced = len(_words(reply.text)) + len(_words(reply.reasoning)) + len(reply.tool_calls)
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(body.get("model", "fake")),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": _finish_reason(reply),
                "logprobs": None,
            }
        ],
        "usage": _usage(body, reply, produced),
    }


class FakeOpenAI(BackgroundServer):
    """An OpenAI Chat Completions server on loopback, for tests, benchmarks and manual runs.

    Use as a context manager (or ``start()`` / ``stop()``); point clients at ``base_url``.
    """

    thread_name = "fake-openai"

    def __init__(self, host: str = "127.0.0.1", port: int = 0, api_key: str | None = None) -> None:
        super().__init__(host, port)
        self.api_key = api_key
        """When set, requests without ``Authorization: Bearer <api_key>`` get a 401."""
        self.models: tuple[str, ...] | None = ("gpt-4o-mini", "fake-model")
        """What ``GET /v1/models`` lists; None: that route is absent (404)."""
        self.requests: list[dict[str, Any]] = []
        self.connection_closed = threading.Event()
        self.closed_mid_stream = 0
        self._replies: collections.deque[FakeReply] = collections.deque()
        self._call_ids = itertools.count(1)
        self.context_window: int | None = None
        """When set, a request whose prompt (``count_tokens``) is larger gets OpenAI's 400."""
        self.prompt_tokens: list[int] = []
        """The prompt tokens of every request, as ``count_tokens`` counts them."""
        self.overflows = 0
        """Requests refused for being larger than ``context_window``."""
        self.summary_reply: FakeReply | None = None
        """What a summariser's request gets (copied for each); None: a short summary."""
        self.summaries = 0
        """Summariser requests seen."""
        self.answer_words = 0
        """When set, the default answer is this many words (a long answer for each turn)."""

    @property
    def base_url(self) -> str:
        """E.g. ``http://127.0.0.1:54321/v1``, for ``OpenAI(base_url=...)``."""
        return f"http://{self.host}:{self.port}/v1"

    def _make_server(self) -> _Server:
        server = _Server((self.host, self.port), _Handler)
        server.fake = self
        return server

    def enqueue(self, *replies: FakeReply) -> None:
        """Script the next replies, first in first out."""
        self._replies.extend(replies)

    def wait_connection_closed(self, timeout: float) -> bool:
        """Block until a client has gone away mid-response; False if it did not in time."""
        return self.connection_closed.wait(timeout)

    async def wait_connection_closed_async(self, within: float) -> bool:
        """``wait_connection_closed`` without blocking the event loop."""
        return await asyncio.to_thread(self.connection_closed.wait, within)

    def _record(self, body: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(body)

    def _note_closed(self) -> None:
        with self._lock:
            self.closed_mid_stream += 1
        self.connection_closed.set()

    def _next_reply(self, body: dict[str, Any]) -> FakeReply:
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        if messages and _message_text(messages[0]).startswith(SUMMARY_MARK):
            with self._lock:
                self.summaries += 1
            if self.summary_reply is not None:
                return dataclasses.replace(self.summary_reply)
            lines = _message_text(messages[-1]).count("\n")
            return FakeReply(text=f"Summary: the user and the assistant talked ({lines} lines).")
        try:
            return self._replies.popleft()
        except IndexError:
            return self._default_reply(body)

    def _default_reply(self, body: dict[str, Any]) -> FakeReply:
        """The rule-based answer: tool results → ``Result: ...``; else echo plus directives."""
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        results: list[str] = []
        for message in reversed(messages):
            if message.get("role") != "tool":
                break
            results.insert(0, _message_text(message))
        if results:
            return FakeReply(text="Result: " + "; ".join(results))
        user = next((m for m in reversed(messages) if m.get("role") == "user"), {})
        return self._apply_directives(_message_text(user))

    def _apply_directives(self, text: str) -> FakeReply:
        reply = FakeReply()
        chunks: int | None = None
        fault = ""
        for match in _DIRECTIVE.finditer(text):
            kind, arg = match["kind"], (match["arg"] or "").strip()
            if match["tool"]:
                call_id = f"call_{next(self._call_ids)}"
                reply.tool_calls.append(
                    FakeToolCall(match["tool"], match["args"] or "{}", id=call_id)
                )
            elif kind == "slow":
                reply.delay = float(arg)
            elif kind == "chunks":
                chunks = int(arg)
            elif kind == "reason":
                reply.reasoning = ["Let me ", "think ", "about ", "that."]
            elif kind == "error":
                reply.status = int(arg)
            elif kind == "cached":
                reply.cached_tokens = int(arg)
            else:
                fault = kind
        rest = " ".join(_DIRECTIVE.sub(" ", text).split())
        if chunks is not None:
            reply.text = [f"w{i} " for i in range(chunks)]
        elif self.answer_words and not reply.tool_calls:
            reply.text = [f"word{i} " for i in range(self.answer_words)]
        elif rest or not reply.tool_calls:
            reply.text = f"Echo: {rest}".strip()
        first_text = 1 + len(_words(reply.reasoning)) + 1
        if fault == "hang":
            reply.hang_after = first_text
        elif fault == "drop":
            reply.drop_after = first_text
        return reply


def main(argv: list[str] | None = None) -> None:
    """Serve until interrupted, printing the base URL first (for benchmarks and manual runs)."""
    parser = argparse.ArgumentParser(description="A fake OpenAI Chat Completions server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--api-key", default=None, help="require this bearer token")
    parser.add_argument("--context-window", type=int, default=None, help="tokens, enforced")
    parser.add_argument("--answer-words", type=int, default=0, help="words of each answer")
    options = parser.parse_args(argv)
    with FakeOpenAI(options.host, options.port, options.api_key) as fake:
        fake.context_window = options.context_window
        fake.answer_words = options.answer_words
        print(fake.base_url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
