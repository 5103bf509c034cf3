"""a2a-sdk's own client against the whole stack with a token and a card signing key: it
resolves the signed card, verifies it, and fetches the authenticated extended card."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import GetExtendedAgentCardRequest
from a2a.utils.signing import InvalidSignaturesError, create_signature_verifier
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.fakes.fake_openai import FakeOpenAI
from tests.web.a2a.conftest import ConfiguredStack
from tests.web.e2e.conftest import WAIT

KEY = ec.generate_private_key(ec.SECP256R1())


def _public_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


VERIFY = create_signature_verifier(lambda kid, jku: _public_pem(KEY), ["ES256"])
TOKEN = {"Authorization": "Bearer tokenA"}


@pytest.fixture(scope="module")
def signed_stack(
    llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConfiguredStack]:
    logs = tmp_path_factory.mktemp("a2a-signed")
    key = Path(logs) / "card.pem"
    key.write_bytes(
        KEY.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    running = ConfiguredStack(
        llm, logs, AGENTIK_TOKENS="alice:tokenA", AGENTIK_A2A_CARD_SIGNING_KEY=str(key)
    )
    yield running
    running.stop()


def test_the_sdk_verifies_the_signed_cards_and_reads_the_extended_one(
    signed_stack: ConfiguredStack,
) -> None:
    async def main() -> None:
        async with httpx.AsyncClient(timeout=WAIT, headers=TOKEN) as http:
            resolver = A2ACardResolver(http, signed_stack.base_url)
            card = await resolver.get_agent_card(signature_verifier=VERIFY)
            assert card.capabilities.extended_agent_card
            client = ClientFactory(ClientConfig(httpx_client=http)).create(card)
            try:
                extended = await client.get_extended_agent_card(
                    GetExtendedAgentCardRequest(), signature_verifier=VERIFY
                )
            finally:
                await client.close()
        tools = [skill.name for skill in extended.skills if skill.id.startswith("tool:")]
        assert "current_time" in tools
        assert not [skill for skill in card.skills if skill.id.startswith("tool:")]

        other = _public_pem(ec.generate_private_key(ec.SECP256R1()))
        stranger = create_signature_verifier(lambda kid, jku: other, ["ES256"])
        async with httpx.AsyncClient(timeout=WAIT) as http:
            with pytest.raises(InvalidSignaturesError):
                await A2ACardResolver(http, signed_stack.base_url).get_agent_card(
                    signature_verifier=stranger
                )

    asyncio.run(main())


def test_the_sdk_without_a_token_gets_no_extended_card(signed_stack: ConfiguredStack) -> None:
    async def main() -> None:
        async with httpx.AsyncClient(timeout=WAIT) as http:
            card = await A2ACardResolver(http, signed_stack.base_url).get_agent_card()
            client = ClientFactory(ClientConfig(httpx_client=http)).create(card)
            try:
                with pytest.raises(Exception, match=r"(?i)401|unauthenticated|credentials"):
                    await client.get_extended_agent_card(GetExtendedAgentCardRequest())
            finally:
                await client.close()

    asyncio.run(main())
