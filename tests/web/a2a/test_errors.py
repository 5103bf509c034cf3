"""Every error over the raw wire: JSON-RPC codes, HTTP 200, an ErrorInfo in error.data."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from a2a.utils.errors import A2A_ERROR_REASONS, JSON_RPC_ERROR_CODE_MAP
from flask import Flask
from flask.testing import FlaskClient

from tests.web.a2a.conftest import V10, Rpc, frames_of, user_message
from web_facade.a2a.errors import (
    ERRORS,
    AuthenticationRequired,
    BudgetExceededError,
    QuotaExceededError,
    RateLimitedError,
)

ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"


def _post(client: FlaskClient, body: bytes | str, headers: dict[str, str] | None = None) -> Any:
    response = client.post("/", data=body, content_type="application/json", headers=headers or V10)
    assert response.status_code == 200 and response.mimetype == "application/json"
    return response.get_json()


def _reason(error: dict[str, Any]) -> str:
    info = error["data"][0]
    assert info["@type"] == ERROR_INFO and info["domain"] == "a2a-protocol.org"
    reason: str = info["reason"]
    return reason


def test_the_error_table_agrees_with_the_sdk() -> None:
    # HTTP-level refusals A2A leaves to HTTP, and the conversations quota it has no error for.
    ours = {AuthenticationRequired, RateLimitedError, BudgetExceededError, QuotaExceededError}
    assert ours <= set(ERRORS)
    for error_class, (code, reason) in ERRORS.items():
        if error_class in ours:
            assert code == -32600
            continue
        assert JSON_RPC_ERROR_CODE_MAP[error_class] == code
        assert A2A_ERROR_REASONS.get(error_class, reason) == reason


def test_a_body_that_is_not_json_is_a_parse_error_with_a_null_id(client: FlaskClient) -> None:
    reply = _post(client, '{"jsonrpc": "2.0", "id": 1, "method":')
    assert reply["id"] is None and reply["error"]["code"] == -32700
    assert _reason(reply["error"]) == "PARSE_ERROR"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ([{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}], "batch"),
        ({"jsonrpc": "1.0", "id": 1, "method": "GetTask"}, "jsonrpc"),
        ({"id": 1, "method": "GetTask"}, "jsonrpc"),
        ({"jsonrpc": "2.0", "method": "GetTask", "params": {"id": "x"}}, "id is required"),
        ({"jsonrpc": "2.0", "id": True, "method": "GetTask"}, "id must be"),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "GetTask"}, "id must be"),
        ({"jsonrpc": "2.0", "id": 1}, "method"),
        ("just a string", "request object"),
    ],
)
def test_what_is_not_a_json_rpc_request_is_an_invalid_request(
    client: FlaskClient, body: object, says: str
) -> None:
    reply = _post(client, json.dumps(body))
    assert reply["error"]["code"] == -32600, reply
    assert says in reply["error"]["message"]
    assert _reason(reply["error"]) == "INVALID_REQUEST"


def test_an_invalid_request_echoes_a_usable_id(client: FlaskClient) -> None:
    reply = _post(client, json.dumps({"jsonrpc": "1.0", "id": "abc", "method": "GetTask"}))
    assert reply["id"] == "abc" and reply["error"]["code"] == -32600


@pytest.mark.parametrize(
    ("method", "headers"),
    [
        ("GetTask", V10),
        ("ListTasks", V10),
        ("NoSuchMethod", V10),
        ("tasks/get", {}),
        ("GetTask", {}),
    ],
)
def test_a_lone_surrogate_in_the_id_is_an_invalid_request_answered_with_a_null_id(
    client: FlaskClient, method: str, headers: dict[str, str]
) -> None:
    # json.dumps writes the surrogate as the escape \ud800, as a client would send it.
    body = {"jsonrpc": "2.0", "id": "\ud800", "method": method, "params": {"id": "x"}}
    reply = _post(client, json.dumps(body), headers)
    assert reply["id"] is None and reply["error"]["code"] == -32600, reply
    assert reply["error"]["message"].startswith("id: contains a lone UTF-16 surrogate")
    assert _reason(reply["error"]) == "INVALID_REQUEST"


def test_an_id_longer_than_the_limit_is_an_invalid_request_never_echoed(
    client: FlaskClient,
) -> None:
    body = {"jsonrpc": "2.0", "id": "i" * 900_000, "method": "GetTask", "params": {"id": "x"}}
    raw = client.post("/", data=json.dumps(body), content_type="application/json", headers=V10)
    assert raw.status_code == 200 and len(raw.get_data()) < 1000
    reply = raw.get_json()
    assert reply["id"] is None and reply["error"]["code"] == -32600, reply
    assert "longer than 256 characters" in reply["error"]["message"]
    assert "[a2a] max_request_id_chars" in reply["error"]["message"]
    assert reply["error"]["data"][0]["metadata"]["field"] == "id"


def test_the_id_limit_is_a_setting_and_an_id_at_it_is_echoed(
    make_app: Callable[..., Flask],
) -> None:
    client = make_app(AGENTIK_A2A_MAX_REQUEST_ID_CHARS="8").test_client()
    at = {"jsonrpc": "2.0", "id": "i" * 8, "method": "GetTask", "params": {"id": "x"}}
    reply = _post(client, json.dumps(at))
    assert reply["id"] == "i" * 8 and reply["error"]["code"] == -32001
    over = {**at, "id": "i" * 9}
    reply = _post(client, json.dumps(over))
    assert reply["id"] is None and "longer than 8 characters" in reply["error"]["message"]


@pytest.mark.parametrize("request_id", [2**63, -(2**63) - 1, 2**64, 10**300, -(10**300)])
def test_an_integer_id_beyond_64_bits_is_an_invalid_request(
    client: FlaskClient, request_id: int
) -> None:
    body = {"jsonrpc": "2.0", "id": request_id, "method": "GetTask", "params": {"id": "x"}}
    reply = _post(client, json.dumps(body))
    assert reply["id"] is None and reply["error"]["code"] == -32600, reply
    assert reply["error"]["message"] == "id must be an integer between -2^63 and 2^63 - 1"
    assert reply["error"]["data"][0]["metadata"]["field"] == "id"


@pytest.mark.parametrize("request_id", [2**63 - 1, -(2**63), -(2**63) + 1, 0, -1])
def test_a_64_bit_integer_id_is_echoed(client: FlaskClient, request_id: int) -> None:
    """-2^63 included: a signed 64-bit integer, as a Java or Go client's ``long`` id."""
    body = {"jsonrpc": "2.0", "id": request_id, "method": "GetTask", "params": {"id": "x"}}
    raw = client.post("/", data=json.dumps(body), content_type="application/json", headers=V10)
    assert raw.status_code == 200
    assert f'"id":{request_id},'.encode() in raw.get_data()  # as written, never as a float
    reply = raw.get_json()
    assert reply["id"] == request_id and reply["error"]["code"] == -32001


