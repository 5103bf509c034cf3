"""The keys of the settings' tables and the one converter that reads each value.

A key is a dataclass field made by :func:`setting` (or :func:`table` for an array of
tables): its metadata holds its environment variable, its setting name and its checks, and
:func:`convert` reads a raw value (TOML's, or an environment variable's string) by the
field's type and those checks."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import MISSING, field
from typing import Any

__all__ = ["NAME", "MiB", "convert", "setting", "table"]

NAME = re.compile(r"^[A-Za-z0-9_-]+$")  # a server's or agent's name, part of tool names
MiB = 1024 * 1024
_BOOLEANS = ("1", "true", "yes", "on", "0", "false", "no", "off")
_KINDS = ("bool", "int", "float", "str", "tuple[str, ...]")


def setting(default: Any = MISSING, env: str = "", *, flat: str = "", **meta: Any) -> Any:
    """A key of a table: its default, environment variable, setting name (``flat``, default
    the key) and checks: ``lo``/``hi`` bounds (an int's ``lo`` defaults to 1; a float is
    positive unless ``lo=0``), ``choices``, ``name`` (at most this many of ``[A-Za-z0-9_-]``),
    ``pattern`` (a regular expression the whole string matches, else ``why``), ``each`` (a
    function of each string of an array), ``check`` (a function of the typed value, or of
    ``(raw, from_env)`` for other types), ``noun`` (what an array holds), ``strip=False``,
    ``required`` (no empty string), ``secret`` (masked, not in ``repr``), ``doc`` (if it fits)."""
    meta.update(env=env, flat=flat)
    return field(default=default, repr=not meta.get("secret"), metadata=meta)


def table(reader: Callable[..., tuple[Any, ...]], flat: str, engine_only: bool = True) -> Any:
    """``[[...]]`` read by ``reader(raw, where, env, engine)``; ``engine_only``: facade skips it."""
    return field(default=(), metadata={"table": reader, "flat": flat, "engine_only": engine_only})


def convert(kind: str, meta: Mapping[str, Any], raw: Any, env: bool, entry: bool = False) -> Any:
    """``raw`` (a str if ``env``, else TOML's) as ``kind``, checked by ``meta``; else ValueError."""
    base, check = kind.removesuffix(" | None"), meta.get("check")
    if base not in _KINDS:  # a structured value: its check reads it
        if not check:
            raise TypeError(f"a setting of type {kind} needs a check")
        return check(raw, env)
    name = type(raw).__name__
    if base == "bool":
        text = raw.strip().lower() if env and isinstance(raw, str) else None
        if not isinstance(raw, bool) and text not in _BOOLEANS:
            raise ValueError("must be true or false" + ("" if env else f", not {name}"))
        return raw if isinstance(raw, bool) else text in _BOOLEANS[:4]
    if base in ("int", "float"):
        what = meta.get("what", "an integer" if base == "int" else "a number of seconds")
        number_type = int if base == "int" else float  # TOML's int is a float too
        if not env and (isinstance(raw, bool) or not isinstance(raw, (int, number_type))):
            raise ValueError(f"must be {what}, not {name}")
        try:
            number = number_type(raw.strip() if env else raw)
        except ValueError:
            raise ValueError(f"must be {what}") from None
        lo, hi = meta.get("lo", 1 if base == "int" else None), meta.get("hi")
        if base == "int":
            if hi is not None and not lo <= number <= hi:
                raise ValueError(f"must be between {lo} and {hi} bytes")
            if number < lo:
                raise ValueError("must be positive" if lo == 1 else f"must be at least {lo}")
        elif not math.isfinite(number):
            raise ValueError("must be a finite number")
        elif hi is not None and not 0 < number <= hi:
            raise ValueError(f"must be more than 0 and at most {hi} ({hi} = no limit)")
        elif number < 0 or (number == 0 and lo is None):
            positive = "must be a positive number of seconds" if entry else "must be positive"
            raise ValueError("must not be negative" if lo == 0 else positive)
        return check(number) if check else number
    if base == "str":
        if not isinstance(raw, str):
            raise ValueError(f"must be a string, not {name}")
        text = raw.strip() if meta.get("strip", True) else raw
        if not text.strip() and meta.get("required", entry):
            raise ValueError("must not be empty")
        if choices := meta.get("choices"):
            text = text.upper() if choices[0].isupper() else text.lower()
            if text not in choices:
                raise ValueError(f"must be one of {', '.join(choices)}")
        if not text.strip() and kind != base:
            return None
        if (limit := meta.get("name")) and text and (not NAME.match(text) or len(text) > limit):
            raise ValueError(f"must be 1 to {limit} characters of A-Z a-z 0-9 _ -")
        if (pattern := meta.get("pattern")) and text and not re.fullmatch(pattern, text):
            raise ValueError(meta.get("why", f"must match {pattern}"))
        return check(text) if check and text else text
    items = [i.strip() for i in raw.split(",") if i.strip()] if env else raw
    noun, one, choices = meta.get("noun", "strings"), meta.get("item", "item"), meta.get("choices")
    if not isinstance(items, list):
        raise ValueError(f"must be an array of {noun}, not {name}")
    if odd := [type(item).__name__ for item in items if not isinstance(item, str)]:
        raise ValueError(f"must be an array of {noun}; every {one} must be a string, not {odd[0]}")
    strings = tuple(dict.fromkeys(meta.get("each", str)(item.strip()) for item in items))
    if choices and (bad := [item for item in strings if item not in choices]):
        raise ValueError(f"{bad[0]!r} is not one of {', '.join(choices)}")
    return check(strings) if check else strings
