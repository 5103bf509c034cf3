"""CORS and CSRF: bodies must be announced as JSON, and only configured origins get CORS.

A browser page on another origin may send a "simple request" (``text/plain``, a form, no
body) without asking first; it cannot send ``application/json`` or ``Authorization`` without
a preflight the facade answers only for the origins in ``[web] cors_origins``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

EVIL = "https://evil.example"
APP = "https://app.example"
PREFLIGHT = {"Access-Control-Request-Method": "POST"}
CORS_HEADERS = (
    "Access-Control-Allow-Origin",
    "Access-Control-Allow-Methods",
    "Access-Control-Allow-Headers",
    "Access-Control-Max-Age",
    "Access-Control-Expose-Headers",
    "Access-Control-Allow-Credentials",
)


def _total(client: FlaskClient) -> int:
    response = client.get("/agentik/conversations")
    assert response.status_code == 200
    total: int = response.get_json()["total"]
    return total


def _no_cors(headers: Any) -> None:
    assert [name for name in CORS_HEADERS if name in headers] == []


def _agui_body() -> dict[str, Any]:
    return {
        "threadId": f"cors-{uuid.uuid4().hex}",
        "runId": f"r-{uuid.uuid4().hex}",
        "messages": [{"id": "u1", "role": "user", "content": "hi"}],
    }


@pytest.fixture
def cors_client(make_app: Callable[..., Flask]) -> FlaskClient:
    return make_app(AGENTIK_CORS_ORIGINS=f"{APP},http://localhost:5173").test_client()


# --- request bodies must be JSON -------------------------------------------------------


def test_a_text_plain_post_is_refused_with_415_and_creates_nothing(
    client: FlaskClient,
) -> None:
    before = _total(client)
    response = client.post(
        "/agentik/conversations", data='{"title": "csrf"}', content_type="text/plain"
    )
    assert response.status_code == 415
    error = response.get_json()["error"]
    assert error["code"] == "unsupported_media_type"
    assert "'text/plain'" in error["message"] and "application/json" in error["message"]
    assert _total(client) == before
    _no_cors(response.headers)


# --- state-changing requests from foreign pages ------------------------------------


@pytest.mark.parametrize(
    ("content_type", "data"),
    [("text/plain", '{"title": "csrf"}'), ("application/json", '{"title": "csrf"}'), (None, None)],
)
def test_a_post_from_a_foreign_page_is_refused_403_and_creates_nothing(
    client: FlaskClient, content_type: str | None, data: str | None
) -> None:
    before = _total(client)
    response = client.post(
        "/agentik/conversations", data=data, content_type=content_type, headers={"Origin": EVIL}
    )
    assert response.status_code == 403
    error = response.get_json()["error"]
    assert error["code"] == "forbidden_origin"
    assert EVIL in error["message"] and "AGENTIK_CORS_ORIGINS" in error["message"]
    assert _total(client) == before
    _no_cors(response.headers)


def test_a_bodyless_interrupt_from_a_foreign_page_stops_nothing(client: FlaskClient) -> None:
    conversation_id = client.post("/agentik/conversations").get_json()["id"]
    path = f"/agentik/conversations/{conversation_id}"
    for method in (client.post, client.delete):
        target = f"{path}/interrupt" if method == client.post else path
        response = method(target, headers={"Origin": EVIL})
        assert response.status_code == 403, target
    assert client.get(path).status_code == 200  # the DELETE did not happen
    for body, route in ((None, "/agui"), ('{"jsonrpc": "2.0", "id": 1, "method": "x"}', "/")):
        response = client.post(route, data=body, headers={"Origin": "null"})
        assert response.status_code == 403, route


def test_a_page_of_the_facade_itself_or_an_allowed_origin_may_post(
    client: FlaskClient, cors_client: FlaskClient
) -> None:
    own = client.post("/agentik/conversations", headers={"Origin": "http://localhost"})
    assert own.status_code == 201  # the test client's host is localhost
    allowed = cors_client.post("/agentik/conversations", headers={"Origin": APP})
    assert allowed.status_code == 201
    assert allowed.headers["Access-Control-Allow-Origin"] == APP
    other_port = client.post("/agentik/conversations", headers={"Origin": "http://localhost:9"})
    assert other_port.status_code == 403


def test_reading_from_a_foreign_page_is_not_refused_but_gets_no_cors(client: FlaskClient) -> None:
    response = client.get("/agentik/conversations", headers={"Origin": EVIL})
    assert response.status_code == 200
    _no_cors(response.headers)


@pytest.mark.parametrize(
    "content_type", ["application/x-www-form-urlencoded", "multipart/form-data", None]
)
def test_a_body_sent_as_a_form_or_without_a_content_type_is_refused_with_415(
    client: FlaskClient, content_type: str | None
) -> None:
    before = _total(client)
    response = client.post(
        "/agentik/conversations", data=b'{"title":"x"}', content_type=content_type
    )
    assert response.status_code == 415
    message = response.get_json()["error"]["message"]
    assert (content_type or "no Content-Type") in message
    assert _total(client) == before


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "application/json; charset=utf-8",
        "Application/JSON",
        "application/vnd.agentik+json",
    ],
)
def test_json_and_plus_json_bodies_with_parameters_are_accepted(
    client: FlaskClient, content_type: str
) -> None:
    response = client.post(
        "/agentik/conversations", data=b'{"title":"ok"}', content_type=content_type
    )
    assert response.status_code == 201, response.get_data()


def test_bodyless_posts_need_no_content_type(client: FlaskClient) -> None:
    created = client.post("/agentik/conversations")
    assert created.status_code == 201
    conversation_id = created.get_json()["id"]
    interrupted = client.post(f"/agentik/conversations/{conversation_id}/interrupt")
    assert interrupted.status_code == 200
    assert interrupted.get_json() == {"interrupted": False}


def test_a_message_sent_as_text_plain_is_refused_before_anything_runs(client: FlaskClient) -> None:
    conversation_id = client.post("/agentik/conversations").get_json()["id"]
    response = client.post(
        f"/agentik/conversations/{conversation_id}/send",
        data='{"text": "hi"}',
        content_type="text/plain",
    )
    assert response.status_code == 415
    messages = client.get(f"/agentik/conversations/{conversation_id}/messages").get_json()
    assert messages["items"] == []


def test_an_agui_run_sent_as_text_plain_is_refused_with_415_in_the_facades_error_shape(
    client: FlaskClient,
) -> None:
    response = client.post("/agui", data=json.dumps(_agui_body()), content_type="text/plain")
    assert response.status_code == 415
    assert response.mimetype == "application/json"
    assert response.get_json()["error"]["code"] == "unsupported_media_type"


def test_an_a2a_request_sent_as_text_plain_is_a_json_rpc_content_type_not_supported(
    client: FlaskClient,
) -> None:
    body = '{"jsonrpc": "2.0", "id": 7, "method": "GetTask", "params": {"id": "x"}}'
    response = client.post(
        "/", data=body, content_type="text/plain", headers={"A2A-Version": "1.0"}
    )
    # A2A's error for a content type it does not take, as a JSON-RPC error (HTTP 200).
    assert response.status_code == 200
    assert response.mimetype == "application/json"
    answer = response.get_json()
    assert answer["jsonrpc"] == "2.0" and answer["id"] is None
    assert answer["error"]["code"] == -32005
    assert answer["error"]["data"][0]["reason"] == "CONTENT_TYPE_NOT_SUPPORTED"
    assert "'text/plain'" in answer["error"]["message"]


def test_an_a2a_http_json_request_sent_as_text_plain_is_http_415(client: FlaskClient) -> None:
    body = '{"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}'
    response = client.post(
        "/a2a/message:send", data=body, content_type="text/plain", headers={"A2A-Version": "1.0"}
    )
    assert response.status_code == 415
    error = response.get_json()["error"]
    assert error["code"] == 415 and error["details"][0]["reason"] == "CONTENT_TYPE_NOT_SUPPORTED"
    assert "'text/plain'" in error["message"]


# --- CORS -------------------------------------------------------------------------------


def test_by_default_no_origin_gets_cors_headers_on_a_preflight_or_an_answer(
    client: FlaskClient,
) -> None:
    preflight = client.options("/agentik/conversations", headers={"Origin": APP, **PREFLIGHT})
    _no_cors(preflight.headers)
    _no_cors(client.get("/agentik/conversations", headers={"Origin": APP}).headers)


def test_a_preflight_from_an_allowed_origin_is_answered_204_with_what_the_browser_needs(
    cors_client: FlaskClient,
) -> None:
    response = cors_client.options(
        "/agentik/conversations",
        headers={
            "Origin": APP,
            **PREFLIGHT,
            "Access-Control-Request-Headers": "content-type, authorization",
        },
    )
    assert response.status_code == 204
    headers = response.headers
    assert headers["Access-Control-Allow-Origin"] == APP
    assert {"GET", "POST"} <= {
        m.strip() for m in headers["Access-Control-Allow-Methods"].split(",")
    }
    allowed = {h.strip().lower() for h in headers["Access-Control-Allow-Headers"].split(",")}
    assert {"content-type", "authorization", "last-event-id", "a2a-version"} <= allowed
    assert int(headers["Access-Control-Max-Age"]) > 0
    assert "Origin" in headers["Vary"]
    assert "Access-Control-Allow-Credentials" not in headers


@pytest.mark.parametrize("path", ["/agui", "/", "/agentik/conversations/c1/send"])
def test_every_browser_facing_post_route_answers_an_allowed_preflight(
    cors_client: FlaskClient, path: str
) -> None:
    response = cors_client.options(path, headers={"Origin": APP, **PREFLIGHT})
    assert response.status_code == 204
    assert response.headers["Access-Control-Allow-Origin"] == APP
    assert "POST" in response.headers["Access-Control-Allow-Methods"]


def test_a_preflight_from_another_origin_gets_no_cors_headers(cors_client: FlaskClient) -> None:
    response = cors_client.options("/agentik/conversations", headers={"Origin": EVIL, **PREFLIGHT})
    _no_cors(response.headers)
    assert "Origin" in response.headers["Vary"]


def test_an_allowed_origin_gets_allow_origin_and_exposed_headers_on_answers_and_errors(
    cors_client: FlaskClient,
) -> None:
    listed = cors_client.get("/agentik/conversations", headers={"Origin": APP})
    assert listed.headers["Access-Control-Allow-Origin"] == APP
    assert "Retry-After" in listed.headers["Access-Control-Expose-Headers"]
    missing = cors_client.get("/agentik/conversations/nope", headers={"Origin": APP})
    assert missing.status_code == 404
    assert missing.headers["Access-Control-Allow-Origin"] == APP
    other = cors_client.get("/agentik/conversations", headers={"Origin": EVIL})
    _no_cors(other.headers)


def test_an_agui_event_stream_carries_allow_origin_for_an_allowed_origin(
    cors_client: FlaskClient,
) -> None:
    response = cors_client.post("/agui", json=_agui_body(), headers={"Origin": APP})
    assert response.status_code == 200
    assert response.mimetype == "text/event-stream"
    assert response.headers["Access-Control-Allow-Origin"] == APP
    assert b"RUN_FINISHED" in response.get_data()


def test_an_agentik_send_stream_carries_allow_origin_for_an_allowed_origin(
    cors_client: FlaskClient,
) -> None:
    conversation_id = cors_client.post("/agentik/conversations").get_json()["id"]
    response = cors_client.post(
        f"/agentik/conversations/{conversation_id}/send",
        json={"text": "hi"},
        headers={"Origin": "http://localhost:5173"},
    )
    assert response.status_code == 200
    assert response.mimetype == "text/event-stream"
    assert response.headers["Access-Control-Allow-Origin"] == "http://localhost:5173"
    response.get_data()


def test_star_allows_any_origin_without_credentials_or_vary(
    make_app: Callable[..., Flask],
) -> None:
    client = make_app(AGENTIK_CORS_ORIGINS="*").test_client()
    preflight = client.options("/agui", headers={"Origin": EVIL, **PREFLIGHT})
    assert preflight.status_code == 204
    assert preflight.headers["Access-Control-Allow-Origin"] == "*"
    assert "Access-Control-Allow-Credentials" not in preflight.headers
    answer = client.get("/health", headers={"Origin": EVIL})
    assert answer.headers["Access-Control-Allow-Origin"] == "*"
    assert "Vary" not in answer.headers or "Origin" not in answer.headers["Vary"]


def test_a_preflight_on_an_unknown_route_is_not_approved(cors_client: FlaskClient) -> None:
    response = cors_client.options("/nowhere", headers={"Origin": APP, **PREFLIGHT})
    assert response.status_code == 404
    assert "Access-Control-Allow-Methods" not in response.headers
