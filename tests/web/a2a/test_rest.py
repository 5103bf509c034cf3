"""A2A's HTTP+JSON binding (spec §11) over the in-process app and a real engine: its paths,
its answers and its one error shape, a ``google.rpc.Status`` on the spec's HTTP status."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
from a2a.client.transports.rest import _parse_rest_error
from a2a.utils.errors import InternalError
from flask import Flask
from flask.testing import FlaskClient

from tests.web.a2a.conftest import V10, user_message
from web_facade.a2a.stream import RestStream
from web_facade.a2a.tasks import TaskFollow

A2A_JSON = "application/a2a+json"


def _send(client: FlaskClient, text: str, prefix: str = "/a2a", **ids: str) -> dict[str, Any]:
    response = client.post(
        f"{prefix}/message:send", json={"message": user_message(text, **ids)}, headers=V10
    )
    assert response.status_code == 200, response.get_data()
    assert response.mimetype == A2A_JSON
    task: dict[str, Any] = response.get_json()["task"]
    return task


def _error(response: Any, status: int, reason: str) -> dict[str, Any]:
    """The google.rpc.Status of a refusal, checked against the binding's shape."""
    assert response.status_code == status, response.get_data()
    assert response.mimetype == A2A_JSON
    body = response.get_json()
    assert set(body) == {"error"}
    error: dict[str, Any] = body["error"]
    assert error["code"] == status and isinstance(error["status"], str) and error["message"]
    info = error["details"][0]
    assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    assert (info["reason"], info["domain"]) == (reason, "a2a-protocol.org")
    return error


