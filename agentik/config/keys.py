"""Every key of every table, read from the models' fields: its table, its setting name
(``flat``) and its environment variable; :data:`SETTINGS` are the keys that hold one value
(not an array of tables)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from agentik.config.a2a import A2A_AGENTS_ENV
from agentik.config.errors import ConfigError
from agentik.config.settings import Settings
from agentik.config.values import convert

__all__ = ["CONFIG_ENV", "KEYS", "SETTINGS", "TABLES", "Key", "setting_env_names"]

CONFIG_ENV = "AGENTIK_CONFIG"


@dataclass(frozen=True, slots=True)
class Key:
    """One key of one table, from its field."""

    table: str
    key: str
    kind: str
    meta: Mapping[str, Any]

    @property
    def flat(self) -> str:
        return str(self.meta["flat"] or self.key)

    @property
    def env(self) -> str:
        return str(self.meta.get("env") or f"AGENTIK_{self.flat.upper()}")

    def parse(self, raw: object, env: bool, origin: str) -> object:
        try:
            return convert(self.kind, self.meta, raw, env)
        except ValueError as exc:
            shown = "(hidden)" if self.meta.get("secret") else repr(raw)
            raise ConfigError(f"invalid {self.flat} (from {origin}): {exc}; got {shown}") from None


TABLES: dict[str, type[Any]] = {f.name: f.default_factory for f in fields(Settings)}  # type: ignore[misc]
KEYS = [Key(t, f.name, str(f.type), f.metadata) for t, m in TABLES.items() for f in fields(m)]
SETTINGS = [key for key in KEYS if "table" not in key.meta]


def setting_env_names() -> list[str]:
    """The environment variable of every setting, and ``AGENTIK_CONFIG``'s and
    ``AGENTIK_A2A_AGENTS``' (the file, and the remote agents as ``NAME=URL,...``)."""
    return [CONFIG_ENV, A2A_AGENTS_ENV, *(key.env for key in SETTINGS)]
