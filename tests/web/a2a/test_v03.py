"""A2A 0.3 peers: no A2A-Version header, the 0.3 method names and shapes (``kind`` fields)."""

from __future__ import annotations

import itertools
import json
import uuid
from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.fakes.fake_openai import FakeOpenAI
from tests.web.a2a.conftest import Rpc

NO_VERSION: dict[str, str] = {}


def _message(*texts: str, **ids: str) -> dict[str, Any]:
    parts = [{"kind": "text", "text": text} for text in texts]
    return {"kind": "message", "messageId": uuid.uuid4().hex, "role": "user", "parts": parts, **ids}


def test_message_send_as_the_seed_describes_answers_one_agent_message(client: FlaskClient) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/send",
        "params": {"message": _message("Hello, ", "agent")},
    }
    response = client.post("/", json=body)
    assert response.status_code == 200
    reply = response.get_json()
    assert reply["jsonrpc"] == "2.0" and reply["id"] == 1
    answer = reply["result"]
    assert answer["kind"] == "message" and answer["role"] == "agent"
    assert answer["parts"] == [{"kind": "text", "text": "Echo: Hello, agent"}]
    assert answer["contextId"] and answer["taskId"] and answer["messageId"]


def test_message_send_with_the_returned_context_continues_the_conversation(rpc: Rpc) -> None:
    first = rpc.result("message/send", {"message": _message("one")}, headers=NO_VERSION)
    second = rpc.result(
        "message/send",
        {"message": _message("two", contextId=first["contextId"])},
        headers={"A2A-Version": "0.3"},
    )
    assert second["contextId"] == first["contextId"] and second["taskId"] != first["taskId"]
    task = rpc.result("tasks/get", {"id": second["taskId"]}, headers=NO_VERSION)
    assert task["kind"] == "task" and task["status"]["state"] == "completed"
    assert [m["role"] for m in task["history"]] == ["user", "agent"]
    assert task["artifacts"][0]["parts"] == [{"kind": "text", "text": "Echo: two"}]


def test_a_failed_message_send_answers_with_the_failed_task(rpc: Rpc) -> None:
    result = rpc.result(
        "message/send", {"message": _message("[[error:500]] x")}, headers=NO_VERSION
    )
    assert result["kind"] == "task" and result["status"]["state"] == "failed"
    assert result["status"]["message"]["role"] == "agent"


def test_message_stream_sends_0_3_events_and_marks_the_last_final(rpc: Rpc) -> None:
    replies = rpc.stream(
        "message/stream", {"message": _message("streamed words")}, headers=NO_VERSION
    )
    kinds = [r["result"]["kind"] for r in replies]
    assert kinds[:2] == ["task", "status-update"] and kinds[-1] == "status-update"
    assert set(kinds[2:-1]) == {"artifact-update"}
    last = replies[-1]["result"]
    assert last["final"] is True and last["status"]["state"] == "completed"
    assert replies[1]["result"]["final"] is False
    text = "".join(r["result"]["artifact"]["parts"][0]["text"] for r in replies[2:-1])
    assert text == "Echo: streamed words"


def test_tasks_cancel_of_a_finished_task_is_not_cancelable(rpc: Rpc) -> None:
    done = rpc.result("message/send", {"message": _message("quick")}, headers=NO_VERSION)
    error = rpc.error("tasks/cancel", {"id": done["taskId"]}, headers=NO_VERSION)
    assert error["code"] == -32002


def test_0_3_params_errors_name_the_field(rpc: Rpc) -> None:
    message = {"kind": "message", "role": "user", "parts": [{"kind": "text", "text": "hi"}]}
    error = rpc.error("message/send", {"message": message}, headers=NO_VERSION)
    assert error["code"] == -32602 and error["data"][0]["metadata"]["field"] == "message.messageId"


def test_tasks_get_of_an_unknown_task_is_task_not_found(rpc: Rpc) -> None:
    assert rpc.error("tasks/get", {"id": "nope"}, headers=NO_VERSION)["code"] == -32001


def _file_message(file: dict[str, Any]) -> dict[str, Any]:
    part = {"kind": "file", "file": {"mimeType": "image/png", **file}}
    return {"kind": "message", "messageId": uuid.uuid4().hex, "role": "user", "parts": [part]}


def _tasks_stored(rpc: Rpc) -> int:
    total: int = rpc.result("ListTasks", {"pageSize": 1})["totalSize"]
    return total


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ("aGVsbG8", "is not valid base64"),  # unpadded: the SDK's decoding raised (-32603)
        ("a", "is not valid base64"),
        ("!!!", "is not valid base64"),  # not base64: the SDK's decoding made it b""
        ("@@@@", "is not valid base64"),
        ("aGVs\nbG8=", "is not valid base64"),
        ("", "is empty"),
    ],
)
def test_file_bytes_that_are_not_strict_base64_are_invalid_params_and_nothing_is_stored(
    rpc: Rpc, data: str, says: str
) -> None:
    before = _tasks_stored(rpc)
    error = rpc.error("message/send", {"message": _file_message({"bytes": data})}, headers={})
    assert error["code"] == -32602, error
    field = "message.parts[0].file.bytes"
    assert error["data"][0]["metadata"]["field"] == field
    assert error["message"].startswith(f"{field}: {says}")
    assert _tasks_stored(rpc) == before


