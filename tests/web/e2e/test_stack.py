"""The whole stack over real HTTP: engine process, gunicorn facade, a streaming client."""

from __future__ import annotations

import threading

import httpx
import pytest

from tests.web.e2e.conftest import WAIT, SseStream, Stack, checked, has, types, wait_for
from tests.web.sse_frames import Frame


def _conversation(http: httpx.Client, title: str = "") -> str:
    response = checked(http.post("/agentik/conversations", json={"title": title}))
    assert response.status_code == 201
    conversation_id: str = response.json()["id"]
    return conversation_id


def _send(http: httpx.Client, conversation_id: str, text: str) -> SseStream:
    return SseStream(
        http, "POST", f"/agentik/conversations/{conversation_id}/send", json={"text": text}
    )


def _replay(http: httpx.Client, conversation_id: str, after: int = 0) -> list[Frame]:
    path = f"/agentik/conversations/{conversation_id}/events?until_idle=true&after={after}"
    stream = SseStream(http, "GET", path)
    try:
        return stream.read_to_end()
    finally:
        stream.close()


def _idle(http: httpx.Client, conversation_id: str) -> bool:
    body = http.get(f"/agentik/conversations/{conversation_id}").json()
    return body["active_run_id"] is None


def _pairs(frames: list[Frame]) -> list[tuple[int | None, object]]:
    return [(f.id, f.data) for f in frames]


def test_a_conversation_lives_its_whole_lifecycle_over_http(http: httpx.Client) -> None:
    conversation_id = _conversation(http, "lifecycle")
    assert checked(http.get("/health")).json()["engine"] == "serving"
    first = _send(http, conversation_id, "hello over http").read_to_end()
    assert types(first)[0] == "message" and types(first)[-1] == "end"
    answer = "".join(f.data["text"] for f in first if f.type == "append_text")  # type: ignore[index]
    assert answer == "Echo: hello over http"
    _send(http, conversation_id, "second turn").read_to_end()

    got = checked(http.get(f"/agentik/conversations/{conversation_id}")).json()
    assert got["count"] == 4 and got["title"] == "lifecycle"
    listed = checked(http.get("/agentik/conversations", params={"limit": 1})).json()
    assert listed["items"][0]["id"] == conversation_id and listed["total"] >= 1
    history = checked(http.get(f"/agentik/conversations/{conversation_id}/messages")).json()
    assert [m["role"] for m in history["items"]] == ["user", "assistant"] * 2
    after = history["items"][1]["id"]
    rest = checked(
        http.get(f"/agentik/conversations/{conversation_id}/messages", params={"after": after})
    ).json()
    assert rest["items"] == history["items"][2:]
    renamed = checked(
        http.post(f"/agentik/conversations/{conversation_id}/rename", json={"title": "done"})
    )
    assert renamed.json()["title"] == "done"
    idle = checked(http.post(f"/agentik/conversations/{conversation_id}/interrupt"))
    assert idle.json() == {"interrupted": False}
    assert checked(http.delete(f"/agentik/conversations/{conversation_id}")).status_code == 204
    assert checked(http.get(f"/agentik/conversations/{conversation_id}")).status_code == 404
    assert checked(http.get("/agentik/openapi.json")).json()["openapi"].startswith("3.1")


def test_a_second_client_on_events_sees_the_turn_live_while_the_first_sends(
    stack: Stack, http: httpx.Client
) -> None:
    conversation_id = _conversation(http)
    with stack.client() as watcher_http:
        watcher = SseStream(watcher_http, "GET", f"/agentik/conversations/{conversation_id}/events")
        try:
            watcher.read_until(lambda _: bool(watcher.frames))  # subscribed: the retry hint came
            sender = _send(http, conversation_id, "shared live turn [[slow:0.02]]")
            first_token = sender.read_until(has("append_text"))
            # The watcher sees the turn while it is still streaming, not after.
            seen = watcher.read_until(has("append_text"))
            assert seen[0].id == first_token[0].id
            sent = sender.read_to_end()
            seen = watcher.read_until(has("end"))
            assert _pairs(seen) == _pairs(sent)
        finally:
            watcher.close()


def test_a_dropped_send_resumed_with_last_event_id_gets_exactly_what_it_missed(
    http: httpx.Client, stack: Stack
) -> None:
    conversation_id = _conversation(http)
    words = " ".join(f"w{i}" for i in range(30))
    sender = _send(http, conversation_id, f"{words} [[slow:0.01]]")
    got = sender.read_until(lambda events: len(events) >= 4)
    sender.close()  # the connection drops mid-turn
    last_id = got[-1].id
    assert last_id is not None
    with stack.client() as again:
        resumed = SseStream(
            again,
            "GET",
            f"/agentik/conversations/{conversation_id}/events?until_idle=true",
            headers={"Last-Event-ID": str(last_id)},
        )
        rest = resumed.read_to_end()
        resumed.close()
    assert types(rest)[-1] == "end"
    whole = _replay(http, conversation_id)
    assert _pairs(got) + _pairs(rest) == _pairs(whole)
    assert "".join(f.data["text"] for f in got + rest if f.type == "append_text").endswith("w29")  # type: ignore[index]


