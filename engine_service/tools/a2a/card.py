"""A remote agent's card: read (bounded), checked, made into a client, and described.

The card says who the agent is (its skills become the tool's description) and where to call
it (its interfaces). :func:`read_card` reads it within ``MAX_CARD_BYTES``; :func:`make_client`
keeps the interfaces we can call (JSON-RPC, HTTP+JSON), the configured ``endpoint`` instead
of them when set, and only those on the card's own origin when ``headers`` carry
credentials. :class:`CardError` and :func:`why_card_failed` say in words why a card is
unusable (``agentik tools`` shows them; they name the configured address, so they stay out of
tool results).
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import httpx
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.client.card_resolver import parse_agent_card
from a2a.types import AgentCard, AgentInterface
from google.protobuf import json_format
from google.protobuf.message import Error as ProtobufError

from agentik.config import A2aAgentConfig
from engine_service.tools.a2a.bounded import ResponseTooLarge

__all__ = [
    "MAX_CARD_BYTES",
    "MAX_DESCRIPTION_CHARS",
    "CardError",
    "describe",
    "make_client",
    "read_card",
    "why_card_failed",
]

MAX_CARD_BYTES = 1024 * 1024
MAX_DESCRIPTION_CHARS = 4_000
BINDINGS = ["JSONRPC", "HTTP+JSON"]
"""The protocol bindings a2a-sdk's client calls for us."""


class CardError(Exception):
    """Why a card is unusable, in words for ``agentik tools``."""


async def read_card(http: httpx.AsyncClient, config: A2aAgentConfig) -> AgentCard:
    """The card at ``config.card_url``; :class:`CardError` when it is not one, or too large."""
    headers = {"Accept": "application/json"}
    async with http.stream("GET", config.card_url, headers=headers) as response:
        if response.status_code != 200:
            raise CardError(f"HTTP {response.status_code} from {config.target}")
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > MAX_CARD_BYTES:
                raise CardError(
                    f"the card at {config.target} is larger than {MAX_CARD_BYTES:,} bytes"
                )
    try:
        raw = json.loads(body)
    except ValueError:
        raise CardError(f"{config.target} did not answer JSON") from None
    try:
        return parse_agent_card(raw)
    except (json_format.ParseError, ProtobufError, TypeError, ValueError) as exc:
        raise CardError(f"{config.target} is not a valid agent card: {exc}") from None


def make_client(card: AgentCard, http: httpx.AsyncClient, config: A2aAgentConfig) -> Client:
    """a2a-sdk's client for the interfaces of ``card`` we may call; :class:`CardError` when
    there is none."""
    interfaces = [i for i in card.supported_interfaces if i.protocol_binding in BINDINGS]
    if config.endpoint:
        version = next((i.protocol_version for i in interfaces), "1.0") or "1.0"
        interfaces = [
            AgentInterface(
                url=config.endpoint, protocol_binding="JSONRPC", protocol_version=version
            )
        ]
    elif config.headers:
        # Credentials meant for the card's host go nowhere else.
        ours = origin(config.card_url)
        foreign = [i.url for i in interfaces if origin(i.url) != ours]
        interfaces = [i for i in interfaces if origin(i.url) == ours]
        if not interfaces and foreign:
            raise CardError(
                f"the card names only endpoints on another origin than its own "
                f"({', '.join(origin(url) for url in foreign)}); the configured headers are "
                "not sent there: set 'endpoint' to call one of them"
            )
    if not interfaces:
        raise CardError("the card names no JSON-RPC or HTTP+JSON interface")
    chosen = AgentCard()
    chosen.CopyFrom(card)  # the card as read stays as it was (compared when re-read)
    del chosen.supported_interfaces[:]
    chosen.supported_interfaces.extend(interfaces)
    # An agent that does not stream is asked to answer at once with its task, which is
    # then polled: its id is known from the start, so a timeout or an interrupt can
    # cancel it (a blocking send would name the task only with its final answer).
    client_config = ClientConfig(
        streaming=True,
        polling=not card.capabilities.streaming,
        httpx_client=http,
        supported_protocol_bindings=list(BINDINGS),
    )
    return ClientFactory(client_config).create(chosen)


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url``, the port made explicit."""
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme, 0)
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"


def describe(card: AgentCard) -> str:
    """The tool description the LLM reads: who the agent is and its skills."""
    lines = [f"Ask the remote agent {card.name!r} and get its answer."]
    if card.description:
        lines.append(card.description.strip())
    if card.skills:
        lines.append("Its skills:")
        for skill in card.skills:
            line = f"- {skill.name or skill.id}"
            if skill.description:
                line += f": {skill.description.strip()}"
            if skill.examples:
                line += " (for example: " + "; ".join(repr(e) for e in skill.examples[:3]) + ")"
            lines.append(line)
    text = "\n".join(lines)
    return text if len(text) <= MAX_DESCRIPTION_CHARS else text[: MAX_DESCRIPTION_CHARS - 1] + "…"


def why_card_failed(exc: Exception, config: A2aAgentConfig) -> str:
    """Why reading or using the card failed, for the log and ``agentik tools``."""
    if isinstance(exc, CardError):
        return str(exc)
    if isinstance(exc, ResponseTooLarge):
        return (
            f"the card at {config.target} is larger than {exc.limit:,} bytes "
            "([[a2a.agents]] max_response_bytes)"
        )
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return f"no card within the connect timeout of {config.connect_timeout:g} s"
    if isinstance(exc, httpx.HTTPError):
        return f"cannot reach {config.target}: {exc or type(exc).__name__}"
    if isinstance(exc, ValueError):  # the SDK's client factory: no usable transport
        return f"cannot call the agent: {exc}"
    return f"{type(exc).__name__}: {exc}"
