"""A2A: the tokens a task used are in its metadata, and each run's on its final status
update (issue 21). They are counts: integers on the wire (``"inputTokens":40``), although the
metadata is a protobuf ``Struct`` whose numbers are doubles (``40.0`` as ``MessageToDict``
gives them)."""

from __future__ import annotations

import re
from typing import Any

from flask.testing import FlaskClient

from tests.fakes.fake_openai import FakeOpenAI, FakeReply
from tests.web.a2a.conftest import Rpc, user_message

V10 = {"A2A-Version": "1.0"}


def _counts(usage: dict[str, Any]) -> dict[str, tuple[type, object]]:
    """Each count with its JSON type (``40`` and ``40.0`` are equal in Python, not in type)."""
    return {name: (type(value), value) for name, value in usage.items()}


def _ints(usage: dict[str, int]) -> dict[str, tuple[type, object]]:
    return {name: (int, value) for name, value in usage.items()}


def test_a_task_carries_its_token_usage_in_its_metadata_as_integers(
    rpc: Rpc, llm: FakeOpenAI
) -> None:
    llm.enqueue(FakeReply(text="counted", usage=(40, 2), cached_tokens=32))
    task = rpc.result("SendMessage", {"message": user_message("hi")})["task"]
    usage = {"inputTokens": 40, "outputTokens": 2, "totalTokens": 42, "cachedTokens": 32}
    assert _counts(task["metadata"]["usage"]) == _ints(usage)
    assert task["metadata"] == {"usage": usage}
    got = rpc.result("GetTask", {"id": task["id"]})
    assert _counts(got["metadata"]["usage"]) == _ints(usage)
    listed = rpc.result("ListTasks", {"contextId": task["contextId"]})["tasks"]
    assert _counts(listed[0]["metadata"]["usage"]) == _ints(usage)


def test_the_final_status_update_carries_the_runs_usage_as_integers(
    rpc: Rpc, llm: FakeOpenAI
) -> None:
    llm.enqueue(FakeReply(text="streamed", usage=(12, 3)))
    replies = rpc.stream("SendStreamingMessage", {"message": user_message("go")})
    final = replies[-1]["result"]["statusUpdate"]
    assert final["status"]["state"] == "TASK_STATE_COMPLETED"
    assert _counts(final["metadata"]["usage"]) == _ints(
        {"inputTokens": 12, "outputTokens": 3, "totalTokens": 15, "cachedTokens": 0}
    )


def test_the_http_json_binding_and_a2a_0_3_send_the_usage_as_integers(
    client: FlaskClient, rpc: Rpc, llm: FakeOpenAI
) -> None:
    llm.enqueue(FakeReply(text="rest", usage=(26, 4)))
    sent = client.post("/a2a/message:send", json={"message": user_message("rest")}, headers=V10)
    assert sent.status_code == 200, sent.get_data()
    task = sent.get_json()["task"]
    assert re.search(rb'"inputTokens":26[,}]', sent.get_data()), sent.get_data()  # on the wire
    got = client.get(f"/a2a/tasks/{task['id']}", headers=V10).get_json()
    assert _counts(got["metadata"]["usage"])["inputTokens"] == (int, 26)

    llm.enqueue(FakeReply(text="old", usage=(7, 1)))
    parts = [{"kind": "text", "text": "hi"}]
    message = {"kind": "message", "messageId": "m-03", "role": "user", "parts": parts}
    answer = rpc.result("message/send", {"message": message}, headers={})  # 0.3: no version
    task03 = rpc.result("tasks/get", {"id": answer["taskId"]}, headers={})
    assert task03["kind"] == "task"
    assert _counts(task03["metadata"]["usage"])["inputTokens"] == (int, 7)