def test_an_interrupt_from_another_client_ends_the_turn_and_keeps_the_partial_answer(
    http: httpx.Client, stack: Stack
) -> None:
    conversation_id = _conversation(http)
    sender = _send(http, conversation_id, "a long story [[hang]]")
    sender.read_until(has("append_text"))
    with stack.client() as other:
        busy = checked(
            other.post(f"/agentik/conversations/{conversation_id}/send", json={"text": "me too"})
        )
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "busy"
        reply = checked(other.post(f"/agentik/conversations/{conversation_id}/interrupt"))
    assert reply.json()["interrupted"] is True
    events = sender.read_to_end()
    assert types(events)[-2:] == ["message", "interrupted"]
    assert events[-1].data["run_id"] == reply.json()["run_id"]  # type: ignore[index]
    history = checked(http.get(f"/agentik/conversations/{conversation_id}/messages")).json()
    last = history["items"][-1]
    assert last["role"] == "assistant" and last["status"] == "interrupted"
    assert last["content"][0]["text"].startswith("Echo")


def test_the_facade_restarted_mid_turn_then_resumed_with_last_event_id_loses_nothing(
    http: httpx.Client, stack: Stack
) -> None:
    conversation_id = _conversation(http)
    words = " ".join(f"r{i}" for i in range(60))
    sender = _send(http, conversation_id, f"{words} [[slow:0.02]]")
    got = sender.read_until(lambda events: len(events) >= 3)
    stack.web.stop()  # SIGTERM: gunicorn drains; the open stream ends at a frame boundary
    got = sender.read_to_end()
    sender.close()
    assert types(got)[-1] != "end", "the turn should outlive the facade"
    stack.start_web()
    with stack.client() as again:
        resumed = SseStream(
            again,
            "GET",
            f"/agentik/conversations/{conversation_id}/events?until_idle=true",
            headers={"Last-Event-ID": str(got[-1].id)},
        )
        rest = resumed.read_to_end()
        resumed.close()
        whole = _replay(again, conversation_id)  # the new facade listens on a new port
    assert types(whole)[-1] == "end"
    assert _pairs(got) + _pairs(rest) == _pairs(whole)


def test_many_clients_send_to_their_own_conversations_at_once(
    http: httpx.Client, stack: Stack
) -> None:
    results: dict[int, list[Frame]] = {}

    def one(index: int) -> None:
        with stack.client() as client:
            conversation_id = _conversation(client)
            stream = _send(client, conversation_id, f"client {index} [[slow:0.01]]")
            results[index] = stream.read_to_end()
            stream.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert sorted(results) == list(range(12))
    for index, events in results.items():
        text = "".join(f.data["text"] for f in events if f.type == "append_text")  # type: ignore[index]
        assert text == f"Echo: client {index}"


def _error_code(response: httpx.Response, status: int) -> str:
    checked(response)
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    code: str = response.json()["error"]["code"]
    return code


_JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "code"),
    [
        (
            "POST",
            "/agentik/conversations",
            {"content": b"{nope", "headers": _JSON},
            400,
            "invalid_json",
        ),
        (
            "POST",
            "/agentik/conversations",
            {"content": b'{"title": "csrf"}', "headers": {"Content-Type": "text/plain"}},
            415,
            "unsupported_media_type",
        ),
        ("POST", "/agentik/conversations", {"json": {"title": 7}}, 400, "invalid_argument"),
        ("POST", "/agentik/conversations", {"json": "just a string"}, 400, "invalid_argument"),
        ("POST", "/agentik/conversations", {"content": b"x" * 70_000}, 413, "payload_too_large"),
        ("GET", "/agentik/conversations?limit=0", {}, 400, "invalid_argument"),
        ("GET", "/agentik/conversations?offset=-3", {}, 400, "invalid_argument"),
        ("GET", "/agentik/conversations?limit=ten", {}, 400, "invalid_argument"),
        ("GET", "/agentik/conversations/unknown-id", {}, 404, "not_found"),
        ("GET", "/agentik/conversations/unknown-id/events", {}, 404, "not_found"),
        (
            "POST",
            "/agentik/conversations/unknown-id/send",
            {"json": {"text": "x"}},
            404,
            "not_found",
        ),
        ("DELETE", "/agentik/conversations/unknown-id", {}, 404, "not_found"),
        ("PATCH", "/agentik/conversations", {}, 405, "method_not_allowed"),
        ("GET", "/wp-admin/../../etc/passwd", {}, 404, "not_found"),
    ],
)
def test_hostile_inputs_get_json_errors_over_http(
    http: httpx.Client, method: str, path: str, kwargs: dict[str, object], status: int, code: str
) -> None:
    response = http.request(method, path, **kwargs)  # type: ignore[arg-type]
    if status == 405 or path.startswith("/wp-admin"):
        assert response.status_code == status and response.json()["error"]["code"] == code
        return
    assert _error_code(response, status) == code


def test_a_huge_chunked_body_is_refused_with_413(http: httpx.Client) -> None:
    def body() -> object:
        for _ in range(100):
            yield b"x" * 8192

    response = http.post("/agentik/conversations", content=body())  # type: ignore[arg-type]
    assert _error_code(response, 413) == "payload_too_large"


def test_a_bad_last_event_id_or_send_body_is_400_naming_it(http: httpx.Client) -> None:
    conversation_id = _conversation(http)
    response = http.get(
        f"/agentik/conversations/{conversation_id}/events", headers={"Last-Event-ID": "-1"}
    )
    assert _error_code(response, 400) == "invalid_argument"
    assert "Last-Event-ID" in response.json()["error"]["message"]
    response = http.post(
        f"/agentik/conversations/{conversation_id}/send",
        json={"content": [{"type": "text", "text": ["not", "a", "string"]}]},
    )
    assert _error_code(response, 400) == "invalid_argument"
    assert "content[0].text" in response.json()["error"]["message"]
    wait_for(lambda: _idle(http, conversation_id), "nothing to run")
