"""An httpx client that stops reading a remote agent's answer past a byte limit.

a2a-sdk reads a JSON answer whole (``response.json()``) and each event of a stream whole
before parsing it, with no limit of its own: a remote agent could make the engine hold an
answer of any size, clipped only afterwards. :func:`bounded_client`'s response hook puts a
counter under each response's body: of the whole body, or of each event of an event stream
(the bytes since the last blank line). Past ``limit`` the read stops with
:class:`ResponseTooLarge` and the connection is dropped, so what is held stays under the
limit plus one read. A hook, not a transport: a transport given to httpx replaces the
proxies it takes from the environment (``HTTPS_PROXY``, ``NO_PROXY``).

The count is of the bytes on the wire, so the client asks for them uncompressed
(``Accept-Encoding: identity``, see :data:`IDENTITY`); an answer compressed anyway would be
inflated by httpx past the count, and is refused.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx

__all__ = ["IDENTITY", "ResponseTooLarge", "bound_answers", "bounded_client"]

IDENTITY = {"Accept-Encoding": "identity"}
"""The request header that keeps answers countable: the client sends it with every request."""
_EVENT_ENDS = (b"\n\n", b"\r\r", b"\n\r\n")
"""A blank line, the end of a server-sent event (``\\r\\n\\r\\n`` ends with the last)."""

Hook = Callable[[Any], Awaitable[None]]


class ResponseTooLarge(httpx.HTTPError):
    """An answer (or one event of a stream) passed ``limit`` bytes; reading stopped there."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the answer is over {limit:,} bytes")
        self.limit = limit


def bound_answers(limit: int) -> Hook:
    """A response hook reading each answer up to ``limit`` bytes (per event for a stream)."""

    async def bound(response: httpx.Response) -> None:
        headers = response.headers
        per_event = headers.get("content-type", "").startswith("text/event-stream")
        encoding = headers.get("content-encoding", "identity").strip().lower()
        declared = headers.get("content-length", "")
        if encoding != "identity":  # httpx closes the response a hook refuses
            raise httpx.DecodingError(
                f"a compressed answer ({encoding}), not asked for", request=response.request
            )
        if not per_event and declared.isdigit() and int(declared) > limit:
            raise ResponseTooLarge(limit)
        assert isinstance(response.stream, httpx.AsyncByteStream)  # an async client's
        response.stream = _Counted(response.stream, limit, per_event)

    return bound


def bounded_client(
    limit: int, *, event_hooks: dict[str, list[Hook]] | None = None, **options: Any
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` (``options`` as its own) whose answers are read up to
    ``limit`` bytes each, asked for uncompressed."""
    hooks = {name: list(each) for name, each in (event_hooks or {}).items()}
    hooks.setdefault("response", []).append(bound_answers(limit))
    headers = httpx.Headers(options.pop("headers", None))
    headers.update(IDENTITY)  # uncompressed: the bytes counted are the bytes held
    return httpx.AsyncClient(headers=headers, event_hooks=hooks, **options)


class _Counted(httpx.AsyncByteStream):
    """A response body that raises ``ResponseTooLarge`` instead of passing ``limit``."""

    def __init__(self, inner: httpx.AsyncByteStream, limit: int, per_event: bool) -> None:
        self.inner, self.limit, self.per_event = inner, limit, per_event

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        tail = b""  # the last bytes before this chunk: an event's end may straddle two
        async for chunk in self.inner:
            size += len(chunk)
            if self.per_event:
                window = tail + chunk
                ends = [at + len(mark) for mark in _EVENT_ENDS if (at := window.rfind(mark)) >= 0]
                end = max(ends, default=0)
                if end > len(tail):  # an event ended in this chunk: count from its end
                    size = len(window) - end
                tail = window[-2:]
            if size > self.limit:
                raise ResponseTooLarge(self.limit)
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()
