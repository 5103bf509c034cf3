"""The A2A agent card: who this agent is and where peers reach it, built from settings
alone, free of any transport, so every binding serves the same card: the facade's JSON-RPC
and HTTP+JSON (``web_facade/a2a/routes.py``: the public cards, and the extended card) and the
engine's gRPC binding (``engine_service/a2a/servicer.py``: ``GetExtendedAgentCard``).

The card is built from configuration (``Settings``: ``public_url``, ``agent_name``,
``agent_description``, ``agent_version``, ``agent_skills``; the ``[a2a]`` TOML section or
``AGENTIK_PUBLIC_URL``, ``AGENTIK_AGENT_*``), never from the address the facade binds:
behind a proxy that address is not what peers can reach. Without a public URL the card names
the URL each request came to — only while the facade listens on loopback (development);
off loopback it is not served until a public URL is set, so a forged ``Host`` header can
never put a stranger's URL in it.

With authentication on, the card declares the bearer scheme (``securitySchemes`` and
``securityRequirements``) peers must use; the card itself stays public.

The authenticated extended card (``GetExtendedAgentCard``, declared by
``capabilities.extendedAgentCard``) is the same card plus what only callers the engine
accepts see: the skills configured with ``extended = true``, and one skill per tool the agent
may call (:func:`extended_card_body`). With ``[a2a] card_signing_key`` set every card,
public or extended, carries a JWS signature (``signatures``, :mod:`agentik.a2a.signing`).

The card lists one JSON-RPC interface per protocol version it speaks (1.0 and 0.3, same
URL), the HTTP+JSON interface (1.0) at ``{url}/a2a`` (an agent's: its ``/a2a/{agent}``), and
the engine's A2A gRPC binding when ``[a2a] grpc_url`` says where peers reach it. It comes in
two shapes (:func:`card_shape` picks one per request): the strict A2A 1.0 card, which the 1.0
JSON schema accepts (no field it does not name, so none of 0.3's), and the 0.3 card — the 1.0
card plus the 0.3 fields (``url``, ``protocolVersion``,
``preferredTransport``, ``security``, the 0.3 form of each security scheme) — for peers that
ask for A2A 0.3.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Final, Literal

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

from agentik import __version__
from agentik.a2a.signing import CardSigner, load_signer
from agentik.addresses import is_loopback
from agentik.config import ConfigError, Settings

__all__ = [
    "CARD_MAX_AGE",
    "INPUT_MODES",
    "JWKS_PATH",
    "OUTPUT_MODES",
    "SECURITY_SCHEME",
    "CardConfig",
    "CardShape",
    "agent_card_config",
    "card_body",
    "card_config",
    "card_shape",
    "check_cards",
    "endpoint_config",
    "extended_card",
    "extended_card_body",
    "grpc_interfaces",
    "http_json_interface",
    "skills_of",
]

CardShape = Literal["1.0", "0.3"]
"""The strict A2A 1.0 card, or the 1.0 card with the 0.3 fields beside."""

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


def _whole_seconds(moment: datetime) -> datetime:
    """``moment`` at HTTP-date precision, so ``If-Modified-Since`` compares exactly."""
    return moment.replace(microsecond=0)


@dataclass(frozen=True, slots=True)
class CardConfig:
    """The configured parts of the card."""

    public_url: str
    name: str
    description: str
    version: str
    skills: tuple[AgentSkill, ...]
    """The skills every card shows."""
    extended_skills: tuple[AgentSkill, ...] = ()
    """The skills only the authenticated extended card shows (``extended = true``)."""
    auth: str = ""
    """"" when callers need no credentials, else the bearer format ("opaque" or "JWT")."""
    reflect_host: bool = True
    """Without a public URL: whether the request's own URL may stand in for it."""
    http_json_path: str = "a2a"
    """Where the HTTP+JSON binding is below the card's URL: ``a2a`` for the root card
    (``/a2a/message:send``), "" for an agent's card, whose URL is already ``/a2a/{agent}/``."""
    grpc_url: str = ""
    """Where peers reach the engine's A2A gRPC binding (``[a2a] grpc_url``); "": not listed."""
    tenant: str = ""
    """The agent a per-agent card is of: the gRPC interface's ``tenant`` ("": the default)."""
    modified: datetime = field(default_factory=lambda: _whole_seconds(datetime.now(UTC)))
    """When these settings were read: the card's ``Last-Modified``. The card is built from
    them alone and they are read once per process, so it cannot have changed later."""
    signer: CardSigner | None = None
    """Signs every card (``[a2a] card_signing_key``); None: cards go unsigned."""
    jwks_url: str = ""
    """Where the signing key's JWK Set is served (``{public_url}.well-known/jwks.json``);
    "" without a public URL."""


Skills = tuple[tuple[AgentSkill, ...], tuple[AgentSkill, ...]]
"""The skills every card shows, and those only the extended card shows."""


