"""The fake OpenAI API's answers served from one asyncio loop, for benchmarks.

:mod:`tests.fakes.fake_openai` serves each connection on a thread of its own. Under a
benchmark's load (256 streams, a chunk every 20 ms each) its threads wake each other
through the GIL, and the fake alone used 2.4 ms of CPU per run, a fifth of what the servers
it serves used, on the two cores they share: every benchmark in a closed loop then measured
the fake as much as the server. This process answers the same way (the replies come from a
:class:`~tests.fakes.fake_openai.FakeOpenAI` used for its rules only, the frames from the
same ``_events``, one write per chunk as the threaded fake makes) from one event loop,
for about half the CPU.

What it serves: ``POST /v1/chat/completions`` (streamed or not, every directive of the
threaded fake: ``[[chunks:N]]``, ``[[slow:S]]``, ``[[tool:...]]``, ``[[reason]]``,
``[[error:N]]``, ``[[cached:N]]``, ``[[hang]]``, ``[[drop]]``) and ``GET /v1/models``, over
HTTP/1.1 with keep-alive. What it does not keep: the requests it saw (nothing in another
process could read them). Tests use the threaded fake, which records them.

Run: ``python -m tests.fakes.aio_openai --port 0 [--backlog 1024]``; it prints its base URL.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
from typing import Any

from tests.fakes.fake_openai import (
    _ERROR_KINDS,
    FakeOpenAI,
    FakeReply,
    _completion,
    _events,
)

__all__ = ["BODY_BYTES", "HEAD_BYTES", "YIELD_EVERY", "main", "serve"]

HEAD_BYTES = 64 * 1024
"""The longest request head read; a longer one is answered 431 and the connection closed."""

BODY_BYTES = 64 * 1024 * 1024
"""The largest request body read; a larger one is answered 413 and the connection closed."""

YIELD_EVERY = 8
"""Chunks of a full-speed answer written before the other connections get a turn. Without
it a request waited behind every answer being written (64 clients of 200-chunk answers:
first chunk p50 32 ms; with it 12 ms)."""

_ROUTES = ("/v1/chat/completions", "/chat/completions")
_MODELS = ("/v1/models", "/models")


class _Closed(Exception):
    """The client went away (or the fake cut the connection on purpose)."""


class _Connection:
    """One client's keep-alive connection: requests read and answered one after another."""

    def __init__(
        self, rules: FakeOpenAI, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.rules = rules
        self.reader = reader
        self.writer = writer

    async def serve(self) -> None:
        with contextlib.suppress(_Closed, ConnectionError, asyncio.IncompleteReadError):
            while await self._one():
                pass
        with contextlib.suppress(ConnectionError, OSError):
            self.writer.close()

    async def _one(self) -> bool:
        """Answer one request; False when the connection is to close."""
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            await self._json(431, _error(431, "the request head is too long"), close=True)
            return False
        except asyncio.IncompleteReadError:
            return False  # the client closed between requests
        lines = head.decode("latin-1").split("\r\n")
        method, path, *_ = [*lines[0].split(" "), "", ""]
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        try:
            length = int(headers.get("content-length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            await self._json(400, _error(400, "the Content-Length is not a number"), close=True)
            return False
        if length > BODY_BYTES:
            await self._json(413, _error(413, "the request body is too large"), close=True)
            return False
        raw = await self.reader.readexactly(length)
        keep = headers.get("connection", "").lower() != "close"
        path = path.split("?", 1)[0].rstrip("/")
        authorized = self.rules.api_key is None or headers.get("authorization") == (
            f"Bearer {self.rules.api_key}"
        )
        if method == "GET" and path in _MODELS and self.rules.models is not None:
            if not authorized:
                return await self._json(401, _error(401, "Incorrect API key provided."), not keep)
            data = [{"id": n, "object": "model", "owned_by": "fake"} for n in self.rules.models]
            return await self._json(200, {"object": "list", "data": data}, not keep)
        if method != "POST" or path not in _ROUTES:
            return await self._json(404, _error(404, f"no route for {path}"), not keep)
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            refusal = _error(400, "the request body is not a JSON object")
            return await self._json(400, refusal, not keep)
        if not authorized:
            return await self._json(401, _error(401, "Incorrect API key provided."), not keep)
        reply = self.rules._next_reply(body)
        if reply.status != 200:
            payload = reply.error_body or _error(
                reply.status, reply.error_message or f"fake error {reply.status}"
            )
            return await self._json(reply.status, payload, not keep)
        if body.get("stream"):
            return await self._stream(body, reply) and keep
        return await self._complete(body, reply) and keep

    async def _json(self, status: int, payload: object, close: bool) -> bool:
        data = json.dumps(payload).encode()
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n" + ("Connection: close\r\n" if close else "") + "\r\n"
        )
        self.writer.write(head.encode() + data)
        await self.writer.drain()
        return not close

    async def _stream(self, body: dict[str, Any], reply: FakeReply) -> bool:
        write = self.writer.write
        write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        for index, event in enumerate(_events(body, reply, with_usage)):
            if reply.delay:
                await self._wait(reply.delay)
            if index == reply.hang_after:
                await self._wait(None)
            if index == reply.drop_after:
                self._drop()
            if index == reply.malformed_after:
                write(_chunk(b'data: {"choices": [{"delta"\n\n'))
            # One write per chunk, as the threaded fake makes: each goes out as it is made
            # unless the socket is backed up.
            write(_chunk(event))
            if reply.delay or self.writer.transport.get_write_buffer_size() > 65536:
                await self.writer.drain()
            elif index % YIELD_EVERY == YIELD_EVERY - 1:
                # A full-speed answer gives the other connections a turn every few chunks:
                # an LLM service's first token does not wait for other clients' answers.
                await asyncio.sleep(0)
        if reply.hang_after is not None:
            await self._wait(None)
        if reply.drop_after is not None:
            self._drop()
        write(b"0\r\n\r\n")
        await self.writer.drain()
        return True

    async def _complete(self, body: dict[str, Any], reply: FakeReply) -> bool:
        if reply.delay:
            await self._wait(reply.delay)
        if reply.hang_after is not None:
            await self._wait(None)
        if reply.drop_after is not None:
            self._drop()
        return await self._json(200, _completion(body, reply), close=False)

    async def _wait(self, seconds: float | None) -> None:
        """Sleep (``None``: until the client goes); a client that closed meanwhile ends the
        answer (:class:`_Closed`): seen after the sleep, not during it as the threaded fake
        sees it, which would cost a read waited for beside every chunk's sleep."""
        if seconds is not None:
            await asyncio.sleep(seconds)
            if self.reader.at_eof():
                raise _Closed
            return
        # Bytes read here would belong to a request pipelined behind a hanging answer: no
        # client of the benchmarks pipelines, so they are dropped with the connection.
        while await self.reader.read(65536):
            pass
        raise _Closed

    def _drop(self) -> None:
        sock = self.writer.get_extra_info("socket")
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        raise _Closed


def _chunk(event: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(event), event)


def _error(status: int, message: str) -> dict[str, Any]:
    kind, code = _ERROR_KINDS.get(status, ("api_error", "error"))
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    413: "Content Too Large",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


async def serve(
    rules: FakeOpenAI, host: str = "127.0.0.1", port: int = 0, backlog: int = 1024
) -> asyncio.Server:
    """Start serving ``rules``' answers; the server (its socket names the port)."""

    async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await _Connection(rules, reader, writer).serve()

    return await asyncio.start_server(connected, host, port, backlog=backlog, limit=HEAD_BYTES)


def main(argv: list[str] | None = None) -> None:
    """Serve until interrupted, printing the base URL first."""
    parser = argparse.ArgumentParser(description="The fake OpenAI API on one asyncio loop.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--backlog", type=int, default=1024, help="the listen backlog")
    parser.add_argument("--api-key", default=None, help="require this bearer token")
    parser.add_argument("--answer-words", type=int, default=0, help="words of each answer")
    options = parser.parse_args(argv)
    rules = FakeOpenAI(options.host, options.port, options.api_key)
    rules.answer_words = options.answer_words

    async def run() -> None:
        server = await serve(rules, options.host, options.port, options.backlog)
        port = server.sockets[0].getsockname()[1]
        print(f"http://{options.host}:{port}/v1", flush=True)
        await server.serve_forever()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())


if __name__ == "__main__":
    main()