def test_the_smallest_64_bit_id_is_echoed_in_every_frame_of_a_stream(client: FlaskClient) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": -(2**63),
        "method": "SendStreamingMessage",
        "params": {"message": user_message("hi")},
    }
    response = client.post("/", json=body, headers=V10, buffered=True)
    assert response.status_code == 200 and response.mimetype == "text/event-stream"
    frames = [f for f in frames_of(iter([response.get_data()])) if f is not None]
    assert len(frames) >= 2 and all(f["id"] == -(2**63) for f in frames), frames
    assert "error" not in frames[-1], frames[-1]


@pytest.mark.parametrize(
    "written",
    [
        "1.5",
        "1.0",
        "-0.0",
        "1e3",
        "1E2",
        "123456789012345678901234567890.5",
        "true",
        "false",
        "null",
        "[1]",
        '{"a": {"b": 1}}',
        "{}",
    ],
)
def test_an_id_that_is_no_string_or_integer_is_an_invalid_request_naming_it(
    client: FlaskClient, written: str
) -> None:
    body = '{"jsonrpc": "2.0", "id": ' + written + ', "method": "GetTask", "params": {"id": "x"}}'
    reply = _post(client, body)
    assert reply["id"] is None and reply["error"]["code"] == -32600, reply
    assert reply["error"]["message"] == "id must be a string or an integer"
    assert reply["error"]["data"][0]["metadata"]["field"] == "id"


@pytest.mark.parametrize("written", ["1e400", "-1e400"])
def test_an_id_beyond_a_double_is_an_invalid_request_naming_it(
    client: FlaskClient, written: str
) -> None:
    body = '{"jsonrpc": "2.0", "id": ' + written + ', "method": "GetTask", "params": {"id": "x"}}'
    reply = _post(client, body)
    assert reply["id"] is None and reply["error"]["code"] == -32600, reply
    assert reply["error"]["message"].startswith("id: must be a finite number")