def skills_of(
    configured: tuple[dict[str, Any], ...] | None, tag: str = "", setting: str = "agent_skills"
) -> Skills:
    """The configured skills (or the one chat skill), split by their ``extended`` flag.

    A skill without ``tags`` (the card's schema requires at least one) is tagged ``tag``
    (the agent's name), else ``general``. ``ConfigError`` names a skill the card cannot
    carry by ``setting``, its place and its id."""
    public: list[AgentSkill] = []
    extended: list[AgentSkill] = []
    for index, item in enumerate(configured or (_DEFAULT_SKILL,)):
        table = dict(item)
        about = f"invalid {setting}[{index}]"
        named = f" (skill {str(table.get('id', ''))[:64]!r})"
        hidden = table.pop("extended", False)
        if not isinstance(hidden, bool):
            raise ConfigError(f"{about}: extended must be true or false{named}")
        if table.get("tags") in (None, [], ()):  # absent or empty: the schema needs one
            table["tags"] = [tag or "general"]
        try:
            skill = json_format.ParseDict(table, AgentSkill())
        except json_format.ParseError as exc:
            raise ConfigError(f"{about}: {exc}{named}") from None
        if any(not item.strip() for item in skill.tags):
            raise ConfigError(f"{about}: every tag must be a non-empty string{named}")
        (extended if hidden else public).append(skill)
    if not public:
        raise ConfigError(
            f"invalid {setting}: every skill is extended = true; the public card needs at least one"
        )
    return tuple(public), tuple(extended)


JWKS_PATH: Final = "/.well-known/jwks.json"
"""Where the facade serves the card signing key's JWK Set."""


def jwks_url(public_url: str) -> str:
    """The JWK Set's URL under ``public_url`` ("" without one)."""
    return public_url.rstrip("/") + JWKS_PATH if public_url else ""


def card_config(settings: Settings) -> CardConfig:
    """The card's settings; ``ConfigError`` names a skill the card cannot carry."""
    public, extended = skills_of(settings.a2a.skills, settings.a2a.name)
    return CardConfig(
        public_url=settings.a2a.public_url,
        name=settings.a2a.name,
        description=settings.a2a.description or _DEFAULT_DESCRIPTION,
        version=settings.a2a.version or __version__,
        skills=public,
        extended_skills=extended,
        auth=("JWT" if settings.auth.jwt_key_file else "opaque") if settings.auth_enabled else "",
        reflect_host=is_loopback(settings.web.http_addr),
        grpc_url=settings.a2a.grpc_url,
        signer=load_signer(settings.a2a.card_signing_key),
        jwks_url=jwks_url(settings.a2a.public_url),
    )


def agent_card_config(settings: Settings, name: str, root: CardConfig) -> CardConfig:
    """The card settings of agent ``name``: ``root`` (the server's card settings) with the
    agent's name, description and skills (``[[agents]]``: its ``skills``, else one chat
    skill with its ``examples``). The default agent without an ``[[agents]]`` entry keeps
    the root card's. The agent's name is the ``tenant`` of its card's gRPC interface."""
    own = next((a for a in settings.agent.agents if a.name == name), None)
    if own is None:
        return root
    configured = own.skills
    if configured is None:
        configured = (
            {
                "id": "chat",
                "name": own.name,
                "description": own.description or f"Answers messages as the agent {own.name}.",
                "tags": ["chat"],
                "examples": list(own.examples),
            },
        )
    elif own.examples:
        configured = tuple({"examples": list(own.examples), **skill} for skill in configured)
    public, extended = skills_of(configured, own.name, f"agents.{own.name}.skills")
    return replace(
        root,
        tenant=own.name,
        name=own.name,
        description=own.description or root.description,
        skills=public,
        extended_skills=extended,
    )


def endpoint_config(settings: Settings, root: CardConfig, agent: str) -> CardConfig:
    """The settings of the card at ``agent``'s endpoint ``/a2a/{agent}/`` ("": the root
    card, the default agent's): its URL (with a public URL) is the endpoint's, where its
    HTTP+JSON binding is too."""
    if not agent:
        return root
    config = replace(agent_card_config(settings, agent, root), http_json_path="")
    if config.public_url:
        config = replace(config, public_url=f"{config.public_url.rstrip('/')}/a2a/{agent}/")
    return config


def check_cards(settings: Settings) -> CardConfig:
    """The root card's settings, once every agent's card is checked: ``ConfigError`` at
    start names the agent and the skill a card could not carry, rather than a failed
    request later."""
    root = card_config(settings)
    for agent in settings.agent.agents:
        agent_card_config(settings, agent.name, root)
    return root


def grpc_interfaces(config: CardConfig) -> list[AgentInterface]:
    """The engine's A2A gRPC binding, when its public address is configured; a request's
    ``tenant`` names the agent (docs/a2a.md#the-grpc-binding)."""
    if not config.grpc_url:
        return []
    return [
        AgentInterface(
            url=config.grpc_url,
            protocol_binding="GRPC",
            protocol_version="1.0",
            tenant=config.tenant,
        )
    ]


