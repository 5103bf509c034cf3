"""Hostile JSON is refused with 4xx in each protocol's error shape, never a 5xx: lone UTF-16
surrogates, nesting past the depth limit, and numbers that are not finite (``1e400``,
``NaN``, ``Infinity``). One check where every body is parsed serves all three protocols."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.web.a2a.conftest import V10, user_message
from web_facade.request_body import MAX_JSON_DEPTH

SURROGATE = "x\ud83d"


def _nested(levels: int) -> dict[str, Any]:
    """An object ``levels`` deep: ``{"a": {"a": ... {} }}``."""
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def _post(client: FlaskClient, path: str, body: Any, **headers: str) -> Any:
    """POST ``body`` as ASCII JSON (surrogates become ``\\uXXXX`` escapes, as a client sends)."""
    return client.post(
        path, data=json.dumps(body), content_type="application/json", headers=headers
    )


def _agentik_error(response: Any, status: int = 400) -> str:
    assert response.status_code == status, response.get_data()
    assert response.mimetype == "application/json"
    error = response.get_json()["error"]
    assert set(error) == {"code", "message"} and error["code"] == "invalid_argument"
    message: str = error["message"]
    return message


def _agui(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "threadId": f"agui-{uuid.uuid4().hex}",
        "runId": f"r-{uuid.uuid4().hex}",
        "messages": [{"id": "u1", "role": "user", "content": "hi"}],
    }
    body.update(fields)
    return body


def _a2a_error(client: FlaskClient, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": params}
    response = _post(client, "/", body, **V10)
    assert response.status_code == 200 and response.mimetype == "application/json"
    reply = response.get_json()
    assert reply["id"] == 7 and "result" not in reply, reply
    error: dict[str, Any] = reply["error"]
    return error


def _conversation(client: FlaskClient) -> str:
    response = client.post("/agentik/conversations", json={})
    assert response.status_code == 201
    conversation_id: str = response.get_json()["id"]
    return conversation_id


# -- lone surrogates -------------------------------------------------------------------


def test_a_lone_surrogate_in_a_conversation_title_is_refused_with_400(
    client: FlaskClient,
) -> None:
    message = _agentik_error(_post(client, "/agentik/conversations", {"title": SURROGATE}))
    assert message.startswith("title:") and "surrogate" in message


def test_a_lone_surrogate_in_a_rename_is_refused_with_400(client: FlaskClient) -> None:
    path = f"/agentik/conversations/{_conversation(client)}/rename"
    message = _agentik_error(_post(client, path, {"title": SURROGATE}))
    assert message.startswith("title:") and "surrogate" in message


def test_a_lone_surrogate_in_sent_text_is_refused_with_400(client: FlaskClient) -> None:
    path = f"/agentik/conversations/{_conversation(client)}/send"
    message = _agentik_error(_post(client, path, {"text": SURROGATE}))
    assert message.startswith("text:") and "surrogate" in message


def test_a_lone_surrogate_in_an_object_key_is_refused_naming_the_key(
    client: FlaskClient,
) -> None:
    message = _agentik_error(_post(client, "/agentik/conversations", {SURROGATE: 1}))
    assert "key" in message and "surrogate" in message


def test_a_raw_utf8_encoded_surrogate_is_refused_too(client: FlaskClient) -> None:
    body = b'{"title": "x\xed\xa0\xbd"}'  # CESU-style bytes that json.loads lets through
    response = client.post("/agentik/conversations", data=body, content_type="application/json")
    assert response.status_code == 400, response.get_data()


def test_a_lone_surrogate_in_agui_message_content_is_refused_before_any_stream(
    client: FlaskClient,
) -> None:
    body = _agui(messages=[{"id": "u1", "role": "user", "content": SURROGATE}])
    message = _agentik_error(_post(client, "/agui", body), status=422)
    assert message.startswith("messages[0].content:") and "surrogate" in message


def test_a_lone_surrogate_in_an_a2a_text_part_is_invalid_params(client: FlaskClient) -> None:
    error = _a2a_error(client, {"message": user_message(SURROGATE)})
    assert error["code"] == -32602, error
    assert error["message"].startswith("message.parts[0].text:")
    assert "surrogate" in error["message"]


@pytest.mark.parametrize(
    "path",
    [
        "/agentik/conversations/%ED%A0%80",
        "/agentik/conversations?agent=%ED%A0%80",
        "/agentik/conversations/x/messages?after=%ED%A0%80",
        "/agentik/agents/%ED%A0%80",
        "/agui/%ED%A0%80/capabilities",
        "/a2a/tasks/%ED%A0%80",
        "/a2a/tasks?contextId=%ED%A0%80",
        "/a2a/%ED%A0%80/.well-known/agent-card.json",
    ],
)
def test_a_surrogate_s_bytes_in_a_path_or_query_are_a_4xx_on_every_surface(
    client: FlaskClient, path: str
) -> None:
    # URLs are decoded with replacement characters, so no lone surrogate reaches an answer.
    response = client.get(path, headers=V10)
    assert 400 <= response.status_code < 500, response.get_data()
    assert response.get_json()["error"]["message"]


def test_a_lone_surrogate_in_an_agui_thread_id_is_refused_before_it_is_echoed(
    client: FlaskClient,
) -> None:
    message = _agentik_error(_post(client, "/agui", _agui(threadId=SURROGATE)), status=422)
    assert message.startswith("threadId:") and "surrogate" in message


# -- nesting ---------------------------------------------------------------------------


@pytest.mark.parametrize("levels", [MAX_JSON_DEPTH + 1, 50, 200])
def test_agui_state_nested_past_the_limit_is_refused_naming_the_field(
    client: FlaskClient, levels: int
) -> None:
    message = _agentik_error(_post(client, "/agui", _agui(state=_nested(levels))), status=422)
    assert message.startswith("state") and f"{MAX_JSON_DEPTH} levels" in message


def test_agui_forwarded_props_nested_past_the_limit_are_refused_naming_the_field(
    client: FlaskClient,
) -> None:
    body = _agui(forwardedProps=_nested(50))
    message = _agentik_error(_post(client, "/agui", body), status=422)
    assert message.startswith("forwardedProps") and f"{MAX_JSON_DEPTH} levels" in message


def test_agui_tool_parameters_nested_past_the_limit_are_refused_naming_the_field(
    client: FlaskClient,
) -> None:
    tool = {"name": "deep", "description": "d", "parameters": _nested(50)}
    message = _agentik_error(_post(client, "/agui", _agui(tools=[tool])), status=422)
    assert message.startswith("tools[0].parameters") and f"{MAX_JSON_DEPTH} levels" in message


def test_nested_arrays_count_as_levels_too(client: FlaskClient) -> None:
    deep: list[Any] = []
    for _ in range(60):
        deep = [deep]
    message = _agentik_error(_post(client, "/agui", _agui(state={"a": deep})), status=422)
    assert message.startswith("state.a[0]") and f"{MAX_JSON_DEPTH} levels" in message


def test_state_nested_just_within_the_limit_is_accepted(client: FlaskClient) -> None:
    # The body is level 1 and state level 2: state may hold MAX_JSON_DEPTH - 1 levels.
    response = _post(client, "/agui", _agui(state=_nested(MAX_JSON_DEPTH - 1)))
    assert response.status_code == 200, response.get_data()
    response.close()


def test_an_agentik_body_nested_past_the_limit_is_refused(client: FlaskClient) -> None:
    message = _agentik_error(_post(client, "/agentik/conversations", {"x": _nested(50)}))
    assert message.startswith("x.a") and f"{MAX_JSON_DEPTH} levels" in message


def test_a2a_data_nested_past_the_limit_is_invalid_params(client: FlaskClient) -> None:
    message = user_message("hi")
    message["parts"].append({"data": _nested(50)})
    error = _a2a_error(client, {"message": message})
    assert error["code"] == -32602, error
    assert error["message"].startswith("message.parts[1].data")
    assert f"{MAX_JSON_DEPTH} levels" in error["message"]


def test_an_a2a_envelope_nested_past_the_limit_outside_params_is_an_invalid_request(
    client: FlaskClient,
) -> None:
    body = {"jsonrpc": "2.0", "id": 7, "method": "GetTask", "extra": _nested(50)}
    response = _post(client, "/", body, **V10)
    reply = response.get_json()
    assert response.status_code == 200 and reply["id"] == 7
    assert reply["error"]["code"] == -32600, reply


# -- numbers that are not finite ---------------------------------------------------------


@pytest.mark.parametrize("literal", ["1e400", "-1e400", "NaN", "Infinity", "-Infinity"])
def test_a_non_finite_number_in_agui_state_is_refused_naming_the_field(
    client: FlaskClient, literal: str
) -> None:
    raw = json.dumps(_agui(state={"count": 0})).replace('"count": 0', f'"count": {literal}')
    response = client.post("/agui", data=raw, content_type="application/json")
    message = _agentik_error(response, status=422)
    assert message.startswith("state.count:") and "finite" in message


def test_an_integer_too_large_for_a_double_is_refused(client: FlaskClient) -> None:
    raw = json.dumps(_agui(state={"n": 0})).replace('"n": 0', '"n": ' + "9" * 400)
    message = _agentik_error(client.post("/agui", data=raw, content_type="application/json"), 422)
    assert message.startswith("state.n:") and "finite" in message


def test_a_non_finite_number_in_an_agentik_body_is_refused(client: FlaskClient) -> None:
    response = client.post(
        "/agentik/conversations", data='{"title": "t", "n": NaN}', content_type="application/json"
    )
    assert _agentik_error(response).startswith("n:")


def test_a_non_finite_number_in_a2a_data_is_invalid_params(client: FlaskClient) -> None:
    message = user_message("hi")
    message["parts"].append({"data": {"v": 1}})
    body = {"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {"message": message}}
    raw = json.dumps(body).replace('"v": 1', '"v": 1e400')
    reply = client.post("/", data=raw, content_type="application/json", headers=V10).get_json()
    assert reply["error"]["code"] == -32602, reply
    assert reply["error"]["message"].startswith("message.parts[1].data.v:")