def test_file_bytes_in_strict_base64_are_taken(rpc: Rpc) -> None:
    reply = rpc.result(
        "message/send", {"message": _file_message({"bytes": "iVBORw0KGgo="})}, headers={}
    )
    assert reply["kind"] == "message" and reply["role"] == "agent"


@pytest.mark.parametrize(
    "uri", ["file:///etc/passwd", "javascript:alert(1)", "//example.com/a.png"]
)
def test_a_file_uri_the_llm_may_not_be_sent_is_refused_naming_the_0_3_field(
    rpc: Rpc, uri: str
) -> None:
    error = rpc.error("message/send", {"message": _file_message({"uri": uri})}, headers={})
    assert error["code"] == -32602, error
    assert error["message"].startswith("message.parts[0].file.uri: must be an http(s) URL")


@pytest.mark.parametrize(
    ("part", "field", "says"),
    [
        ({"kind": "data", "data": [1, 2]}, "message.parts[0].data", "must be an object"),
        ({"kind": "text"}, "message.parts[0].text", "is required"),
        ({"kind": "text", "text": 5}, "message.parts[0].text", "must be a string"),
        ({"kind": "bogus"}, "message.parts[0].kind", "must be one of 'text', 'file', 'data'"),
        ({"kind": "file", "file": {"bytes": 5}}, "message.parts[0].file.bytes", "must be a string"),
        (5, "message.parts[0]", "must be an object"),
    ],
)
def test_a_0_3_part_error_names_the_member_its_kind_says_it_is(
    rpc: Rpc, part: Any, field: str, says: str
) -> None:
    message = {"kind": "message", "messageId": uuid.uuid4().hex, "role": "user", "parts": [part]}
    error = rpc.error("message/send", {"message": message}, headers={})
    assert error["code"] == -32602, error
    assert error["message"] == f"{field}: {says}"


def _raw_send(client: FlaskClient, file_json: str) -> dict[str, Any]:
    """``message/send`` of one file part whose ``file`` object is ``file_json``, as written
    (its fields in that order); the reply's result."""
    message = _message()
    message["parts"] = [{"kind": "file", "file": "FILE"}]
    request = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
    body = json.dumps(request).replace('"FILE"', file_json)
    response = client.post("/", data=body, content_type="application/json")
    assert response.status_code == 200
    reply: dict[str, Any] = response.get_json()
    assert "error" not in reply, reply
    result: dict[str, Any] = reply["result"]
    return result


@pytest.mark.parametrize(
    ("fields", "to_the_llm"),
    [
        (
            ('"uri": "https://example.com/cat.png"', '"mimeType": "image/png"', '"name": "cat"'),
            {"url": "https://example.com/cat.png"},
        ),
        (
            ('"bytes": "iVBORw0KGgo="', '"mimeType": "image/png"', '"name": "cat"'),
            {"url": "data:image/png;base64,iVBORw0KGgo="},
        ),
    ],
    ids=["uri", "bytes"],
)
def test_a_file_part_is_read_the_same_whatever_the_order_of_its_fields(
    client: FlaskClient, llm: FakeOpenAI, fields: tuple[str, ...], to_the_llm: dict[str, str]
) -> None:
    """A review said a file's ``uri`` before or after its ``mimeType`` changed how the part
    is read: in every order the LLM gets the same image, and the task keeps the same part."""
    seen_by_llm, kept = [], []
    for order in itertools.permutations(fields):
        asked = len(llm.requests)
        answer = _raw_send(client, "{" + ", ".join(order) + "}")
        (request,) = llm.requests[asked:]
        seen_by_llm.append(request["messages"][-1]["content"])
        task = Rpc(client).result("tasks/get", {"id": answer["taskId"]}, headers=NO_VERSION)
        kept.append([m["parts"] for m in task["history"] if m["role"] == "user"])
    assert seen_by_llm == [[{"type": "image_url", "image_url": to_the_llm}]] * 6
    assert all(parts == kept[0] for parts in kept), kept
    ((part,),) = kept[0]
    assert part["kind"] == "file" and part["file"]["mimeType"] == "image/png"


@pytest.mark.parametrize(
    "file",
    [
        {"bytes": "iVBORw0KGgo=", "uri": "https://example.com/cat.png"},
        {"uri": "https://example.com/cat.png", "bytes": "iVBORw0KGgo="},
    ],
)
def test_a_file_with_both_bytes_and_a_uri_is_refused_not_half_read(
    rpc: Rpc, file: dict[str, str]
) -> None:
    """The SDK's model took the bytes and dropped the URI without a word; A2A 1.0 refuses
    a part with both ``raw`` and ``url``."""
    before = _tasks_stored(rpc)
    error = rpc.error("message/send", {"message": _file_message(file)}, headers={})
    assert error["code"] == -32602, error
    assert error["message"] == "message.parts[0].file: holds both bytes and uri; send one of them"
    assert _tasks_stored(rpc) == before
