"""The card lists the engine's A2A gRPC binding beside JSON-RPC once ``[a2a] grpc_url``
says where peers reach it; each agent's card names its agent as the interface's tenant."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import jsonschema
import pytest
from a2a.client.card_resolver import parse_agent_card
from a2a.types import AgentCard
from flask import Flask
from google.protobuf import json_format

from agentik.a2a.card import agent_card_config, card_body, card_config
from agentik.config import ConfigError, load_settings
from tests.web.a2a.card_schema import agent_card_schema

PUBLIC = "https://agents.example.com/agentik/"
GRPC = "agents.example.com:443"
CARD = "/.well-known/agent-card.json"


def test_the_card_lists_the_grpc_interface_beside_json_rpc(
    make_app: Callable[..., Flask],
) -> None:
    app = make_app(AGENTIK_PUBLIC_URL=PUBLIC, AGENTIK_A2A_GRPC_URL=GRPC)
    card = app.test_client().get(CARD).get_json()
    assert card["supportedInterfaces"] == [
        {"url": PUBLIC, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": PUBLIC, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        {"url": PUBLIC + "a2a", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        {"url": GRPC, "protocolBinding": "GRPC", "protocolVersion": "1.0"},
    ]
    jsonschema.Draft202012Validator(agent_card_schema()).validate(card)
    json_format.ParseDict(card, AgentCard(), ignore_unknown_fields=False)
    parsed = parse_agent_card(card)
    assert [i.protocol_binding for i in parsed.supported_interfaces][-1] == "GRPC"


def test_without_a_grpc_url_no_grpc_interface_is_listed(make_app: Callable[..., Flask]) -> None:
    card = make_app(AGENTIK_PUBLIC_URL=PUBLIC).test_client().get(CARD).get_json()
    assert {i["protocolBinding"] for i in card["supportedInterfaces"]} == {"JSONRPC", "HTTP+JSON"}


def test_an_agent_s_card_names_it_as_the_grpc_tenant(tmp_path: Path) -> None:
    path = tmp_path / "agentik.toml"
    path.write_text(
        f'[a2a]\npublic_url = "{PUBLIC}"\ngrpc_url = "{GRPC}"\n\n'
        '[[agents]]\nname = "support"\ndescription = "Answers customers"\n'
    )
    settings = load_settings(path, {}, mcp=False)
    root = card_config(settings)
    config = agent_card_config(settings, "support", root)
    body, _ = card_body(config, PUBLIC + "a2a/support/", "1.0")
    card = parse_agent_card(json.loads(body))
    grpc = [i for i in card.supported_interfaces if i.protocol_binding == "GRPC"]
    assert [(i.url, i.tenant) for i in grpc] == [(GRPC, "support")]


@pytest.mark.parametrize("bad", ["https://agents.example.com/", "agents.example.com", "h:0"])
def test_a_grpc_url_that_is_no_host_and_port_is_refused_naming_the_setting(bad: str) -> None:
    with pytest.raises(ConfigError, match="grpc_url"):
        load_settings(None, {"AGENTIK_A2A_GRPC_URL": bad})
