"""An httpx transport that stops reading a remote agent's answer past a byte limit.

a2a-sdk reads a JSON answer whole (``response.json()``) and each event of a stream whole
before parsing it, with no limit of its own: a remote agent could make the engine hold an
answer of any size, clipped only afterwards. :class:`BoundedTransport` sits under the SDK's
``httpx.AsyncClient`` and counts the bytes of each response as they arrive: of the whole
body, or of each event of an event stream (the bytes since the last blank line). Past
``limit`` the read stops with :class:`ResponseTooLarge` and the connection is dropped, so
what is held stays under the limit plus one read.

The count is of the bytes on the wire, so the client asks for them uncompressed
(``Accept-Encoding: identity``, see :data:`IDENTITY`); an answer compressed anyway would be
inflated by httpx past the count, and is refused.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

__all__ = ["IDENTITY", "BoundedTransport", "ResponseTooLarge"]

IDENTITY = {"Accept-Encoding": "identity"}
"""The request header that keeps answers countable: the client sends it with every request."""
_EVENT_ENDS = (b"\n\n", b"\r\r", b"\n\r\n")
"""A blank line, the end of a server-sent event (``\\r\\n\\r\\n`` ends with the last)."""


class ResponseTooLarge(httpx.HTTPError):
    """An answer (or one event of a stream) passed ``limit`` bytes; reading stopped there."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the answer is over {limit:,} bytes")
        self.limit = limit


class BoundedTransport(httpx.AsyncBaseTransport):
    """``inner``'s responses, each read up to ``limit`` bytes (per event for a stream)."""

    def __init__(self, limit: int, inner: httpx.AsyncBaseTransport | None = None) -> None:
        self.limit = limit
        self.inner = inner or httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        headers = response.headers
        per_event = headers.get("content-type", "").startswith("text/event-stream")
        encoding = headers.get("content-encoding", "identity").strip().lower()
        declared = headers.get("content-length", "")
        if encoding != "identity" or (
            not per_event and declared.isdigit() and int(declared) > self.limit
        ):
            await response.aclose()
            if encoding != "identity":
                raise httpx.DecodingError(
                    f"a compressed answer ({encoding}), not asked for", request=request
                )
            raise ResponseTooLarge(self.limit)
        assert isinstance(response.stream, httpx.AsyncByteStream)  # an async transport's
        stream = _Counted(response.stream, self.limit, per_event)
        return httpx.Response(
            response.status_code, headers=headers, stream=stream, extensions=response.extensions
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


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
