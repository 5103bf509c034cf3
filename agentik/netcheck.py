"""The checks a command runs before it listens: whether the address is already taken,
whether it would be open to anyone with no authentication (not loopback). Each stops the
start with a :class:`~agentik.config.ConfigError` naming the setting, before any server
binds (``agentik engine``, ``agentik serve``, ``agentik web`` and its gunicorn config)."""

from __future__ import annotations

import errno
import socket

from agentik.addresses import is_loopback
from agentik.config import ConfigError, Settings

__all__ = ["AddressInUse", "refuse_open_exposure", "refuse_taken_address"]


class AddressInUse(ConfigError):
    """Another program (another agentik, or anything else) listens on the address."""

    kind = "cannot listen"


def refuse_taken_address(addr: str, what: str, env: str) -> None:
    """``AddressInUse`` naming the setting when ``HOST:PORT`` is already taken: found
    before any server starts, instead of a bind traceback."""
    host, _, port = addr.rpartition(":")
    if not port.isdigit() or int(port) == 0:
        return
    host = host.strip("[]")
    probe = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, int(port)))
    except OSError as exc:  # others (a host that does not resolve here) are the server's
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            raise AddressInUse(
                f"{addr} is already in use by another program, so the {what} cannot listen "
                f"there (`ss -ltnp 'sport = :{port}'` names it: another agentik, or anything "
                f"else); stop it, or set {env} to another address"
            ) from None
    finally:
        probe.close()


def refuse_open_exposure(settings: Settings, addr: str, what: str) -> None:
    """``ConfigError`` when ``what`` would listen on ``addr`` beyond loopback with no
    authentication, unless the operator said that is intended."""
    if settings.auth_enabled or settings.auth.allow_anonymous or is_loopback(addr):
        return
    raise ConfigError(
        f"the {what} would listen on {addr} with no authentication: anyone who can reach it "
        'could read and change every conversation. Set AGENTIK_TOKENS="name:token,..." '
        "(or [[auth.tokens]] / jwt_key_file in [auth]), listen on 127.0.0.1, or set "
        "AGENTIK_ALLOW_ANONYMOUS=true if a proxy in front authenticates callers"
    )
