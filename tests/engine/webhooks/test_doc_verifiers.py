"""The signature checks docs/webhooks.md gives receivers (Python and Node) accept what the
sender signs, and refuse a changed body or another key."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from engine_service.core.deliveries import Delivery
from engine_service.webhooks.sender import WebhookSender
from tests.docs.examples import ROOT
from tests.engine.webhooks.receiver import Received, Receiver

SECRET = "whsec_" + base64.b64encode(b"docs-verifier-key-0123456789abcd").decode()
OTHER = "whsec_" + base64.b64encode(b"another key entirely").decode()


def block(lang: str, marker: str) -> str:
    text = (ROOT / "docs" / "webhooks.md").read_text()
    for found in re.finditer(rf"(?ms)^```{lang}\n(.*?)^```", text):
        if marker in found.group(1):
            return found.group(1)
    raise AssertionError(f"no {lang} block with {marker!r} in docs/webhooks.md")


@pytest.fixture(scope="module")
def signed() -> Received:
    async def deliver(url: str) -> None:
        now = datetime.now(UTC)
        body = json.dumps({"type": "run.finished", "text": "é ✓"}, ensure_ascii=False)
        result = await WebhookSender(secret=SECRET, allow_private=True)(
            Delivery("run_r1", url, body, now, now)
        )
        assert result.ok, result.error

    with Receiver() as hook:
        asyncio.run(deliver(hook.url))
        (got,) = hook.wait_for(1)
    return got


def test_the_python_verifier_accepts_a_signed_delivery(signed: Received) -> None:
    scope: dict[str, Any] = {}
    exec(compile(block("python", "def verify("), "docs/webhooks.md", "exec"), scope)
    verify = scope["verify"]
    assert verify(SECRET, signed.headers, signed.body)
    assert not verify(OTHER, signed.headers, signed.body)
    assert not verify(SECRET, signed.headers, signed.body + b"x")
    stale = {**signed.headers, "webhook-timestamp": str(int(time.time()) - 3600)}
    assert not verify(SECRET, stale, signed.body)


def test_the_node_verifier_accepts_a_signed_delivery(signed: Received, tmp_path: Path) -> None:
    (tmp_path / "verify.js").write_text(block("js", "function verify("))
    script = (
        "const { verify } = require('./verify.js');\n"
        "const [secret, headers, body] = JSON.parse(require('fs').readFileSync(0, 'utf8'));\n"
        "console.log(verify(secret, headers, Buffer.from(body, 'base64')));\n"
    )
    (tmp_path / "check.js").write_text(script)

    def node(secret: str, body: bytes) -> str:
        given = json.dumps([secret, signed.headers, base64.b64encode(body).decode()])
        done = subprocess.run(
            ["node", "check.js"],
            input=given,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return done.stdout.strip()

    assert node(SECRET, signed.body) == "true"
    assert node(OTHER, signed.body) == "false"
    assert node(SECRET, signed.body + b"x") == "false"
