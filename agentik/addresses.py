"""Network addresses: listen addresses (``HOST:PORT``) and gRPC targets the facade dials, whether
one is loopback, what a client here dials, a URL as logs show it. A bad address is a ``ValueError``
saying why; :mod:`agentik.config` reports it naming the setting (``[engine] grpc_addr``, ...)."""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

__all__ = ["check_address", "check_target", "dialable", "display_url", "is_loopback", "valid_host"]

_WILDCARD_HOSTS = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]"}
_WHY_IPV4 = "must be A.B.C.D:PORT with an IPv4 address (a host name goes in dns:///HOST:PORT)"
_HOSTNAME = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,251}[A-Za-z0-9_])?$")


def valid_host(host: str) -> bool:
    """Whether ``host`` is a host name or an IPv4 address (not an IPv6 one)."""
    if host.replace(".", "").isdigit():
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return False
    return bool(_HOSTNAME.match(host))


def check_address(value: str, lowest: int = 0) -> str:
    """``HOST:PORT`` or ``[IPv6]:PORT``, the port from ``lowest`` to 65535."""
    if value.startswith("["):
        inside, sep, port = value[1:].partition("]:")
        try:
            ipaddress.IPv6Address(inside)
        except ValueError:
            raise ValueError("must be HOST:PORT with a valid IPv6 address in brackets") from None
    else:
        host, sep, port = value.rpartition(":")
        if ":" in host:
            raise ValueError("must be HOST:PORT; put an IPv6 address in brackets, [::1]:PORT")
        if not valid_host(host):
            raise ValueError("must be HOST:PORT with a valid host name or IP address")
    if not sep or not port.isascii() or not port.isdigit():
        raise ValueError("must be HOST:PORT, e.g. 127.0.0.1:50051")
    if not lowest <= int(port) <= 65535:
        raise ValueError(f"port must be between {lowest} and 65535")
    return value


_TARGET_FORMS = (
    "HOST:PORT, [IPv6]:PORT, ipv4:A.B.C.D:PORT,A.B.C.D:PORT,..., "
    "ipv6:[IPv6]:PORT,[IPv6]:PORT,..., dns:///HOST:PORT, dns://RESOLVER/HOST:PORT, "
    "unix:PATH or unix:///ABSOLUTE/PATH"
)


def _bad_target(why: str) -> ValueError:
    return ValueError(f"{why}; use {_TARGET_FORMS}")


def _part(text: str, what: str = "") -> str:
    try:
        return check_address(text, 1)
    except ValueError as exc:
        where = f"{what} {text!r}: " if what else ""
        raise ValueError(f"{where}{exc}; a target is one of {_TARGET_FORMS}") from None


def check_target(value: str) -> str:
    """A gRPC target the facade dials, each address with its port (several: docs/scaling.md)."""
    if any(c.isspace() for c in value) or not value.isascii() or not value.isprintable():
        raise _bad_target("must not contain spaces or non-ASCII characters")
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*):", value)
    scheme = match[1].lower() if match else ""
    rest = value[len(scheme) + 1 :]
    if scheme in ("ipv4", "ipv6"):
        if not rest:
            raise _bad_target(f"{scheme}: needs at least one address")
        for item in rest.split(","):
            ipv6, (host, sep, port) = scheme == "ipv6", item.rpartition(":")
            if not item:
                raise _bad_target(f"{scheme}: has an empty entry (a stray comma)")
            if ipv6 and not (sep and host.startswith("[") and host.endswith("]")):
                raise _bad_target(f"ipv6: entry {item!r} must be [IPv6]:PORT, e.g. [::1]:50051")
            try:
                ipaddress.IPv6Address(host[1:-1]) if ipv6 else ipaddress.IPv4Address(host)
            except ValueError:
                why = "has no valid IPv6 address" if ipv6 else _WHY_IPV4
                raise _bad_target(f"{scheme}: entry {item!r} {why}") from None
            if not sep or not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
                raise _bad_target(f"{scheme}: entry {item!r} needs a port between 1 and 65535")
    elif scheme == "dns":
        name = rest
        if rest.startswith("//"):
            authority, slash, name = rest[2:].partition("/")
            if not slash:
                raise _bad_target("dns:// needs dns:///HOST:PORT or dns://RESOLVER/HOST:PORT")
            if authority:
                has_port = "]:" in authority if authority.startswith("[") else ":" in authority
                _part(authority if has_port else f"{authority}:53", "the DNS resolver")
        if not name:
            raise _bad_target("dns: needs HOST:PORT after the scheme")
        _part(name, "dns: name")
    elif scheme == "unix":
        if rest.startswith("//") and not rest.startswith("///"):
            raise _bad_target("unix:// needs an absolute path, unix:///run/agentik.sock")
        path = rest[2:] if rest.startswith("//") else rest
        if not path or path.endswith("/"):
            raise _bad_target("unix: needs the path of a socket file")
    elif "," in value:
        raise _bad_target("a list of addresses needs the ipv4: or ipv6: prefix")
    elif scheme and (rest.startswith("/") or ":" in rest):  # not "localhost:50051"
        raise _bad_target(f"has unknown scheme {scheme!r}")
    else:
        return _part(value)
    return f"{scheme}:{rest}"


def is_loopback(addr: str) -> bool:
    """Whether the listen address ``HOST:PORT`` only accepts connections from this host."""
    host = addr.rpartition(":")[0].strip("[]").lower()
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def dialable(addr: str) -> str:
    """What a client on this host dials for a server on ``addr`` (a wildcard host: loopback)."""
    host, _, port = addr.rpartition(":")
    return f"{_WILDCARD_HOSTS.get(host, host)}:{port}"


def display_url(url: str) -> str:
    """``scheme://host:port/path`` of ``url``: no credentials, query or fragment (for logs)."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname or ''}{port}{parts.path}"
