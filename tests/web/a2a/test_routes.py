"""A2A 1.0 methods over the in-process app and a real engine (fake LLM)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from flask.testing import FlaskClient

from tests.web.a2a.conftest import Rpc, user_message


def _send(rpc: Rpc, text: str, **kwargs: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"message": user_message(text, **kwargs.pop("ids", {})), **kwargs}
    task: dict[str, Any] = rpc.result("SendMessage", params)["task"]
    return task


def _answer(task: dict[str, Any]) -> str:
    return "".join(p["text"] for a in task["artifacts"] for p in a["parts"])


def test_send_message_without_a_context_starts_one_and_answers_with_a_completed_task(
    rpc: Rpc,
) -> None:
    message = user_message("hello")
    task = rpc.result("SendMessage", {"message": message})["task"]
    assert task["contextId"] and task["id"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED" and task["status"]["timestamp"]
    assert task["artifacts"] == [
        {
            "artifactId": task["history"][1]["messageId"],
            "name": "answer",
            "parts": [{"text": "Echo: hello"}],
        }
    ]
    user, agent = task["history"]
    assert user["messageId"] == message["messageId"] and user["role"] == "ROLE_USER"
    assert agent["role"] == "ROLE_AGENT" and agent["parts"] == [{"text": "Echo: hello"}]
    assert {user["contextId"], agent["contextId"]} == {task["contextId"]}
    assert {user["taskId"], agent["taskId"]} == {task["id"]}


def test_get_task_answers_what_send_message_answered(rpc: Rpc) -> None:
    sent = _send(rpc, "remember me")
    got = rpc.result("GetTask", {"id": sent["id"]})
    sent["status"].pop("timestamp"), got["status"].pop("timestamp")
    assert got == sent


def test_get_task_with_a_history_length_keeps_the_latest_messages(rpc: Rpc) -> None:
    sent = _send(rpc, "short history")
    got = rpc.result("GetTask", {"id": sent["id"], "historyLength": 1})
    assert [m["role"] for m in got["history"]] == ["ROLE_AGENT"]
    assert "history" not in rpc.result("GetTask", {"id": sent["id"], "historyLength": 0})


def test_a_data_part_reaches_the_model_as_json_text(rpc: Rpc) -> None:
    message = user_message("order:")
    message["parts"].append({"data": {"item": "tea", "count": 2}})
    task = rpc.result("SendMessage", {"message": message})["task"]
    answer = _answer(task)
    assert answer.startswith("Echo: order:")
    assert json.loads(answer.removeprefix("Echo: order:")) == {"item": "tea", "count": 2}


def test_an_image_part_is_stored_as_an_image_of_the_conversation(
    rpc: Rpc, client: FlaskClient
) -> None:
    message = user_message("look")
    message["parts"].append({"url": "https://example.com/cat.png", "mediaType": "image/png"})
    task = rpc.result("SendMessage", {"message": message})["task"]
    assert task["history"][0]["parts"][1] == {
        "url": "https://example.com/cat.png",
        "mediaType": "image/png",
    }
    stored = client.get(f"/agentik/conversations/{task['contextId']}/messages").get_json()
    assert stored["items"][0]["content"][1] == {
        "type": "image",
        "url": "https://example.com/cat.png",
        "mime_type": "image/png",
    }


def test_a_failed_task_says_why_in_its_status_message(rpc: Rpc) -> None:
    task = _send(rpc, "[[error:500]] boom")
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    failure = task["status"]["message"]
    assert failure["role"] == "ROLE_AGENT" and failure["parts"][0]["text"]
    assert failure["metadata"]["code"] == "llm_server_error"
    assert rpc.result("GetTask", {"id": task["id"]})["status"]["message"] == failure


def test_return_immediately_answers_with_the_working_task_which_goes_on(rpc: Rpc) -> None:
    params = {
        "message": user_message("[[hang]] take your time"),
        "configuration": {"returnImmediately": True},
    }
    task = rpc.result("SendMessage", params)["task"]
    assert task["status"]["state"] == "TASK_STATE_WORKING"
    assert [m["role"] for m in task["history"]] == ["ROLE_USER"]
    assert rpc.result("GetTask", {"id": task["id"]})["status"]["state"] == "TASK_STATE_WORKING"
    canceled = rpc.result("CancelTask", {"id": task["id"]})
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"


def test_the_stream_sends_the_task_working_artifact_chunks_then_the_final_state(rpc: Rpc) -> None:
    replies = rpc.stream("SendStreamingMessage", {"message": user_message("three little words")})
    kinds = [next(iter(r["result"])) for r in replies]
    assert kinds[0] == "task" and kinds[1] == "statusUpdate" and kinds[-1] == "statusUpdate"
    assert set(kinds[2:-1]) == {"artifactUpdate"}
    task = replies[0]["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert replies[1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING"
    chunks = [r["result"]["artifactUpdate"] for r in replies[2:-1]]
    assert "".join(c["artifact"]["parts"][0]["text"] for c in chunks) == "Echo: three little words"
    assert [c.get("append", False) for c in chunks] == [False] + [True] * (len(chunks) - 1)
    assert [c.get("lastChunk", False) for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert chunks[-1]["artifact"]["parts"] == [{"text": ""}]
    final = replies[-1]["result"]["statusUpdate"]
    assert final["taskId"] == task["id"] and final["status"]["state"] == "TASK_STATE_COMPLETED"
    got = rpc.result("GetTask", {"id": task["id"]})
    assert got["status"]["state"] == "TASK_STATE_COMPLETED"
    assert got["artifacts"][0]["artifactId"] == chunks[0]["artifact"]["artifactId"]


def test_cancel_task_stops_a_slow_task_and_keeps_its_partial_answer(rpc: Rpc) -> None:
    stream = rpc.open("SendStreamingMessage", {"message": user_message("[[hang]] never ends")})
    try:
        task = stream.next()["result"]["task"]
        while "artifactUpdate" not in stream.next()["result"]:
            pass
        canceled = rpc.result("CancelTask", {"id": task["id"]})
        assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
        assert _answer(canceled) == "Echo: "
        rest = stream.rest()
    finally:
        stream.close()
    assert rest[-1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert rpc.result("GetTask", {"id": task["id"]})["status"]["state"] == "TASK_STATE_CANCELED"


def test_subscribe_to_task_sends_the_task_then_the_answer_from_its_start_then_the_end(
    rpc: Rpc,
) -> None:
    sender = rpc.open("SendStreamingMessage", {"message": user_message("[[hang]] go on")})
    try:
        task = sender.next()["result"]["task"]
        while "artifactUpdate" not in sender.next()["result"]:
            pass  # the first chunk is out: the watcher must get it again
        watcher = rpc.open("SubscribeToTask", {"id": task["id"]})
        try:
            first = watcher.next()["result"]["task"]
            replayed = watcher.next()["result"]
            rpc.result("CancelTask", {"id": task["id"]})
            watched = watcher.rest()
        finally:
            watcher.close()
    finally:
        sender.close()
    assert first["id"] == task["id"] and first["status"]["state"] == "TASK_STATE_WORKING"
    assert [m["role"] for m in first["history"]] == ["ROLE_USER"] and "artifacts" not in first
    chunks = [replayed] + [r["result"] for r in watched if "artifactUpdate" in r["result"]]
    assert replayed["artifactUpdate"]["artifact"]["parts"] == [{"text": "Echo: "}]
    assert replayed["artifactUpdate"].get("append", False) is False
    assert "".join(c["artifactUpdate"]["artifact"]["parts"][0]["text"] for c in chunks) == "Echo: "
    assert watched[-1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"


def test_list_tasks_pages_a_context_newest_first(rpc: Rpc) -> None:
    first = _send(rpc, "first")
    context = {"contextId": first["contextId"]}
    second = _send(rpc, "second", ids=context)
    third = _send(rpc, "third", ids=context)
    page = rpc.result("ListTasks", {**context, "pageSize": 2})
    assert [t["id"] for t in page["tasks"]] == [third["id"], second["id"]]
    assert page["totalSize"] == 3 and page["pageSize"] == 2 and page["nextPageToken"]
    assert all("artifacts" not in t for t in page["tasks"])
    assert len(page["tasks"][0]["history"]) == 2
    rest = rpc.result(
        "ListTasks",
        {**context, "pageSize": 2, "pageToken": page["nextPageToken"], "includeArtifacts": True},
    )
    assert [t["id"] for t in rest["tasks"]] == [first["id"]] and rest["nextPageToken"] == ""
    assert _answer(rest["tasks"][0]) == "Echo: first"


def test_list_tasks_of_an_unknown_context_is_empty(rpc: Rpc) -> None:
    page = rpc.result("ListTasks", {"contextId": "no-such-context"})
    assert page["tasks"] == [] and page["totalSize"] == 0


def test_two_turns_over_one_context_are_one_conversation_for_agentik(
    rpc: Rpc, client: FlaskClient
) -> None:
    first = _send(rpc, "my name is Ada")
    second = _send(rpc, "what is my name?", ids={"contextId": first["contextId"]})
    assert second["contextId"] == first["contextId"]
    stored = client.get(f"/agentik/conversations/{first['contextId']}/messages").get_json()
    texts = [(m["role"], m["content"][0]["text"]) for m in stored["items"]]
    assert texts == [
        ("user", "my name is Ada"),
        ("assistant", "Echo: my name is Ada"),
        ("user", "what is my name?"),
        ("assistant", "Echo: what is my name?"),
    ]
    assert [m["id"] for m in stored["items"]] == [
        first["history"][0]["messageId"],
        first["history"][1]["messageId"],
        second["history"][0]["messageId"],
        second["history"][1]["messageId"],
    ]


def test_a_context_made_by_agentik_is_a_context_for_a2a(rpc: Rpc, client: FlaskClient) -> None:
    conversation = client.post("/agentik/conversations", json={"title": "shared"}).get_json()
    task = _send(rpc, "hi from a peer", ids={"contextId": conversation["id"]})
    assert task["contextId"] == conversation["id"]
    assert client.get(f"/agentik/conversations/{conversation['id']}").get_json()["count"] == 2


def test_the_stream_is_json_rpc_over_sse_with_no_cache(rpc: Rpc) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 9,
        "method": "SendStreamingMessage",
        "params": {"message": user_message("hdr")},
    }
    response = rpc.client.post("/", json=body, headers={"A2A-Version": "1.0"})
    assert response.mimetype == "text/event-stream"
    assert response.headers["Cache-Control"] == "no-cache"
    frames = [
        json.loads(line[6:])
        for line in response.get_data(as_text=True).split("\n")
        if line.startswith("data: ")
    ]
    assert all(f["id"] == 9 and "result" in f for f in frames)


def test_get_task_by_a_run_id_reused_on_another_thread_is_the_first_threads_task(
    rpc: Rpc, client: FlaskClient
) -> None:
    run_id = uuid.uuid4().hex

    def agui_run(thread_id: str, text: str) -> Any:
        body = {
            "threadId": thread_id,
            "runId": run_id,
            "messages": [{"id": uuid.uuid4().hex, "role": "user", "content": text}],
        }
        return client.post("/agui", json=body, headers={"Accept": "text/event-stream"})

    first = agui_run("thread-1-" + run_id, "first thread")
    assert first.status_code == 200 and b"RUN_FINISHED" in first.get_data()
    second = agui_run("thread-2-" + run_id, "second thread")
    assert second.status_code == 409, second.get_data()
    task = rpc.result("GetTask", {"id": run_id})
    assert task["contextId"] == "thread-1-" + run_id
    assert _answer(task) == "Echo: first thread"
