"""Reading one array-of-tables entry of the config file (``[[mcp.servers]]``,
``[[a2a.agents]]``): typed fields, ``${ENV}`` expansion, and errors that name the entry.

No SDK is imported here: the config loads without the MCP or A2A libraries.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

__all__ = ["NAME", "ConfigTableError", "TableReader", "check_keys", "display_url"]

NAME = re.compile(r"^[A-Za-z0-9_-]+$")
"""What a configured server or agent name may contain (it becomes part of tool names)."""
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


class ConfigTableError(ValueError):
    """An entry is unusable; the message names the entry and the field (``load_settings``
    raises it as a ``ConfigError``; not imported here, so no import runs in a circle)."""


def check_keys(table: Mapping[str, object], known: Sequence[str], label: str) -> None:
    """Refuse a key the entry does not know, suggesting the closest known one."""
    for key in table:
        if key not in known:
            hint = difflib.get_close_matches(key, known, n=1)
            tail = f"; did you mean {hint[0]!r}?" if hint else f"; known: {', '.join(known)}"
            raise ConfigTableError(f"unknown key {key!r} in {label}{tail}")


def display_url(url: str) -> str:
    """``scheme://host:port/path`` of ``url``: no credentials, query or fragment (for logs)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


class TableReader:
    """Reads the fields of one table, raising errors that name it."""

    def __init__(self, table: Mapping[str, object], label: str, env: Mapping[str, str]) -> None:
        self.table = table
        self.label = label
        self.env = env

    def fail(self, key: str, why: str, shown: object = None) -> ConfigTableError:
        got = "" if shown is None else f"; got {shown!r}"
        return ConfigTableError(f"invalid {key} of {self.label}: {why}{got}")

    def string(self, key: str, *, required: bool = False) -> str | None:
        raw = self.table.get(key)
        if raw is None:
            if required:
                raise ConfigTableError(f"{self.label} needs {key!r}")
            return None
        if not isinstance(raw, str):
            raise self.fail(key, f"must be a string, not {type(raw).__name__}")
        if not raw.strip():
            raise self.fail(key, "must not be empty")
        return raw.strip()

    def strings(self, key: str) -> tuple[str, ...] | None:
        raw = self.table.get(key)
        if raw is None:
            return None
        if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
            raise self.fail(key, "must be an array of strings", raw)
        return tuple(raw)

    def name(self, max_length: int) -> str:
        """The entry's ``name``; the label names it from then on."""
        name = self.string("name", required=True) or ""
        if not NAME.match(name) or len(name) > max_length:
            why = f"must be 1 to {max_length} characters of A-Z a-z 0-9 _ -"
            raise self.fail("name", why, name)
        self.label = f"{self.label} ({name!r})"
        return name

    def mapping(self, key: str, *, header_names: bool = False) -> dict[str, str]:
        raw = self.table.get(key)
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            raise self.fail(key, f"must be a table of strings, not {type(raw).__name__}")
        result: dict[str, str] = {}
        for name, value in raw.items():
            if not isinstance(value, str):
                raise self.fail(f"{key}.{name}", f"must be a string, not {type(value).__name__}")
            if header_names and not _HEADER_NAME.match(name):
                raise self.fail(key, "has a name that is not a valid HTTP header name", name)
            if not header_names and (not name or "=" in name or "\0" in name):
                raise self.fail(key, "has an invalid variable name", name)
            expanded = self.expand(f"{key}.{name}", value)
            if header_names and any(c in expanded for c in "\r\n\0"):
                raise self.fail(f"{key}.{name}", "must not contain line breaks or NUL")
            result[name] = expanded
        return result

    def expand(self, key: str, value: str) -> str:
        def lookup(match: re.Match[str]) -> str:
            variable = match[1]
            found = self.env.get(variable)
            if found is None:
                raise self.fail(key, f"names the environment variable {variable!r}, which is unset")
            return found

        return _VARIABLE.sub(lookup, value)

    def url(self, key: str, *, required: bool = False) -> str | None:
        url = self.string(key, required=required)
        if url is None:
            return None
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise self.fail(key, "must be an http:// or https:// URL", url)
        return url

    def seconds(self, key: str) -> float | None:
        raw = self.table.get(key)
        if raw is None:
            return None
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            raise self.fail(key, f"must be a number of seconds, not {type(raw).__name__}")
        value = float(raw)
        if not math.isfinite(value) or value <= 0:
            raise self.fail(key, "must be a positive number of seconds", raw)
        return value
