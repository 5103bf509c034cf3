"""ProtoJSON params are read strictly: a value not of its field's type is InvalidParams
naming the field as the peer wrote it, in our words, never Python's exception text; an
unknown enum name (``ListTasks`` ``status``) is refused, not dropped."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.web.a2a.conftest import V10, Rpc, user_message

STATES = (
    "TASK_STATE_SUBMITTED, TASK_STATE_WORKING, TASK_STATE_COMPLETED, TASK_STATE_FAILED, "
    "TASK_STATE_CANCELED, TASK_STATE_INPUT_REQUIRED, TASK_STATE_REJECTED, "
    "TASK_STATE_AUTH_REQUIRED"
)


def _refused(error: dict[str, Any], field: str) -> str:
    assert error["code"] == -32602, error
    assert error["data"][0]["metadata"]["field"] == field, error
    message: str = error["message"]
    assert message.startswith(f"{field}: "), message
    for python in ("invalid literal", "object is not", "Couldn't parse", "Traceback"):
        assert python not in message
    return message.removeprefix(f"{field}: ")


@pytest.mark.parametrize(
    ("params", "field", "says"),
    [
        ({"pageSize": "abc"}, "pageSize", "must be an integer"),
        ({"pageSize": 1.5}, "pageSize", "must be an integer"),
        ({"pageSize": True}, "pageSize", "must be an integer"),
        ({"pageSize": "9" * 30}, "pageSize", "must be an integer between -2147483648 and"),
        ({"pageSize": 2**31}, "pageSize", "must be an integer between -2147483648 and"),
        ({"includeArtifacts": "yes"}, "includeArtifacts", "must be true or false"),
        ({"contextId": 5}, "contextId", "must be a string"),
        ({"statusTimestampAfter": 5}, "statusTimestampAfter", "must be an RFC 3339 timestamp"),
        ({"status": "BOGUS"}, "status", f"must be one of {STATES}"),
        ({"status": 99}, "status", f"must be one of {STATES}"),
        ({"status": ["TASK_STATE_WORKING"]}, "status", "must be one of"),
    ],
)
def test_list_tasks_params_of_the_wrong_type_are_refused_naming_the_field(
    rpc: Rpc, params: dict[str, Any], field: str, says: str
) -> None:
    assert _refused(rpc.error("ListTasks", params), field).startswith(says)


def test_a_known_status_is_still_the_unsupported_filter_not_an_unknown_value(rpc: Rpc) -> None:
    assert rpc.error("ListTasks", {"status": "TASK_STATE_COMPLETED"})["code"] == -32004
    assert rpc.error("ListTasks", {"status": 3})["code"] == -32004


def test_rest_list_tasks_query_values_are_refused_the_same_way(client: FlaskClient) -> None:
    for query, field, says in [
        ("status=BOGUS", "status", "must be one of TASK_STATE_SUBMITTED"),
        ("pageSize=abc", "pageSize", "must be an integer"),
    ]:
        response = client.get(f"/a2a/tasks?{query}", headers=V10)
        assert response.status_code == 400, response.get_data()
        error = response.get_json()["error"]
        assert error["status"] == "INVALID_ARGUMENT"
        assert error["message"].startswith(f"{field}: {says}"), error["message"]


def _sent(**fields: Any) -> dict[str, Any]:
    return {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "x"}], **fields}


@pytest.mark.parametrize(
    ("message", "field", "says"),
    [
        (5, "message", "must be an object"),
        ("hi", "message", "must be an object"),
        (_sent(parts={"text": "x"}), "message.parts", "must be a list"),
        (_sent(parts=[{"text": "x"}, 5]), "message.parts[1]", "must be an object"),
        (_sent(parts=[None]), "message.parts[0]", "must not be null"),
        (_sent(parts=[{"text": 7}]), "message.parts[0].text", "must be a string"),
        (_sent(role="ROLE_BOGUS"), "message.role", "must be one of ROLE_USER, ROLE_AGENT"),
        (_sent(metadata=[1]), "message.metadata", "must be an object"),
    ],
)
def test_send_message_params_of_the_wrong_type_are_refused_naming_the_field_with_its_index(
    rpc: Rpc, message: Any, field: str, says: str
) -> None:
    assert _refused(rpc.error("SendMessage", {"message": message}), field) == says


@pytest.mark.parametrize("raw", ["!!!", "@@@@", "aGVsbG8==", "a", "aGVs bG8=", "aGVsbG8=x"])
def test_raw_bytes_that_are_not_base64_are_refused_not_read_leniently(rpc: Rpc, raw: str) -> None:
    message = user_message("see")
    message["parts"].append({"raw": raw, "mediaType": "image/png"})
    says = _refused(rpc.error("SendMessage", {"message": message}), "message.parts[1].raw")
    assert says == "must be base64 (standard or URL-safe alphabet)"


@pytest.mark.parametrize("raw", ["aGVsbG8=", "aGVsbG8", "_-8=", "+/8="])
def test_raw_bytes_in_any_base64_protojson_takes_are_accepted(rpc: Rpc, raw: str) -> None:
    message = user_message("see")
    message["parts"].append({"raw": raw, "mediaType": "image/png"})
    task = rpc.result("SendMessage", {"message": message})["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"


def test_unknown_fields_are_still_ignored_and_null_is_unset(rpc: Rpc) -> None:
    page = rpc.result("ListTasks", {"pageSize": None, "noSuchField": {"x": [1]}, "status": None})
    assert page["pageSize"] == 50
