"""A2A 0.3 peers: no A2A-Version header, the 0.3 method names and shapes (``kind`` fields)."""

from __future__ import annotations

import uuid
from typing import Any

from flask.testing import FlaskClient

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
