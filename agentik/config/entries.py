"""Arrays of tables (``[[mcp.servers]]``, ``[[agents]]``, ``[[a2a.agents]]``): each table
read as an entry model by :class:`Entry`, whose errors name the entry and the key; the
array's reader (:func:`array_reader`) bounds the array and keeps names unique; ``${NAME}``
in a value is an environment variable (:func:`expand`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, fields
from typing import Any, TypeVar

from agentik.config.errors import ConfigError, unknown_name
from agentik.config.values import convert

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "HEADERS",
    "MAX_AGENTS",
    "PER_CALL",
    "Entry",
    "array_reader",
    "expand",
    "unique",
]

DEFAULT_CONNECT_TIMEOUT = 10.0
MAX_AGENTS = 256
HEADERS = {"headers": True}  # a table of HTTP headers; ${NAME} is an environment variable
PER_CALL = "seconds per call; None: the engine's [tools] timeout"
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
T = TypeVar("T")


def expand(text: str, env: Mapping[str, str], where: str, empty: bool = True) -> str:
    """Each ``${NAME}`` from ``env``; unset (or empty unless ``empty``): ConfigError(where...)."""

    def lookup(match: re.Match[str]) -> str:
        if (found := env.get(match[1])) is None or not (found or empty):
            raise ConfigError(f"{where}names the environment variable {match[1]!r}, which is unset")
        return found

    return _VARIABLE.sub(lookup, text)


class Entry:
    """One ``[[...]]`` table being read: errors name the entry (its label) and the key."""

    def __init__(self, table: Mapping[str, Any], label: str, env: Mapping[str, str]) -> None:
        self.table, self.label, self.env = table, label, env

    def fail(self, key: str, why: str, shown: object = None) -> ConfigError:
        got = "" if shown is None else f"; got {shown!r}"
        return ConfigError(f"invalid {key} of {self.label}: {why}{got}")

    def name(self, model: type[Any]) -> str:
        """The entry's ``name``, after refusing unknown keys; the label names it from then on."""
        known = [f.name for f in fields(model)]
        if unknown := [key for key in self.table if key not in known]:
            raise unknown_name("key", unknown[0], known, self.label)
        name: str = self.value(model.__dataclass_fields__["name"])
        self.label = f"{self.label} ({name!r})"
        return name

    def read(self, model: type[T], **given: Any) -> T:
        """The entry as ``model``, each field read by its type and metadata; ``given`` as is."""
        values = given if "name" in given else {"name": self.name(model), **given}
        for f in fields(model):  # type: ignore[arg-type]
            if f.name not in values and (value := self.value(f)) is not MISSING:
                values[f.name] = value
        return model(**values)

    def value(self, f: Field[Any]) -> Any:
        raw, meta = self.table.get(f.name), f.metadata
        if raw is None:
            if f.default is MISSING and f.default_factory is MISSING:
                raise ConfigError(f"{self.label} needs {f.name!r}")
            return MISSING
        if str(f.type).startswith("dict["):
            return self.mapping(f.name, raw, meta.get("headers", False))
        try:
            value = convert(str(f.type), meta, raw, False, entry=True)
        except ValueError as exc:
            raise self.fail(f.name, str(exc), None if meta.get("secret") else raw) from None
        if meta.get("expand") and isinstance(value, str):
            value = expand(value, self.env, f"invalid {f.name} of {self.label}: ")
        return value

    def mapping(self, key: str, raw: object, headers: bool) -> dict[str, str]:
        if not isinstance(raw, dict):
            raise self.fail(key, f"must be a table of strings, not {type(raw).__name__}")
        result: dict[str, str] = {}
        for name, value in raw.items():
            if not isinstance(value, str):
                raise self.fail(f"{key}.{name}", f"must be a string, not {type(value).__name__}")
            if headers and not _HEADER_NAME.match(name):
                raise self.fail(key, "has a name that is not a valid HTTP header name", name)
            if not headers and (not name or "=" in name or "\0" in name):
                raise self.fail(key, "has an invalid variable name", name)
            result[name] = expand(value, self.env, f"invalid {key}.{name} of {self.label}: ")
            if headers and any(c in result[name] for c in "\r\n\0"):
                raise self.fail(f"{key}.{name}", "must not contain line breaks or NUL")
        return result


def array_reader(array: str, read: Callable[[Entry, str, bool], Any]) -> Callable[..., Any]:
    """The reader of ``[[array]]``, called with ``(raw, where, env, engine)`` (``where``: the
    quoted file name): each table read by ``read(entry, where, engine)``; names unique."""

    def reader(raw: object, where: str, env: Mapping[str, str], engine: bool) -> tuple[Any, ...]:
        if not isinstance(raw, list):
            raise ConfigError(f"{array} in {where} must be an array of tables ([[{array}]])")
        if len(raw) > MAX_AGENTS:
            raise ConfigError(f"[[{array}]] in {where}: at most {MAX_AGENTS}, got {len(raw)}")
        labels = [f"[[{array}]] entry {n} in {where}" for n in range(1, len(raw) + 1)]
        if bad := [label for label, t in zip(labels, raw, strict=True) if not isinstance(t, dict)]:
            raise ConfigError(f"{bad[0]} must be a table")
        items = [read(Entry(t, labels[n], env), where, engine) for n, t in enumerate(raw)]
        if array == "mcp.servers":
            return unique(items, "server", labels)
        return unique(items, "agent", [f"[[{array}]] in {where}"] * len(items))

    return reader


def unique(items: list[T], noun: str, at: list[str]) -> tuple[T, ...]:
    names = [getattr(item, "name") for item in items]  # noqa: B009
    for index, name in enumerate(names):
        if name in names[:index]:
            raise ConfigError(f"{at[index]}: the {noun} name {name!r} is used twice")
    return tuple(items)
