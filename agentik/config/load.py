"""The settings loaded: the models' defaults, then a TOML file (``path``, else
``AGENTIK_CONFIG``), then the environment; each value read and checked where it is found."""

from __future__ import annotations

import codecs
import difflib
import os
import tomllib
from collections.abc import Mapping

from agentik.config.a2a import A2A_AGENTS_ENV, parse_a2a_agents_env
from agentik.config.agents import read_agents
from agentik.config.entries import expand
from agentik.config.errors import ConfigError, unknown_name
from agentik.config.keys import CONFIG_ENV, KEYS, SETTINGS, TABLES
from agentik.config.settings import Settings

__all__ = ["load_settings"]

_Values = dict[str, dict[str, object]]  # {table: {key: value}}


def _from_toml(path: str, origin: str, env: Mapping[str, str], engine: bool) -> _Values:
    """The file's values, ``{table: {key: value}}``, each read and checked."""
    try:
        with open(path, "rb") as handle:
            document = tomllib.loads(_text(handle.read(), path))
    except FileNotFoundError:
        raise ConfigError(f"config file {path!r} (from {origin}) does not exist") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path!r}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path!r} is not valid TOML: {exc}") from None
    values: _Values = {}
    for name, entries in document.items():
        if name == "agents":  # the top-level [[agents]], kept as [agent] agents
            values.setdefault("agent", {})["agents"] = read_agents(entries, repr(path), env, engine)
            continue
        tables = isinstance(entries, list) and all(isinstance(t, dict) for t in entries)
        if name not in TABLES and not isinstance(entries, dict) and not tables:
            raise _outside_tables(name, path)
        if name not in TABLES:
            raise unknown_name("section", name, [*TABLES, "agents"], repr(path))
        if not isinstance(entries, dict):
            raise ConfigError(f"{name!r} in {path!r} must be a table ([{name}])")
        keys = {key.key: key for key in KEYS if key.table == name}
        for item, raw in entries.items():
            if (key := keys.get(item)) is None:
                if name == "mcp":
                    raise unknown_name("key", f"mcp.{item}", ["mcp.servers"], repr(path))
                raise unknown_name("key", item, [*keys], f"[{name}] of {path!r}")
            origin = f"[{name}] {item} in {path!r}"
            if reader := key.meta.get("table"):
                if key.flat == "agents":
                    raise ConfigError(f"write the agents as [[agents]] tables in {path!r}")
                if engine or not key.meta["engine_only"]:
                    values.setdefault(name, {})[item] = reader(raw, repr(path), env, engine)
                continue
            if key.flat == "auth_tokens" and isinstance(raw, list):  # ${NAME} in the tokens
                where = f"invalid auth_tokens (from {origin}): a token "
                for t in raw:
                    if isinstance(t, dict) and isinstance(t.get("token"), str):
                        t["token"] = expand(t["token"], env, where, empty=False)
            values.setdefault(name, {})[item] = key.parse(raw, False, origin)
    return values


def _text(data: bytes, path: str) -> str:
    """The file's bytes as text: UTF-8, a leading byte-order mark (Windows editors write
    one) dropped; anything else is a ConfigError naming the encoding to save it in."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        why = 'it is UTF-16 (Windows Notepad\'s "Unicode")'
        raise ConfigError(f"config file {path!r} is not UTF-8 text: {why}; save it as UTF-8")
    try:
        return data.removeprefix(codecs.BOM_UTF8).decode("utf-8")
    except UnicodeDecodeError as exc:
        at = f"byte 0x{data[exc.start]:02x} at offset {exc.start}"
        why = f"is not UTF-8 text ({at}); save it as UTF-8"
        raise ConfigError(f"config file {path!r} {why}") from None


def _outside_tables(key: str, path: str) -> ConfigError:
    """A ``key = value`` above every ``[table]`` line: the tables that have such a key."""
    keys = [k for k in KEYS if "table" not in k.meta]
    owners = [f"[{k.table}] {k.key}" for k in keys if k.key == key]
    if not owners:
        close = difflib.get_close_matches(key, sorted({k.key for k in keys}), n=1)
        owners = [f"[{k.table}] {k.key}" for k in keys if close and k.key == close[0]]
    hint = f"did you mean {' or '.join(owners)}?" if owners else "put it under its table's line"
    return ConfigError(f"{key!r} in {path!r} is outside any table: {hint}")


def load_settings(
    path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    mcp: bool = True,
) -> Settings:
    """The settings from defaults, the TOML file (if named) and ``env`` (default os.environ), or a
    ConfigError. ``mcp=False`` (the web facade) skips [[mcp.servers]], [[a2a.agents]] and the
    agents' secrets: an ``${VAR}`` only the engine needs is neither expanded nor required."""
    env = os.environ if env is None else env
    values: _Values = {}
    if path is not None:
        values = _from_toml(os.fspath(path), "the path given", env, mcp)
    elif file := env.get(CONFIG_ENV):
        values = _from_toml(file, f"env {CONFIG_ENV}", env, mcp)
    for key in SETTINGS:
        if raw := env.get(key.env):
            values.setdefault(key.table, {})[key.key] = key.parse(raw, True, f"env {key.env}")
    if mcp and (agents := env.get(A2A_AGENTS_ENV, "").strip()):  # the facade calls none
        values.setdefault("a2a", {})["agents"] = parse_a2a_agents_env(agents)
    return Settings(**{name: model(**values.get(name, {})) for name, model in TABLES.items()})