def test_an_integer_id_of_more_digits_than_python_reads_is_a_parse_error(
    client: FlaskClient,
) -> None:
    body = '{"jsonrpc": "2.0", "id": 1' + "0" * 5000 + ', "method": "GetTask", "params": {}}'
    reply = _post(client, body)
    assert reply["id"] is None and reply["error"]["code"] == -32700, reply
    message = reply["error"]["message"]
    assert "digits" in message and "set_int_max_str_digits" not in message, message


def test_a_body_over_the_size_limit_is_an_invalid_request(
    make_app: Callable[..., Flask],
) -> None:
    client = make_app(AGENTIK_MAX_BODY_BYTES="200").test_client()
    params = {"message": user_message("x" * 500)}
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": params})
    reply = _post(client, body)
    assert reply["error"]["code"] == -32600 and "larger than 200 bytes" in reply["error"]["message"]


def test_an_unknown_method_is_method_not_found(rpc: Rpc) -> None:
    error = rpc.error("tasks/doEverything")
    assert error["code"] == -32601 and _reason(error) == "METHOD_NOT_FOUND"


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"message": {"role": "ROLE_USER", "parts": [{"text": "hi"}]}}, "message.messageId"),
        ({"message": {"messageId": "m1", "parts": [{"text": "hi"}]}}, "message.role"),
        (
            {"message": {"messageId": "m1", "role": "ROLE_AGENT", "parts": [{"text": "hi"}]}},
            "message.role",
        ),
        ({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": []}}, "message.parts"),
        ({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{}]}}, "message.parts[0]"),
        ({"message": {"messageId": 5, "role": "ROLE_USER"}}, "message.messageId"),
        (
            {"message": {"messageId": "a/b", "role": "ROLE_USER", "parts": [{"text": "hi"}]}},
            "message.messageId",
        ),
        (
            {
                "message": {
                    "messageId": "m1",
                    "contextId": "c" * 129,
                    "role": "ROLE_USER",
                    "parts": [{"text": "hi"}],
                }
            },
            "message.contextId",
        ),
        ({}, "message"),
        (
            {"message": user_message("hi"), "configuration": {"historyLength": -1}},
            "configuration.historyLength",
        ),
    ],
)
def test_invalid_params_name_the_field(rpc: Rpc, params: dict[str, Any], field: str) -> None:
    error = rpc.error("SendMessage", params)
    assert error["code"] == -32602, error
    assert error["message"].startswith(field + ":"), error["message"]
    assert error["data"][0]["metadata"]["field"] == field
    assert error["data"][1]["fieldViolations"][0]["field"] == field


def test_params_that_are_not_an_object_are_invalid_params(rpc: Rpc) -> None:
    error = rpc.error("GetTask", ["task-1"])
    assert error["code"] == -32602 and error["data"][0]["metadata"]["field"] == "params"


@pytest.mark.parametrize(
    ("method", "params", "field"),
    [
        ("GetTask", {"id": "x", "historyLength": -2}, "historyLength"),
        ("ListTasks", {"pageSize": 0}, "pageSize"),
        ("ListTasks", {"pageSize": 101}, "pageSize"),
        ("ListTasks", {"pageToken": "not-ours"}, "pageToken"),
        ("GetTask", {}, "id"),
    ],
)
def test_invalid_read_params_name_the_field(
    rpc: Rpc, method: str, params: dict[str, Any], field: str
) -> None:
    error = rpc.error(method, params)
    assert error["code"] == -32602 and error["data"][0]["metadata"]["field"] == field


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("GetTask", {"id": "no-such-task"}),
        ("CancelTask", {"id": "no-such-task"}),
        ("SubscribeToTask", {"id": "no-such-task"}),
        ("SendMessage", {"message": user_message("hi", taskId="no-such-task")}),
    ],
)
def test_an_unknown_task_is_task_not_found(rpc: Rpc, method: str, params: dict[str, Any]) -> None:
    error = rpc.error(method, params)
    assert error["code"] == -32001 and _reason(error) == "TASK_NOT_FOUND"


