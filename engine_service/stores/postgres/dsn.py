"""What the PostgreSQL store reads from its URL before it connects: whether libpq can parse
it (:func:`check_dsn`), and the NOTIFY channel of the schema it names (:func:`channel_for`).
"""

from __future__ import annotations

import psycopg
from psycopg.conninfo import conninfo_to_dict

__all__ = ["CHANNEL", "channel_for", "check_dsn"]

CHANNEL = "agentik"
"""The NOTIFY channel every store of a database signals on."""


def check_dsn(dsn: str) -> None:
    """``ValueError`` when libpq cannot parse ``dsn``.

    libpq's own message may quote the part it choked on, the password included, so it is
    not repeated: the URL is named with its password masked.
    """
    try:
        conninfo_to_dict(dsn)
    except psycopg.Error:
        from engine_service.stores import redacted_url

        raise ValueError(
            f"store URL {redacted_url(dsn)!r} is not a PostgreSQL URL libpq can parse"
            " (postgresql://user:password@host:port/database?option=value, with"
            " special characters percent-encoded)"
        ) from None


def channel_for(dsn: str) -> str:
    """The NOTIFY channel of the store ``dsn`` names: ``agentik``, or ``agentik_<schema>``
    when the DSN sets a ``search_path`` (``options=-csearch_path=...``), so that stores in
    different schemas of one database do not hear each other."""
    options = str(conninfo_to_dict(dsn).get("options") or "")
    for option in options.split():
        name, _, value = option.removeprefix("-c").partition("=")
        if name.strip() == "search_path" and value.strip():
            schema = value.split(",")[0].strip().strip('"')
            return f"{CHANNEL}_{schema}"[:63]
    return CHANNEL