def _frames(response: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event name, JSON data) of each SSE frame; comments (heartbeats) skipped."""
    assert response.mimetype == "text/event-stream"
    text = response.get_data(as_text=True)
    assert text.endswith("\n\n")
    for block in text.split("\n\n")[:-1]:
        lines = [line for line in block.split("\n") if not line.startswith(":")]
        if not lines:
            continue
        event = next((x.removeprefix("event: ") for x in lines if x.startswith("event: ")), "")
        [data] = [x.removeprefix("data: ") for x in lines if x.startswith("data: ")]
        yield event or "message", json.loads(data)


def test_send_answers_the_task_and_get_and_list_read_it_back(client: FlaskClient) -> None:
    task = _send(client, "hello over rest")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "Echo: hello over rest"}]
    got = client.get(f"/a2a/tasks/{task['id']}", headers=V10)
    assert got.status_code == 200 and got.mimetype == A2A_JSON
    assert got.get_json()["artifacts"] == task["artifacts"]
    assert len(got.get_json()["history"]) == 2
    last = client.get(f"/a2a/tasks/{task['id']}?historyLength=1", headers=V10).get_json()
    assert [m["role"] for m in last["history"]] == ["ROLE_AGENT"]
    listed = client.get(
        f"/a2a/tasks?contextId={task['contextId']}&includeArtifacts=true&pageSize=5", headers=V10
    ).get_json()
    assert [t["id"] for t in listed["tasks"]] == [task["id"]]
    assert listed["tasks"][0]["artifacts"][0]["parts"][0]["text"] == "Echo: hello over rest"
    assert (listed["totalSize"], listed["pageSize"]) == (1, 5)
    bare = client.get(f"/a2a/tasks?contextId={task['contextId']}", headers=V10).get_json()
    assert "artifacts" not in bare["tasks"][0]


def test_a_second_message_in_the_context_is_the_same_conversation(client: FlaskClient) -> None:
    first = _send(client, "one")
    second = _send(client, "two", contextId=first["contextId"])
    assert second["contextId"] == first["contextId"] and second["id"] != first["id"]
    listed = client.get(f"/a2a/tasks?contextId={first['contextId']}", headers=V10).get_json()
    assert [t["id"] for t in listed["tasks"]] == [second["id"], first["id"]]


def test_the_stream_is_bare_stream_responses_task_working_artifacts_completed(
    client: FlaskClient,
) -> None:
    response = client.post(
        "/a2a/message:stream",
        json={"message": user_message("stream over rest")},
        headers={**V10, "Content-Type": A2A_JSON},
    )
    assert response.status_code == 200
    frames = list(_frames(response))
    assert {event for event, _ in frames} == {"message"}
    kinds = [next(iter(data)) for _, data in frames]
    assert kinds[:2] == ["task", "statusUpdate"] and kinds[-1] == "statusUpdate"
    assert set(kinds[2:-1]) == {"artifactUpdate"}
    assert frames[-1][1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    text = "".join(
        part["text"]
        for _, data in frames
        if "artifactUpdate" in data
        for part in data["artifactUpdate"]["artifact"]["parts"]
    )
    assert text == "Echo: stream over rest"


def test_an_agents_paths_start_its_own_conversations(client: FlaskClient) -> None:
    task = _send(client, "hello agent", prefix="/a2a/agentik")
    got = client.get(f"/a2a/agentik/tasks/{task['id']}", headers=V10)
    assert got.get_json()["status"]["state"] == "TASK_STATE_COMPLETED"
    card = client.get("/a2a/agentik/.well-known/agent-card.json").get_json()
    rest = [i for i in card["supportedInterfaces"] if i["protocolBinding"] == "HTTP+JSON"]
    assert rest == [
        {
            "url": "http://localhost/a2a/agentik",
            "protocolBinding": "HTTP+JSON",
            "protocolVersion": "1.0",
        }
    ]
    refused = client.post(
        "/a2a/nobody/message:send", json={"message": user_message("x")}, headers=V10
    )
    assert "nobody" in _error(refused, 404, "METHOD_NOT_FOUND")["message"]


def test_cancel_and_subscribe_of_a_finished_task_are_refused_as_the_spec_maps_them(
    client: FlaskClient,
) -> None:
    task = _send(client, "done already")
    canceled = client.post(f"/a2a/tasks/{task['id']}:cancel", headers=V10)
    assert _error(canceled, 400, "TASK_NOT_CANCELABLE")["status"] == "FAILED_PRECONDITION"
    subscribed = client.post(f"/a2a/tasks/{task['id']}:subscribe", headers=V10)
    assert "use GetTask" in _error(subscribed, 400, "UNSUPPORTED_OPERATION")["message"]
    wrong_method = client.get(f"/a2a/tasks/{task['id']}:cancel", headers=V10)
    _error(wrong_method, 405, "METHOD_NOT_FOUND")
    assert wrong_method.headers["Allow"] == "POST"


def test_push_configs_of_a_task_are_created_listed_read_and_deleted(client: FlaskClient) -> None:
    task = _send(client, "push me")
    base = f"/a2a/tasks/{task['id']}/pushNotificationConfigs"
    made = client.post(
        base, json={"id": "c1", "url": "https://hooks.example.com/a2a", "token": "t"}, headers=V10
    )
    assert made.status_code == 200, made.get_data()
    assert made.get_json()["taskId"] == task["id"] and made.get_json()["id"] == "c1"
    listed = client.get(base, headers=V10).get_json()
    assert [c["id"] for c in listed["configs"]] == ["c1"]
    assert client.get(f"{base}/c1", headers=V10).get_json()["url"] == (
        "https://hooks.example.com/a2a"
    )
    deleted = client.delete(f"{base}/c1", headers=V10)
    assert (deleted.status_code, deleted.get_json()) == (200, {})
    _error(client.get(f"{base}/c1", headers=V10), 404, "TASK_NOT_FOUND")
    other = client.post(base, json={"taskId": "another", "url": "https://h.example/"}, headers=V10)
    assert "taskId" in _error(other, 400, "INVALID_PARAMS")["message"]


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "reason"),
    [
        ("GET", "/a2a/tasks/no-such-task", {}, 404, "TASK_NOT_FOUND"),
        ("POST", "/a2a/tasks/no-such-task:cancel", {}, 404, "TASK_NOT_FOUND"),
        ("POST", "/a2a/tasks/no-such-task:subscribe", {}, 404, "TASK_NOT_FOUND"),
        ("GET", "/a2a/tasks/no-such-task/pushNotificationConfigs", {}, 404, "TASK_NOT_FOUND"),
        ("GET", "/a2a/tasks/a%20b", {}, 400, "INVALID_PARAMS"),
        ("GET", "/a2a/tasks?includeArtifacts=yes", {}, 400, "INVALID_PARAMS"),
        ("GET", "/a2a/tasks?pageSize=ten", {}, 400, "INVALID_PARAMS"),
        ("GET", "/a2a/tasks?pageSize=1000", {}, 400, "INVALID_PARAMS"),
        ("GET", "/a2a/tasks?status=TASK_STATE_WORKING", {}, 400, "UNSUPPORTED_OPERATION"),
        ("POST", "/a2a/message:send", {"data": b"{nope"}, 400, "PARSE_ERROR"),
        ("POST", "/a2a/message:send", {"data": b"[1, 2]"}, 400, "INVALID_REQUEST"),
        ("POST", "/a2a/message:send", {"data": b"{}"}, 400, "INVALID_PARAMS"),
        ("POST", "/a2a/message:send", {"json": {"message": {"parts": 7}}}, 400, "INVALID_PARAMS"),
        ("POST", "/a2a/message:send", {"data": b'{"a": 1e400}'}, 400, "INVALID_PARAMS"),
        ("POST", "/a2a/message:stream", {"data": b"{nope"}, 400, "PARSE_ERROR"),
        (
            "POST",
            "/a2a/message:send",
            {"json": {"message": user_message("x", taskId="no-such-task")}},
            404,
            "TASK_NOT_FOUND",
        ),
    ],
)
def test_bad_requests_get_a_clear_4xx_in_the_bindings_error_shape(
    client: FlaskClient,
    method: str,
    path: str,
    kwargs: dict[str, Any],
    status: int,
    reason: str,
) -> None:
    if "data" in kwargs:
        kwargs = {**kwargs, "content_type": "application/json"}
    response = client.open(path, method=method, headers=V10, **kwargs)
    _error(response, status, reason)


def test_the_extended_card_comes_with_its_cache_headers_and_a_304(client: FlaskClient) -> None:
    answer = client.get("/a2a/extendedAgentCard", headers=V10)
    assert answer.status_code == 200, answer.get_data()
    card = answer.get_json()
    assert card["capabilities"]["extendedAgentCard"] is True
    assert any(skill["id"].startswith("tool:") for skill in card["skills"])
    assert answer.headers["Cache-Control"].startswith("private")
    assert "Authorization" in answer.headers["Vary"]
    etag = answer.headers["ETag"]
    again = client.get("/a2a/extendedAgentCard", headers={**V10, "If-None-Match": etag})
    assert (again.status_code, again.get_data()) == (304, b"")
    _error(client.get("/a2a/nobody/extendedAgentCard", headers=V10), 404, "METHOD_NOT_FOUND")


def test_a_request_without_a2a_version_1_0_is_version_not_supported(client: FlaskClient) -> None:
    for headers in ({}, {"A2A-Version": "0.3"}, {"A2A-Version": "7.0"}):
        response = client.get("/a2a/tasks", headers=headers)
        error = _error(response, 400, "VERSION_NOT_SUPPORTED")
        assert error["status"] == "FAILED_PRECONDITION"


def test_a_body_over_the_limit_is_413_in_the_bindings_error_shape(
    make_app: Callable[..., Flask],
) -> None:
    client = make_app(AGENTIK_MAX_BODY_BYTES="2000").test_client()
    body = {"message": user_message("x" * 5000)}
    response = client.post("/a2a/message:send", json=body, headers=V10)
    error = _error(response, 413, "INVALID_REQUEST")
    assert "2000 bytes" in error["message"]


def test_a_subscriber_follows_a_running_task_to_its_end(client: FlaskClient) -> None:
    stream = client.post(
        "/a2a/message:stream",
        json={"message": user_message("[[slow:0.3]] follow me")},
        headers=V10,
        buffered=False,
    )
    try:
        chunk = next(iter(stream.response))
        assert isinstance(chunk, bytes)
        first = chunk.decode()
        task_id = json.loads(first.split("data: ", 1)[1].split("\n", 1)[0])["task"]["id"]
        watched = client.post(f"/a2a/tasks/{task_id}:subscribe", headers=V10)
        frames = [data for _, data in _frames(watched)]
    finally:
        stream.close()
    assert frames[0]["task"]["id"] == task_id
    assert frames[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_an_error_after_the_stream_opened_is_an_error_event_the_sdk_maps_back() -> None:
    follow = cast(TaskFollow, SimpleNamespace(relay=None, first=[]))
    frame = RestStream(follow, 1.0).on_end().decode()
    assert frame.startswith("event: error\ndata: ") and frame.endswith("\n\n")
    body = json.loads(frame.split("data: ", 1)[1])
    assert body["error"]["code"] == 500 and body["error"]["status"] == "INTERNAL"
    assert isinstance(_parse_rest_error(body, ""), InternalError)