@pytest.fixture
def done_task(rpc: Rpc) -> dict[str, Any]:
    task: dict[str, Any] = rpc.result("SendMessage", {"message": user_message("done")})["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    return task


def test_a_finished_task_is_not_cancelable(rpc: Rpc, done_task: dict[str, Any]) -> None:
    error = rpc.error("CancelTask", {"id": done_task["id"]})
    assert error["code"] == -32002 and "completed" in error["message"]
    assert _reason(error) == "TASK_NOT_CANCELABLE"


def test_a_message_for_a_finished_task_is_an_unsupported_operation_that_names_the_context(
    rpc: Rpc, done_task: dict[str, Any]
) -> None:
    error = rpc.error("SendMessage", {"message": user_message("more", taskId=done_task["id"])})
    assert error["code"] == -32004
    assert error["data"][0]["metadata"]["contextId"] == done_task["contextId"]


def test_a_context_that_contradicts_the_task_is_invalid_params(
    rpc: Rpc, done_task: dict[str, Any]
) -> None:
    message = user_message("more", taskId=done_task["id"], contextId="another-context")
    error = rpc.error("SendMessage", {"message": message})
    assert error["code"] == -32602 and error["data"][0]["metadata"]["field"] == "message.contextId"


def test_a_message_id_already_sent_in_the_context_is_invalid_params(
    rpc: Rpc, done_task: dict[str, Any]
) -> None:
    again = dict(done_task["history"][0])
    again.pop("taskId")
    error = rpc.error("SendMessage", {"message": again})
    assert error["code"] == -32602 and error["data"][0]["metadata"]["field"] == "message.messageId"


def test_resubscribing_to_a_finished_task_is_an_unsupported_operation(
    rpc: Rpc, done_task: dict[str, Any]
) -> None:
    error = rpc.error("SubscribeToTask", {"id": done_task["id"]})
    assert error["code"] == -32004 and "GetTask" in error["message"]


def test_listing_by_status_is_an_unsupported_operation(rpc: Rpc) -> None:
    error = rpc.error("ListTasks", {"status": "TASK_STATE_WORKING"})
    assert error["code"] == -32004


@pytest.fixture
def busy_context(rpc: Rpc) -> Iterator[str]:
    """A context with a task in flight (the fake LLM hangs until it is canceled)."""
    stream = rpc.open("SendStreamingMessage", {"message": user_message("[[hang]] wait")})
    task = stream.next()["result"]["task"]
    yield task["contextId"]
    rpc.result("CancelTask", {"id": task["id"]})
    stream.close()


def test_a_message_to_a_context_with_a_task_in_flight_is_an_unsupported_operation(
    rpc: Rpc, busy_context: str
) -> None:
    error = rpc.error("SendMessage", {"message": user_message("me too", contextId=busy_context)})
    assert error["code"] == -32004 and error["data"][0]["metadata"]["grpcStatus"] == (
        "FAILED_PRECONDITION"
    )


@pytest.mark.parametrize(
    "method",
    [
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
    ],
)
def test_push_notification_methods_on_an_unknown_task_are_task_not_found(
    rpc: Rpc, method: str
) -> None:
    error = rpc.error(method, {"taskId": "t", "id": "c", "url": "https://example.com/hook"})
    assert error["code"] == -32001 and _reason(error) == "TASK_NOT_FOUND"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("https://169.254.169.254/hook", "cloud metadata address"),
        ("https://[64:ff9b::a9fe:a9fe]/latest/meta-data/", "cloud metadata address inside"),
        ("https://[::7f00:1]:39399/", "loopback address inside"),
        ("https://[2002:a9fe:a9fe::]/", "cloud metadata address inside"),
        ("https://[fec0::1]/", "deprecated site-local address"),
        ("https://0x7f000001/", "loopback address"),
        ("https://2130706433/", "loopback address"),
        ("https://127.1/", "loopback address"),
        ("https://foo.localhost/", "loopback address"),
    ],
)
def test_a_message_asking_for_pushes_to_a_refused_url_is_invalid_params(
    rpc: Rpc, url: str, why: str
) -> None:
    config = {"taskPushNotificationConfig": {"url": url}}
    error = rpc.error("SendMessage", {"message": user_message("hi"), "configuration": config})
    assert error["code"] == -32602
    assert why in error["message"], error["message"]


@pytest.mark.parametrize(
    "part",
    [
        {"raw": "JVBERi0=", "mediaType": "application/pdf", "filename": "a.pdf"},
        {"url": "https://example.com/a.pdf", "mediaType": "application/pdf"},
        {"url": "https://example.com/picture"},
    ],
)
def test_a_file_that_is_not_an_image_is_content_type_not_supported(
    rpc: Rpc, part: dict[str, Any]
) -> None:
    message = user_message("see attached")
    message["parts"].append(part)
    error = rpc.error("SendMessage", {"message": message})
    assert error["code"] == -32005 and error["data"][0]["metadata"]["field"] == "message.parts[1]"