def _card(config: CardConfig, url: str) -> AgentCard:
    card = AgentCard(
        name=config.name,
        description=config.description,
        version=config.version,
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="0.3"),
            http_json_interface(config, url),
            *grpc_interfaces(config),
        ],
        capabilities=AgentCapabilities(
            streaming=True, push_notifications=True, extended_agent_card=True
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


def http_json_interface(config: CardConfig, url: str) -> AgentInterface:
    """The HTTP+JSON binding's interface (``web_facade.a2a.rest``) for the card at ``url``."""
    base = url.rstrip("/")
    if config.http_json_path:
        base = f"{base}/{config.http_json_path}"
    return AgentInterface(url=base, protocol_binding="HTTP+JSON", protocol_version="1.0")


_ASKED_VERSION: Final = re.compile(r"^\s*(\d{1,4})(?:\.(\d{1,4}))?(?:\.\d{1,4})?\s*$")


def card_shape(asked: str | None, *, legacy_path: bool) -> CardShape:
    """The shape of card a request gets, from the A2A version it asks for (its
    ``A2A-Version`` query parameter, else its ``A2A-Version`` header) and its path.

    At ``/.well-known/agent-card.json`` the card is the strict 1.0 card unless the request
    asks for 0.3 (``0.3`` or ``0.3.x``). ``/.well-known/agent.json`` is the older path (A2A
    before 0.3.0), and there, as for every A2A request without a version, no version means
    0.3; asking for 1.x gets the 1.0 card. A version this agent does not
    speak is not refused — the card is how a peer learns which ones it does — and gets the
    path's default.
    """
    match = _ASKED_VERSION.match(asked or "")
    if match is not None:
        major, minor = int(match[1]), int(match[2] or 0)
        if (major, minor) == (0, 3):
            return "0.3"
        if major == 1:
            return "1.0"
    return "0.3" if legacy_path else "1.0"


def _tool_skill(tool: str) -> AgentSkill:
    return AgentSkill(
        id=f"tool:{tool}",
        name=tool,
        description=f"Calls the tool {tool} while it answers.",
        tags=["tool"],
    )


def _encode(card: AgentCard, config: CardConfig, shape: CardShape) -> tuple[bytes, str]:
    """The card's JSON in ``shape`` (signed when a key is set) and its ETag.

    The ETag is taken before the signature, from the card and the key's id: an ECDSA
    signature differs at each signing (and between workers), the card it signs does not.
    A signed card's ETag is weak (the same card, not the same bytes)."""
    unsigned = json.dumps(json_format.MessageToDict(card), separators=(",", ":"))
    kid = config.signer.kid if config.signer is not None else ""
    etag = hashlib.sha256(f"{shape}\n{kid}\n{unsigned}".encode()).hexdigest()[:32]
    if config.signer is not None:
        jku = config.jwks_url
        config.signer.sign(card, jku)
        etag = f"W/{etag}"
    # The 0.3 shape is the SDK's own server's merge: it adds the 0.3 fields and, inside each
    # security scheme, the 0.3 form beside the 1.0 one, so 0.3 and 1.0 parsers both read it.
    if shape == "1.0":
        body = json_format.MessageToDict(card)
    else:
        # The SDK's server stack (~20 MB) is loaded only when a 0.3 peer asks.
        from a2a.server.request_handlers.response_helpers import agent_card_to_dict

        body = agent_card_to_dict(card)
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode(), etag


def card_body(config: CardConfig, request_url: str, shape: CardShape) -> tuple[bytes, str]:
    """The card's JSON in ``shape`` and its ETag (one per body, so one per shape; ``W/``
    before a weak one); ``request_url`` serves only when no public URL is set."""
    return _encode(_card(config, config.public_url or request_url), config, shape)


def _extended(config: CardConfig, url: str, tools: tuple[str, ...]) -> AgentCard:
    card = _card(config, url)
    card.skills.extend(config.extended_skills)
    card.skills.extend(_tool_skill(tool) for tool in tools)
    return card


def extended_card(config: CardConfig, url: str, tools: tuple[str, ...]) -> AgentCard:
    """The authenticated extended card at ``url`` (signed when a key is set): the public
    card plus the extended skills and one skill per tool (``tool:NAME``)."""
    card = _extended(config, url, tools)
    if config.signer is not None:
        config.signer.sign(card, config.jwks_url)
    return card


def extended_card_body(
    config: CardConfig, request_url: str, shape: CardShape, tools: tuple[str, ...]
) -> tuple[bytes, str]:
    """The authenticated extended card (:func:`extended_card`): its JSON in ``shape`` and
    its ETag as :func:`card_body`."""
    return _encode(_extended(config, config.public_url or request_url, tools), config, shape)
