"""A remote agent's card: read within its bound, its interfaces chosen, its skills described."""

from __future__ import annotations

import json

import httpx
import pytest
from a2a.types import AgentCard, AgentInterface, AgentSkill

from agentik.config import A2aAgentConfig
from engine_service.tools.a2a.card import (
    MAX_CARD_BYTES,
    MAX_DESCRIPTION_CHARS,
    CardError,
    describe,
    make_client,
    read_card,
    why_card_failed,
)

CARD = {
    "name": "Helper",
    "description": "Answers questions.",
    "version": "1.0",
    "supportedInterfaces": [
        {"url": "http://agents.test/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
    ],
    "capabilities": {"streaming": True},
    "defaultInputModes": ["text/plain"],
    "defaultOutputModes": ["text/plain"],
    "skills": [],
}


def _config(**fields: object) -> A2aAgentConfig:
    return A2aAgentConfig(name="helper", url="http://agents.test", **fields)  # type: ignore[arg-type]


def _http(body: bytes, status: int = 200) -> httpx.AsyncClient:
    """An HTTP client whose every answer is ``body`` (httpx's in-process transport)."""
    return httpx.AsyncClient(
        transport=httpx.MockTransport(lambda _r: httpx.Response(status, content=body))
    )


def _card(*interfaces: tuple[str, str]) -> AgentCard:
    card = AgentCard(name="Helper")
    card.capabilities.streaming = True
    card.supported_interfaces.extend(
        AgentInterface(url=url, protocol_binding=binding, protocol_version="1.0")
        for url, binding in interfaces
    )
    return card


async def test_a_valid_card_is_read() -> None:
    async with _http(json.dumps(CARD).encode()) as http:
        card = await read_card(http, _config())
    assert card.name == "Helper"
    assert card.supported_interfaces[0].url == "http://agents.test/a2a"


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (b"{}", 404, "HTTP 404 from http://agents.test/.well-known/agent-card.json"),
        (b"<html>", 200, "did not answer JSON"),
        (b'{"name": 5}', 200, "is not a valid agent card"),
        (b" " * (MAX_CARD_BYTES + 1), 200, f"is larger than {MAX_CARD_BYTES:,} bytes"),
    ],
)
async def test_what_is_not_a_card_is_refused_with_words(
    body: bytes, status: int, words: str
) -> None:
    async with _http(body, status) as http:
        with pytest.raises(CardError) as refused:
            await read_card(http, _config())
    assert words in str(refused.value)
    assert why_card_failed(refused.value, _config()) == str(refused.value)


async def test_credentials_are_not_sent_to_an_endpoint_on_another_origin() -> None:
    card = _card(("http://elsewhere.test/a2a", "JSONRPC"))
    async with httpx.AsyncClient() as http:
        with pytest.raises(CardError, match="set 'endpoint' to call one of them"):
            make_client(card, http, _config(headers={"Authorization": "Bearer s3cret"}))
        # Without credentials the card's endpoint is called wherever it is.
        assert make_client(card, http, _config()) is not None
        # With an endpoint configured, calls go there, whatever the card says.
        endpoint = _config(
            headers={"Authorization": "Bearer s3cret"}, endpoint="http://agents.test/rpc"
        )
        assert make_client(card, http, endpoint) is not None
    # The card as read is left as it was (it is compared with the next reading).
    assert [i.url for i in card.supported_interfaces] == ["http://elsewhere.test/a2a"]


async def test_a_card_without_a_binding_we_call_is_refused() -> None:
    async with httpx.AsyncClient() as http:
        with pytest.raises(CardError, match="names no JSON-RPC or HTTP\\+JSON interface"):
            make_client(_card(("http://agents.test/grpc", "GRPC")), http, _config())


def test_the_description_names_the_skills_with_three_examples_at_most_and_is_bounded() -> None:
    card = _card()
    card.description = "  Answers questions.  "
    card.skills.append(
        AgentSkill(
            id="faq", name="FAQ", description="Reads the FAQ.", examples=["a", "b", "c", "d"]
        )
    )
    assert describe(card) == (
        "Ask the remote agent 'Helper' and get its answer.\nAnswers questions.\nIts skills:\n"
        "- FAQ: Reads the FAQ. (for example: 'a'; 'b'; 'c')"
    )
    card.description = "x" * (2 * MAX_DESCRIPTION_CHARS)
    text = describe(card)
    assert len(text) == MAX_DESCRIPTION_CHARS
    assert text.endswith("…")


def test_a_timeout_names_the_connect_timeout() -> None:
    words = why_card_failed(httpx.ConnectTimeout("slow"), _config(connect_timeout=2.5))
    assert words == "no card within the connect timeout of 2.5 s"
