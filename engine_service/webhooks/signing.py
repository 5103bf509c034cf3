"""Standard Webhooks signatures: ``webhook-id``, ``webhook-timestamp`` and
``webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">``.

A secret written ``whsec_<base64>`` is the base64 of the key (the form Standard Webhooks
libraries take); any other secret is used as its UTF-8 bytes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

__all__ = ["signature", "signature_key", "signed_headers"]

PREFIX = "whsec_"


def signature_key(secret: str) -> bytes:
    """The HMAC key a configured secret stands for; ``ValueError`` for a ``whsec_`` secret
    that is not base64."""
    if secret.startswith(PREFIX):
        try:
            return base64.b64decode(secret[len(PREFIX) :], validate=True)
        except binascii.Error:
            raise ValueError(
                "a webhook secret starting with whsec_ must be base64 after it"
            ) from None
    return secret.encode()


def signature(key: bytes, delivery_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64>``: the signature of one request."""
    signed = b"%s.%d.%s" % (delivery_id.encode(), timestamp, body)
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signed_headers(
    key: bytes | None, delivery_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The three headers of a request (no signature without a key)."""
    headers = {"webhook-id": delivery_id, "webhook-timestamp": str(timestamp)}
    if key:
        headers["webhook-signature"] = signature(key, delivery_id, timestamp, body)
    return headers
