"""The JSON-RPC envelopes: what is encoded is always valid UTF-8 JSON."""

from __future__ import annotations

import json

from web_facade.a2a.jsonrpc import encode


def test_encode_writes_utf8_and_escapes_a_lone_surrogate_instead_of_failing() -> None:
    assert encode({"text": "é"}) == '{"text":"é"}'.encode()
    out = encode({"text": "x\ud800"})
    assert out == b'{"text":"x\\ud800"}'
    assert json.loads(out) == {"text": "x\ud800"}
