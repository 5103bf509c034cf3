"""The HTTP side of deliveries: one POST per attempt, guarded, signed and bounded.

Each attempt resolves the host, checks every address (``guard``), connects to a checked
address (https: TLS with the name as SNI, the certificate checked against the name), sends
the body with ``Connection: close`` and reads the answer's status line and headers, at most
``max_head_bytes``; the body is never read. 2xx is delivered; a redirect is a failure (not
followed), and so is anything else. The whole attempt is bounded by ``timeout``.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable

from engine_service.core.deliveries import Delivery, SendResult
from engine_service.webhooks.guard import (
    Resolver,
    Target,
    WebhookRefused,
    check_url,
    resolve_checked,
    system_resolver,
)
from engine_service.webhooks.signing import signature_key, signed_headers

__all__ = ["WebhookSender"]

USER_AGENT = "agentik-webhooks/1"
MAX_HEAD_BYTES = 16 * 1024


class WebhookSender:
    """Makes one attempt of a delivery (the ``send`` of ``core.deliveries.DeliveryWorker``)."""

    def __init__(
        self,
        *,
        secret: str = "",
        allow_private: bool = False,
        timeout: float = 10.0,
        resolver: Resolver = system_resolver,
        max_head_bytes: int = MAX_HEAD_BYTES,
        ssl_context: ssl.SSLContext | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``resolver`` and ``ssl_context`` are for tests (a stub resolver, a test CA)."""
        self._key = signature_key(secret) if secret else None
        self.allow_private = allow_private
        self.timeout = timeout
        self._resolver = resolver
        self._max_head = max_head_bytes
        self._ssl = ssl_context or ssl.create_default_context()
        self._clock = clock

    async def __call__(self, delivery: Delivery) -> SendResult:
        try:
            target = check_url(delivery.url, allow_private=self.allow_private)
            for name, value in delivery.headers.items():
                if any(ch in name + value for ch in "\r\n\0") or not name or ":" in name:
                    raise WebhookRefused(f"the webhook header {name!r} is not a valid header")
        except WebhookRefused as exc:
            return SendResult(False, str(exc), final=True)
        try:
            async with asyncio.timeout(self.timeout):
                return await self._attempt(delivery, target)
        except WebhookRefused as exc:
            return SendResult(False, str(exc), final=True)
        except TimeoutError:
            return SendResult(False, f"no answer within {self.timeout:g}s")
        except ssl.SSLError as exc:
            return SendResult(False, f"TLS failed ({exc.reason or 'handshake'})")
        except ConnectionRefusedError:
            return SendResult(False, "connection refused")
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            return SendResult(False, _network_error(exc, self._max_head))

    async def _attempt(self, delivery: Delivery, target: Target) -> SendResult:
        addresses = await resolve_checked(
            target, allow_private=self.allow_private, resolver=self._resolver
        )
        body = delivery.payload.encode()
        request = self._request(delivery, target, body)
        last: OSError | None = None
        for address in addresses:  # each one checked above; the first that connects
            try:
                reader, writer = await asyncio.open_connection(
                    address,
                    target.port,
                    ssl=self._ssl if target.scheme == "https" else None,
                    server_hostname=target.host if target.scheme == "https" else None,
                    limit=self._max_head,
                )
            except ssl.SSLError:
                raise
            except OSError as exc:
                last = exc
                continue
            try:
                writer.write(request)
                await writer.drain()
                head = await reader.readuntil(b"\r\n\r\n")
            finally:
                writer.close()
            return _outcome(head)
        assert last is not None
        raise last

    def _request(self, delivery: Delivery, target: Target, body: bytes) -> bytes:
        default_port = 443 if target.scheme == "https" else 80
        host = f"[{target.host}]" if ":" in target.host else target.host
        if target.port != default_port:
            host += f":{target.port}"
        headers = {
            "Host": host,
            "User-Agent": USER_AGENT,
            "Content-Type": "application/json",
            "Content-Length": str(len(body)),
            "Connection": "close",
            **signed_headers(self._key, delivery.id, int(self._clock()), body),
            **delivery.headers,
        }
        lines = [f"POST {target.path} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items())]
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _outcome(head: bytes) -> SendResult:
    status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        return SendResult(False, "the receiver's answer is not HTTP")
    status = int(parts[1])
    if 200 <= status < 300:
        return SendResult(True)
    if 300 <= status < 400:
        return SendResult(False, f"HTTP {status}: redirects are not followed")
    return SendResult(False, f"HTTP {status}")


def _network_error(exc: BaseException, max_head: int) -> str:
    if isinstance(exc, asyncio.LimitOverrunError):
        return f"the receiver's answer head is longer than {max_head} bytes"
    if isinstance(exc, asyncio.IncompleteReadError):
        return "the receiver closed the connection before answering"
    if isinstance(exc, OSError) and exc.strerror:
        return f"network error ({exc.strerror.lower()})"
    return f"network error ({type(exc).__name__})"
