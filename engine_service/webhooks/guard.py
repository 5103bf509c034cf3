"""The SSRF guard on every outgoing webhook.

A webhook URL comes from a caller; without a guard it lets that caller make the engine
POST to whatever the engine can reach (the cloud's metadata service, a database's admin
port on localhost, the private network). So:

- the scheme is https (plain http only with ``[webhooks] allow_private``);
- every address the host resolves to must be public: loopback, private, link-local,
  shared (CGNAT), multicast, reserved and unspecified addresses are refused, and the cloud
  metadata addresses always, even with ``allow_private``;
- the check is made at connect time on the resolved addresses, and the connection goes to
  the checked address (the Host header and TLS SNI carry the name): a name that resolves
  to a public address when registered and to a private one later (DNS rebinding) is
  refused when it matters;
- redirects are not followed (``sender``).

``check_url`` is the check at registration, without DNS: what is clearly refused (a
scheme, an address literal, credentials in the URL) is refused at once, naming why.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = [
    "MAX_URL_CHARS",
    "Resolver",
    "Target",
    "WebhookRefused",
    "address_refusal",
    "check_url",
    "resolve_checked",
    "system_resolver",
]

MAX_URL_CHARS = 2048

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_METADATA = frozenset(
    ipaddress.ip_address(text)
    for text in ("169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254")
)
"""Cloud metadata services (AWS, ECS, Alibaba, AWS over IPv6): refused even when private
addresses are allowed."""

Resolver = Callable[[str, int], Awaitable[list[str]]]
"""Host and port → the addresses to try, as text (injectable for tests)."""


class WebhookRefused(ValueError):
    """A webhook URL the guard refuses; the message says why, in the caller's words."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where one request goes: the URL's parts and the checked address to connect to."""

    scheme: str
    host: str
    """The name as written (the Host header and TLS SNI)."""
    port: int
    path: str
    """Path and query, as the request line carries them."""


def address_refusal(address: IPAddress, *, allow_private: bool) -> str:
    """Why a webhook may not go to ``address`` (empty when it may)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address in _METADATA:
        return "a cloud metadata address"
    if address.is_unspecified:
        return "an unspecified address"
    if address.is_multicast:
        return "a multicast address"
    if allow_private:
        return ""
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_private:
        return "a private address"
    if not address.is_global:
        return "a reserved address"
    return ""


def check_url(url: str, *, allow_private: bool) -> Target:
    """The parts of a webhook URL; ``WebhookRefused`` naming why it is refused."""
    if len(url) > MAX_URL_CHARS:
        raise WebhookRefused(f"the webhook URL is longer than {MAX_URL_CHARS} characters")
    if any(ch.isspace() or ord(ch) < 0x20 for ch in url):
        raise WebhookRefused("the webhook URL holds whitespace or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise WebhookRefused(f"the webhook URL is not a valid URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http"):
        raise WebhookRefused("the webhook URL must use https")
    if scheme == "http" and not allow_private:
        raise WebhookRefused(
            "the webhook URL must use https (plain http only with [webhooks] allow_private)"
        )
    if parts.username is not None or parts.password is not None:
        raise WebhookRefused("the webhook URL must not hold credentials; use authentication")
    host = parts.hostname or ""
    if not host:
        raise WebhookRefused("the webhook URL names no host")
    if not host.isascii():  # an internationalised name: its ASCII (IDNA) form goes on the wire
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            raise WebhookRefused("the webhook URL's host is not a valid name") from None
    try:
        literal: IPAddress | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None and (why := address_refusal(literal, allow_private=allow_private)):
        raise WebhookRefused(f"the webhook URL's host is {why}")
    if literal is None and not allow_private and host.rstrip(".").lower() == "localhost":
        raise WebhookRefused("the webhook URL's host is a loopback address")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return Target(scheme, host, port or (443 if scheme == "https" else 80), path)


async def system_resolver(host: str, port: int) -> list[str]:
    """The addresses the system resolves ``host`` to, in its order, without duplicates."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def resolve_checked(
    target: Target, *, allow_private: bool, resolver: Resolver = system_resolver
) -> list[str]:
    """The addresses to connect to for ``target``, each checked: ``WebhookRefused`` when
    any of them is refused (a name that also resolves to a private address is refused
    whole: which one a connection would take is not ours to choose) or none resolves."""
    try:
        literal: IPAddress | None = ipaddress.ip_address(target.host)
    except ValueError:
        literal = None
    if literal is not None:
        texts = [str(literal)]
    else:
        try:
            texts = await resolver(target.host, target.port)
        except (OSError, UnicodeError):
            raise WebhookRefused(f"the webhook host {target.host!r} does not resolve") from None
    if not texts:
        raise WebhookRefused(f"the webhook host {target.host!r} does not resolve")
    for text in texts:
        try:
            address = ipaddress.ip_address(text.split("%", 1)[0])
        except ValueError:
            raise WebhookRefused(
                f"the webhook host {target.host!r} resolves to something not an address"
            ) from None
        if why := address_refusal(address, allow_private=allow_private):
            raise WebhookRefused(f"the webhook host {target.host!r} resolves to {why}")
    return texts
