"""The A2A agent card: who this agent is and where peers reach it.

The card is built from configuration (``Settings``: ``public_url``, ``agent_name``,
``agent_description``, ``agent_version``, ``agent_skills``; the ``[a2a]`` TOML section or
``AGENTIK_PUBLIC_URL``, ``AGENTIK_AGENT_*``), never from the address the facade binds:
behind a proxy that address is not what peers can reach. Without a public URL the card names
the URL each request came to — only while the facade listens on loopback (development);
off loopback it is not served until a public URL is set, so a forged ``Host`` header can
never put a stranger's URL in it.

With authentication on, the card declares the bearer scheme (``securitySchemes`` and
``securityRequirements``) peers must use; the card itself stays public.

The card lists one JSON-RPC interface per protocol version it speaks (1.0 and 0.3, same
URL) and carries the 0.3 top-level fields (``url``, ``protocolVersion``,
``preferredTransport``) too, so 0.3 peers read it as well.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from dataclasses import dataclass
from typing import Any

from a2a.compat.v0_3.conversions import to_compat_agent_card
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
)
from google.protobuf import json_format

from engine_service.config import ConfigError, Settings, is_loopback

__all__ = [
    "CARD_MAX_AGE",
    "INPUT_MODES",
    "OUTPUT_MODES",
    "SECURITY_SCHEME",
    "CardConfig",
    "card_body",
    "card_config",
]

SECURITY_SCHEME = "bearer"
"""The card's name for the one scheme it declares."""

CARD_MAX_AGE = 300
"""Seconds a peer or a shared cache may keep a card built from a configured public URL."""

INPUT_MODES = [
    "text/plain",
    "application/json",
    "image/png",
    "image/jpeg",
    "image/gif",
    "image/webp",
]
"""What a message may carry: text, data parts (passed on as JSON text), images."""
OUTPUT_MODES = ["text/plain"]

_DEFAULT_DESCRIPTION = (
    "An agent runtime: it holds conversations, answers with an LLM that can call tools, "
    "and shares each conversation with its AG-UI and REST clients."
)
_DEFAULT_SKILL: dict[str, Any] = {
    "id": "chat",
    "name": "Chat",
    "description": "Answers messages within a conversation (context), using its tools.",
    "tags": ["chat", "assistant", "tools"],
    "examples": ["What time is it in Tokyo?"],
}


@dataclass(frozen=True, slots=True)
class CardConfig:
    """The configured parts of the card."""

    public_url: str
    name: str
    description: str
    version: str
    skills: tuple[AgentSkill, ...]
    auth: str = ""
    """"" when callers need no credentials, else the bearer format ("opaque" or "JWT")."""
    reflect_host: bool = True
    """Without a public URL: whether the request's own URL may stand in for it."""


def _installed_version() -> str:
    try:
        return importlib.metadata.version("agentik")
    except importlib.metadata.PackageNotFoundError:
        return "0.0.0"


def _skills(configured: tuple[dict[str, Any], ...] | None) -> tuple[AgentSkill, ...]:
    skills = []
    for index, item in enumerate(configured or (_DEFAULT_SKILL,)):
        try:
            skills.append(json_format.ParseDict(dict(item), AgentSkill()))
        except json_format.ParseError as exc:
            raise ConfigError(f"invalid agent_skills[{index}]: {exc}") from None
    return tuple(skills)


def card_config(settings: Settings) -> CardConfig:
    """The card's settings; ``ConfigError`` names a skill the card cannot carry."""
    return CardConfig(
        public_url=settings.public_url,
        name=settings.agent_name,
        description=settings.agent_description or _DEFAULT_DESCRIPTION,
        version=settings.agent_version or _installed_version(),
        skills=_skills(settings.agent_skills),
        auth=("JWT" if settings.jwt_key_file else "opaque") if settings.auth_enabled else "",
        reflect_host=is_loopback(settings.http_addr),
    )


def _card(config: CardConfig, url: str) -> AgentCard:
    card = AgentCard(
        name=config.name,
        description=config.description,
        version=config.version,
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="0.3"),
        ],
        capabilities=AgentCapabilities(
            streaming=True, push_notifications=False, extended_agent_card=False
        ),
        default_input_modes=INPUT_MODES,
        default_output_modes=OUTPUT_MODES,
        skills=config.skills,
    )
    if config.auth:
        scheme = HTTPAuthSecurityScheme(
            scheme="Bearer",
            description="Authorization: Bearer <token>; every method but the card needs it",
        )
        if config.auth == "JWT":
            scheme.bearer_format = "JWT"
        card.security_schemes[SECURITY_SCHEME].CopyFrom(
            SecurityScheme(http_auth_security_scheme=scheme)
        )
        requirement = SecurityRequirement()
        requirement.schemes[SECURITY_SCHEME].SetInParent()
        card.security_requirements.append(requirement)
    return card


def card_body(config: CardConfig, request_url: str) -> tuple[bytes, str]:
    """The card's JSON and its ETag; ``request_url`` serves only when no public URL is set."""
    card = _card(config, config.public_url or request_url)
    body: dict[str, Any] = json_format.MessageToDict(card)
    legacy = to_compat_agent_card(card).model_dump(mode="json", by_alias=True, exclude_none=True)
    for key, value in legacy.items():
        body.setdefault(key, value)  # the 1.0 field wins where both name one
    data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    return data, hashlib.sha256(data).hexdigest()[:32]
