"""Standard Webhooks signatures: the scheme's published example, keys, headers."""

from __future__ import annotations

import pytest

from engine_service.webhooks.signing import signature, signature_key, signed_headers


def test_the_standard_webhooks_example_signs_as_published() -> None:
    # The example of the Standard Webhooks specification (secret, id, timestamp, body).
    key = signature_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
    got = signature(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, b'{"test": 2432232314}')
    assert got == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_a_plain_secret_is_its_bytes_and_a_bad_whsec_secret_is_refused() -> None:
    assert signature_key("plain-secret") == b"plain-secret"
    with pytest.raises(ValueError, match="must be base64"):
        signature_key("whsec_not base64!")


def test_without_a_key_the_headers_carry_no_signature() -> None:
    assert signed_headers(None, "m1", 5, b"{}") == {"webhook-id": "m1", "webhook-timestamp": "5"}
    assert signed_headers(b"k", "m1", 5, b"{}")["webhook-signature"].startswith("v1,")
