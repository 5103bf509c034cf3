"""The SSRF guard on every outgoing webhook.

A webhook URL comes from a caller; without a guard it lets that caller make the engine
POST to whatever the engine can reach (the cloud's metadata service, a database's admin
port on localhost, the private network). So:

- the scheme is https (plain http only with ``[webhooks] allow_private``);
- every address the host resolves to must be public: loopback, private, link-local,
  shared (CGNAT), multicast, reserved and unspecified addresses are refused, and the cloud
  metadata addresses always, even with ``allow_private``. An IPv6 address that carries an
  IPv4 one (IPv4-mapped and -translated, NAT64 ``64:ff9b::/96``, 6to4, Teredo) is judged
  by that IPv4 address too: a NAT64 gateway or 6to4 relay would deliver to it. Deprecated
  and local-use forms (IPv4-compatible ``::a.b.c.d``, site-local ``fec0::/10``, local-use
  NAT64 ``64:ff9b:1::/48``) are refused always: their plain spelling serves any receiver;
- the check is made at connect time on the resolved addresses, and the connection goes to
  the checked address (the Host header and TLS SNI carry the name): a name that resolves
  to a public address when registered and to a private one later (DNS rebinding) is
  refused when it matters;
- redirects are not followed (``sender``).

``check_url`` is the check at registration, without DNS: what is clearly refused (a
scheme, an address literal, credentials in the URL) is refused at once, naming why. A host
the resolver would read as an IPv4 number (``0x7f000001``, ``2130706433``, ``0177.1``,
``127.1``) is read the same way here, and taken only in its dotted-decimal form; ``localhost``
and every ``*.localhost`` name (RFC 6761) are loopback.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
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


def _networks(*texts: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(text) for text in texts)


_SPECIAL = _networks(
    # IANA's IPv4 special-purpose blocks that are not public ("this network", shared, IETF
    # protocol assignments, documentation, the old 6to4 relay anycast, benchmarking, the
    # reserved class E, broadcast) and IPv6's (discard-only, IETF protocol assignments with
    # Teredo, documentation): named here, not left to the Python version's is_global.
    "0.0.0.0/8",
    "100.64.0.0/10",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "192.88.99.0/24",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "240.0.0.0/4",
    "100::/64",
    "2001::/23",
    "2001:db8::/32",
    "3fff::/20",
    "5f00::/16",
)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
"""The well-known NAT64 prefix (RFC 6052): the low 32 bits are the IPv4 address reached."""
_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")
"""IPv4-translated addresses (SIIT, RFC 2765): the low 32 bits are the IPv4 address."""
_COMPATIBLE = ipaddress.IPv6Network("::/96")
"""IPv4-compatible addresses (deprecated by RFC 4291), and ``::`` and ``::1``."""
_DEPRECATED: dict[ipaddress.IPv6Network, str] = {
    ipaddress.IPv6Network("64:ff9b:1::/48"): "a local-use NAT64 address",
    ipaddress.IPv6Network("fec0::/10"): "a deprecated site-local address",
}
"""IPv6 blocks refused even with ``allow_private``: where they lead is the network's own
choice (a local NAT64 prefix embeds IPv4 where its operator likes), and nothing needs them."""


def _embedded_ipv4(address: ipaddress.IPv6Address) -> list[tuple[str, ipaddress.IPv4Address]]:
    """The IPv4 addresses an IPv6 address leads to, each with the name of its form."""
    low = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.ipv4_mapped is not None:
        return [("IPv4-mapped", address.ipv4_mapped)]
    if address in _TRANSLATED:
        return [("IPv4-translated", low)]
    if address in _NAT64:
        return [("NAT64", low)]
    if address.sixtofour is not None:
        return [("6to4", address.sixtofour)]
    if address.teredo is not None:
        server, client = address.teredo
        return [("Teredo", server), ("Teredo", client)]
    if address in _COMPATIBLE and int(address) > 1:
        return [("IPv4-compatible", low)]
    return []


def address_refusal(address: IPAddress, *, allow_private: bool) -> str:
    """Why a webhook may not go to ``address`` (empty when it may)."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        for form, inner in embedded:
            if why := address_refusal(inner, allow_private=allow_private):
                return f"{why} inside an IPv6 address ({form} form)"
        if address in _COMPATIBLE and int(address) > 1:
            return "a deprecated IPv4-compatible IPv6 address; write the IPv4 address"
        for network, why in _DEPRECATED.items():
            if address in network:
                return why
        if embedded and embedded[0][0] != "Teredo":
            return ""  # it leads to that public IPv4 address (a DNS64 host's answer, say)
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
    if any(address in network for network in _SPECIAL):
        return "a reserved address"
    if address.is_private:
        return "a private address"
    if not address.is_global:
        return "a reserved address"
    return ""


_IPV4_NUMBER = re.compile(r"0x[0-9a-f]*|[0-9]+")
"""A label the resolver reads as a number: decimal, octal (a leading 0) or hex (``0x``)."""


def _ipv4_number(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address the resolver reads ``host`` as (``inet_aton``, as URL parsers and
    ``getaddrinfo`` do: one to four numbers, the last filling the remaining bytes, so
    ``127.1`` and ``2130706433`` are 127.0.0.1); None for a name. ``WebhookRefused`` when
    the host ends in a number but is no such address."""
    labels = host.removesuffix(".").split(".")
    if not _IPV4_NUMBER.fullmatch(labels[-1]):
        return None
    invalid = WebhookRefused("the webhook URL's host is neither a name nor a valid IPv4 address")
    if len(labels) > 4 or not all(_IPV4_NUMBER.fullmatch(label) for label in labels):
        raise invalid
    try:
        numbers = [
            int(label[2:] or "0", 16)
            if label.startswith("0x")
            else int(label, 8 if len(label) > 1 and label.startswith("0") else 10)
            for label in labels
        ]
    except ValueError:  # 08: not octal
        raise invalid from None
    *leading, last = numbers
    if any(n > 0xFF for n in leading) or last >= 1 << (8 * (4 - len(leading))):
        raise invalid
    value = last
    for index, number in enumerate(leading):
        value |= number << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


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
        literal = _ipv4_number(host)
    if literal is not None and (why := address_refusal(literal, allow_private=allow_private)):
        raise WebhookRefused(f"the webhook URL's host is {why}")
    if literal is not None and literal.version == 4 and host != str(literal):
        raise WebhookRefused(
            f"the webhook URL's host is an IPv4 address in another form: write it as {literal}"
        )
    name = host.rstrip(".").lower()
    if (
        literal is None
        and not allow_private
        and (name == "localhost" or name.endswith(".localhost"))
    ):
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
