"""https webhooks: the connection goes to the checked address while TLS checks the
certificate against the URL's name (SNI), so pinning the address does not weaken TLS."""

from __future__ import annotations

import ssl
import subprocess
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from engine_service.core.deliveries import Delivery
from engine_service.webhooks.sender import WebhookSender

NAME = "hooks.test"


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("tls")
    key, crt = folder / "key.pem", folder / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            f"/CN={NAME}",
            "-addext",
            f"subjectAltName=DNS:{NAME}",
            "-keyout",
            str(key),
            "-out",
            str(crt),
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return key, crt


@pytest.fixture
def https_port(cert: tuple[Path, Path]) -> Iterator[int]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert[1]), str(cert[0]))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


async def loopback(host: str, port: int) -> list[str]:
    return ["127.0.0.1"]


def delivery(url: str) -> Delivery:
    now = datetime.now(UTC)
    return Delivery("d1", url, "{}", now, now)


async def test_tls_is_checked_against_the_name_while_connecting_to_the_checked_address(
    cert: tuple[Path, Path], https_port: int
) -> None:
    trusted = ssl.create_default_context(cafile=str(cert[1]))
    send = WebhookSender(allow_private=True, resolver=loopback, ssl_context=trusted)
    result = await send(delivery(f"https://{NAME}:{https_port}/hook"))
    assert result.ok, result.error


async def test_a_certificate_for_another_name_fails_the_attempt(
    cert: tuple[Path, Path], https_port: int
) -> None:
    trusted = ssl.create_default_context(cafile=str(cert[1]))
    send = WebhookSender(allow_private=True, resolver=loopback, ssl_context=trusted)
    result = await send(delivery(f"https://other.test:{https_port}/hook"))
    assert not result.ok and result.error.startswith("TLS failed"), result.error


async def test_an_untrusted_certificate_fails_the_attempt(https_port: int) -> None:
    send = WebhookSender(allow_private=True, resolver=loopback)  # the system's CAs
    result = await send(delivery(f"https://{NAME}:{https_port}/hook"))
    assert not result.ok and result.error.startswith("TLS failed"), result.error
