"""The HTTP sender against a real receiver on loopback: signed, guarded, bounded."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from engine_service.core.deliveries import Delivery
from engine_service.webhooks.sender import WebhookSender
from tests.engine.webhooks.receiver import Receiver

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()


def delivery(url: str, **headers: str) -> Delivery:
    now = datetime.now(UTC)
    return Delivery("msg_1", url, '{"runId": "r1"}', now, now, headers=dict(headers))


def verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """What a receiver does (docs/webhooks.md), written here from the scheme alone."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return any(
        hmac.compare_digest(expected, sig.partition(",")[2])
        for sig in headers["webhook-signature"].split()
        if sig.startswith("v1,")
    )


@pytest.fixture
def hook() -> Iterator[Receiver]:
    with Receiver() as receiver:
        yield receiver


async def test_a_delivery_is_posted_signed_with_its_own_headers(hook: Receiver) -> None:
    send = WebhookSender(secret=SECRET, allow_private=True, clock=lambda: 1_764_000_000.0)
    result = await send(delivery(hook.url + "?a=1", Authorization="Bearer peer-token"))
    assert result.ok, result.error
    (got,) = hook.wait_for(1)
    assert got.path == "/hook?a=1"
    assert got.body == b'{"runId": "r1"}'
    assert got.headers["webhook-id"] == "msg_1"
    assert got.headers["webhook-timestamp"] == "1764000000"
    assert got.headers["authorization"] == "Bearer peer-token"
    assert got.headers["content-type"] == "application/json"
    assert verify(SECRET, got.headers, got.body)
    assert not verify("whsec_" + base64.b64encode(b"another key").decode(), got.headers, got.body)


async def test_without_allow_private_loopback_is_refused_for_good_and_nothing_is_sent(
    hook: Receiver,
) -> None:
    result = await WebhookSender(allow_private=False)(delivery(hook.url.replace("http", "https")))
    assert (result.ok, result.final) == (False, True)
    assert "loopback" in result.error
    assert hook.received == []


async def test_a_rebinding_name_is_refused_when_it_resolves_inward(hook: Receiver) -> None:
    async def rebinding(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]  # public when registered, loopback now

    send = WebhookSender(allow_private=False, resolver=rebinding)
    result = await send(delivery(f"https://hooks.example.com:{hook.port}/hook"))
    assert (result.ok, result.final) == (False, True)
    assert result.error == "the webhook host 'hooks.example.com' resolves to a loopback address"
    assert hook.received == []


async def test_the_connection_goes_to_the_checked_address_with_the_name_as_host(
    hook: Receiver,
) -> None:
    asked: list[str] = []

    async def once(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["127.0.0.1"]

    send = WebhookSender(allow_private=True, resolver=once)
    result = await send(delivery(f"http://hooks.example.com:{hook.port}/hook"))
    assert result.ok, result.error
    assert asked == ["hooks.example.com"]  # resolved once, not again by a library
    assert hook.wait_for(1)[0].headers["host"] == f"hooks.example.com:{hook.port}"


async def test_redirects_are_not_followed(hook: Receiver) -> None:
    hook.status, hook.location = 307, "http://127.0.0.1:9/elsewhere"
    result = await WebhookSender(allow_private=True)(delivery(hook.url))
    assert (result.ok, result.final) == (False, False)
    assert result.error == "HTTP 307: redirects are not followed"
    assert len(hook.received) == 1


async def test_an_error_status_is_a_failure_to_retry(hook: Receiver) -> None:
    hook.status = 503
    result = await WebhookSender(allow_private=True)(delivery(hook.url))
    assert (result.ok, result.final, result.error) == (False, False, "HTTP 503")


def silent_server(answer: bytes = b"") -> tuple[socket.socket, threading.Event]:
    """A server that accepts, reads, sends ``answer`` (nothing: it never answers)."""
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            if answer:
                conn.sendall(answer)
            done.wait(10)

    threading.Thread(target=serve, daemon=True).start()
    return listener, done


async def test_a_receiver_that_never_answers_times_out() -> None:
    listener, done = silent_server()
    port = listener.getsockname()[1]
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await WebhookSender(allow_private=True, timeout=0.3)(
        delivery(f"http://127.0.0.1:{port}/")
    )
    done.set()
    listener.close()
    assert (result.ok, result.error) == (False, "no answer within 0.3s")
    assert loop.time() - started < 2


async def test_the_answer_head_is_read_bounded() -> None:
    listener, done = silent_server(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 100_000)
    port = listener.getsockname()[1]
    result = await WebhookSender(allow_private=True, max_head_bytes=4096)(
        delivery(f"http://127.0.0.1:{port}/")
    )
    done.set()
    listener.close()
    assert (result.ok, result.error) == (
        False,
        "the receiver's answer head is longer than 4096 bytes",
    )


async def test_a_receiver_that_is_down_is_a_failure_to_retry() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = await WebhookSender(allow_private=True)(delivery(f"http://127.0.0.1:{port}/"))
    assert (result.ok, result.final, result.error) == (False, False, "connection refused")


async def test_a_header_with_a_line_break_is_refused_for_good(hook: Receiver) -> None:
    result = await WebhookSender(allow_private=True)(
        delivery(hook.url, **{"X-A2A-Notification-Token": "t\r\nX-Evil: 1"})
    )
    assert (result.ok, result.final) == (False, True)
    assert hook.received == []
