"""DNS rebinding: without tokens the facade answers only requests addressed to this host.

A page on a domain re-pointed to 127.0.0.1 is same-origin with itself, so the origin check
cannot tell it from a local page; its ``Host`` header still names its own domain.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from flask import Flask

from web_facade.hosts import is_loopback_host

REBOUND = "http://rebind.evil.example:8000"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("app.localhost", True),
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("[::1]", True),
        ("LOCALHOST.", True),
        ("evil.example", False),
        ("10.0.0.5", False),
        ("localhost.evil.example", False),
        ("", False),
    ],
)
def test_loopback_names(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


def test_a_rebound_page_can_neither_read_nor_change_anything(
    make_app: Callable[..., Flask],
) -> None:
    client = make_app().test_client()
    created = client.post("/agentik/conversations", json={"title": "mine"})
    assert created.status_code == 201
    conversation = created.get_json()["id"]
    # Same-origin with itself: the Origin matches the Host, both the attacker's name.
    headers = {"Origin": REBOUND}
    for method, path in [
        ("GET", "/agentik/conversations"),
        ("GET", f"/agentik/conversations/{conversation}/messages"),
        ("POST", "/agentik/conversations"),
        ("DELETE", f"/agentik/conversations/{conversation}"),
        ("POST", "/agui"),
        ("POST", "/"),
    ]:
        response = client.open(path, method=method, base_url=REBOUND, headers=headers)
        assert response.status_code == 403, (method, path, response.get_data())
        error = response.get_json()["error"]
        assert error["code"] == "forbidden_host"
        assert "AGENTIK_TOKENS" in error["message"]
    assert client.get(f"/agentik/conversations/{conversation}").status_code == 200
    listed = client.get("/agentik/conversations").get_json()
    assert listed["total"] >= 1


def test_public_documents_answer_under_any_name(make_app: Callable[..., Flask]) -> None:
    client = make_app().test_client()
    for path in ("/health", "/agentik/openapi.json", "/.well-known/agent-card.json"):
        assert client.get(path, base_url=REBOUND).status_code == 200, path


def test_loopback_names_and_the_public_url_host_are_served(
    make_app: Callable[..., Flask],
) -> None:
    client = make_app(AGENTIK_PUBLIC_URL="https://agent.example.com").test_client()
    for base in (
        "http://localhost:8000",
        "http://127.0.0.1:8000",
        "http://[::1]:8000",
        "https://agent.example.com",
    ):
        assert client.get("/agentik/conversations", base_url=base).status_code == 200, base


@pytest.mark.parametrize(
    "env",
    [
        {"AGENTIK_TOKENS": "alice:alice-token"},
        {"AGENTIK_ALLOW_ANONYMOUS": "true"},
    ],
)
def test_with_tokens_or_a_proxy_in_front_any_name_is_served(
    make_app: Callable[..., Flask], env: dict[str, str]
) -> None:
    client = make_app(**env).test_client()
    answered = client.get("/agentik/conversations", base_url=REBOUND)
    assert answered.status_code in (200, 401)