@pytest.mark.parametrize(
    ("part", "field", "says"),
    [
        ({"raw": "", "mediaType": "image/png"}, "message.parts[1].raw", "is empty"),
        (
            {"url": "file:///etc/passwd", "mediaType": "image/png"},
            "message.parts[1].url",
            "must be",
        ),
        (
            {"url": "javascript:alert(1)", "mediaType": "image/png"},
            "message.parts[1].url",
            "must be",
        ),
        (
            {"url": "data:text/html,x", "mediaType": "image/png"},
            "message.parts[1].url",
            "is a data",
        ),
    ],
)
def test_an_image_the_llm_may_not_be_sent_is_refused_naming_the_a2a_field(
    rpc: Rpc, part: dict[str, Any], field: str, says: str
) -> None:
    message = user_message("see attached")
    message["parts"].append(part)
    error = rpc.error("SendMessage", {"message": message})
    assert error["code"] == -32602, error
    assert error["message"].startswith(f"{field}: {says}"), error["message"]
    assert error["data"][0]["metadata"]["field"] == field
    assert "content[" not in error["message"]


def test_a_malformed_context_id_to_list_by_is_invalid_params_naming_context_id(rpc: Rpc) -> None:
    error = rpc.error("ListTasks", {"contextId": "bad id!"})
    assert error["code"] == -32602 and error["data"][0]["metadata"]["field"] == "contextId"
    assert error["message"].startswith("contextId: is not a valid context id")
    assert "session" not in error["message"] and "bad id!" not in error["message"]


def test_a_peer_that_accepts_no_text_is_content_type_not_supported(rpc: Rpc) -> None:
    config = {"acceptedOutputModes": ["application/json"]}
    error = rpc.error("SendMessage", {"message": user_message("hi"), "configuration": config})
    assert error["code"] == -32005


def test_the_extended_card_is_not_configured_without_a_public_url_off_loopback(
    make_app: Callable[..., Flask],
) -> None:
    rpc = Rpc(make_app(AGENTIK_HTTP_ADDR="0.0.0.0:8080").test_client())
    error = rpc.error("GetExtendedAgentCard")
    assert error["code"] == -32007 and "AGENTIK_PUBLIC_URL" in error["message"]


@pytest.mark.parametrize("version", ["2.0", "0.2", "latest"])
def test_an_unsupported_version_is_version_not_supported(rpc: Rpc, version: str) -> None:
    error = rpc.error("GetTask", {"id": "x"}, headers={"A2A-Version": version})
    assert error["code"] == -32009 and _reason(error) == "VERSION_NOT_SUPPORTED"
    assert error["data"][0]["metadata"]["supportedVersions"] == "1.0,0.3"


def test_a_1_0_method_without_the_version_header_is_read_as_0_3_and_refused(rpc: Rpc) -> None:
    error = rpc.error("GetTask", {"id": "x"}, headers={})
    assert error["code"] == -32009 and "A2A-Version: 1.0" in error["message"]


def test_a_0_3_method_sent_as_1_0_is_refused_with_the_1_0_name(rpc: Rpc) -> None:
    error = rpc.error("tasks/get", {"id": "x"})
    assert error["code"] == -32009 and "GetTask" in error["message"]


def test_a_patch_version_of_1_0_is_1_0(rpc: Rpc) -> None:
    error = rpc.error("GetTask", {"id": "x"}, headers={"A2A-Version": "1.0.3"})
    assert error["code"] == -32001


@pytest.mark.parametrize(
    ("method", "headers"),
    [
        ("GetTask", V10),
        ("CancelTask", V10),
        ("SubscribeToTask", V10),
        ("tasks/get", {}),
        ("tasks/cancel", {}),
    ],
)
def test_a_huge_task_id_is_refused_by_the_id_rule_and_never_echoed_whole(
    rpc: Rpc, method: str, headers: dict[str, str]
) -> None:
    huge = "x" * 900_000
    error = rpc.error(method, {"id": huge}, headers=headers)
    assert error["code"] == -32602 and _reason(error) == "INVALID_PARAMS", error["message"][:200]
    assert "not a valid task id" in error["message"]
    assert len(json.dumps(error)) < 1000


@pytest.mark.parametrize("bad", ["../etc", "a b", "é", "."])
def test_a_task_id_outside_the_id_rule_is_invalid_params_naming_the_rule(
    rpc: Rpc, bad: str
) -> None:
    error = rpc.error("GetTask", {"id": bad})
    assert error["code"] == -32602 and "1 to 128 characters" in error["message"]
