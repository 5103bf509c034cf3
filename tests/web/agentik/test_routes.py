"""The /agentik endpoints over a real engine (fake LLM), held against the OpenAPI document."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable

import pytest
from flask import Flask

from tests.web.agentik.streams import StreamReader, has, types
from tests.web.conftest import WAIT, ApiClient

ISO_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def _send(api: ApiClient, conversation_id: str, text: str) -> StreamReader:
    response = api.call(
        "POST",
        f"/agentik/conversations/{conversation_id}/send",
        json={"content": [{"type": "text", "text": text}]},
        buffered=False,
    )
    return StreamReader(response)


def _wait_idle(api: ApiClient, conversation_id: str) -> dict[str, object]:
    deadline = time.monotonic() + WAIT
    while True:
        body: dict[str, object] = api.call(
            "GET", f"/agentik/conversations/{conversation_id}"
        ).get_json()
        if body["active_run_id"] is None:
            return body
        assert time.monotonic() < deadline, "the turn did not end in time"
        time.sleep(0.02)  # polling a condition with a deadline


def test_create_answers_201_with_the_conversation(api: ApiClient) -> None:
    response = api.call("POST", "/agentik/conversations", json={"title": "Trip"})
    assert response.status_code == 201
    body = response.get_json()
    assert body["title"] == "Trip"
    assert body["count"] == 0
    assert ISO_Z.match(body["created_at"]) and ISO_Z.match(body["updated_at"])


def test_create_without_a_body_makes_an_untitled_conversation(api: ApiClient) -> None:
    response = api.call("POST", "/agentik/conversations")
    assert response.status_code == 201
    assert response.get_json()["title"] == ""


def test_create_with_a_chosen_id_that_is_taken_is_409(api: ApiClient) -> None:
    first = api.call("POST", "/agentik/conversations", json={"id": "chosen-id-1"})
    assert first.status_code == 201 and first.get_json()["id"] == "chosen-id-1"
    again = api.call("POST", "/agentik/conversations", json={"id": "chosen-id-1"})
    assert again.status_code == 409
    assert again.get_json()["error"]["code"] == "already_exists"


def test_list_pages_with_offset_limit_and_total_most_recent_first(api: ApiClient) -> None:
    made = [api.new_conversation(f"page {i}") for i in range(3)]
    everything = api.call("GET", "/agentik/conversations?limit=1000").get_json()
    assert everything["total"] >= 3
    page = api.call("GET", "/agentik/conversations?offset=1&limit=2").get_json()
    assert page["offset"] == 1 and page["limit"] == 2 and page["total"] == everything["total"]
    assert [c["id"] for c in page["items"]] == [c["id"] for c in everything["items"][1:3]]
    assert [c["id"] for c in everything["items"][:3]] == made[::-1]


def test_rename_changes_the_title(api: ApiClient) -> None:
    conversation_id = api.new_conversation("old")
    response = api.call(
        "POST", f"/agentik/conversations/{conversation_id}/rename", json={"title": "new"}
    )
    assert response.status_code == 200
    assert response.get_json()["title"] == "new"
    assert api.call("GET", f"/agentik/conversations/{conversation_id}").get_json()["title"] == "new"


def test_a_title_holding_nul_is_400_on_create_and_rename(api: ApiClient) -> None:
    made = api.call("POST", "/agentik/conversations", json={"title": "a\u0000b"})
    assert made.status_code == 400
    assert "NUL" in made.get_json()["error"]["message"]
    conversation_id = api.new_conversation("kept")
    renamed = api.call(
        "POST", f"/agentik/conversations/{conversation_id}/rename", json={"title": "\u0000"}
    )
    assert renamed.status_code == 400
    assert api.call("GET", f"/agentik/conversations/{conversation_id}").get_json()["title"] == (
        "kept"
    )


def test_delete_answers_204_and_then_the_conversation_is_gone(api: ApiClient) -> None:
    conversation_id = api.new_conversation()
    response = api.call("DELETE", f"/agentik/conversations/{conversation_id}")
    assert response.status_code == 204 and response.get_data() == b""
    gone = api.call("GET", f"/agentik/conversations/{conversation_id}")
    assert gone.status_code == 404
    assert gone.get_json()["error"]["code"] == "not_found"


def test_send_streams_the_turn_as_seed_events_with_growing_ids(api: ApiClient) -> None:
    conversation_id = api.new_conversation()
    stream = _send(api, conversation_id, "hello brave world")
    assert stream.response.headers["Cache-Control"] == "no-cache"
    assert stream.response.headers["X-Accel-Buffering"] == "no"
    events = stream.read_to_end()
    names = types(events)
    assert names[0] == "message" and names[1] == "start_response"
    assert names[-2:] == ["message", "end"]
    assert set(names[2:-2]) == {"append_text"}
    assert "".join(e.data["text"] for e in events if e.type == "append_text") == (  # type: ignore[index]
        "Echo: hello brave world"
    )
    ids = [e.id or 0 for e in events]
    assert 0 not in ids and ids == sorted(ids) and len(set(ids)) == len(ids)
    user, answer = events[0].data["message"], events[-2].data["message"]  # type: ignore[index]
    assert user["role"] == "user" and user["content"] == [
        {"type": "text", "text": "hello brave world"}
    ]
    assert answer["role"] == "assistant" and answer["status"] == "complete"
    assert events[1].data["message_id"] == answer["id"]  # type: ignore[index]
    run_ids = {e.data["run_id"] for e in events}  # type: ignore[index]
    assert len(run_ids) == 1 and events[-1].data["outcome"] == "success"  # type: ignore[index]
    conversation = api.call("GET", f"/agentik/conversations/{conversation_id}").get_json()
    assert conversation["count"] == 2
    assert conversation["last_event_id"] >= events[-1].id


def test_send_accepts_the_plain_text_shorthand(api: ApiClient) -> None:
    conversation_id = api.new_conversation()
    response = api.call(
        "POST",
        f"/agentik/conversations/{conversation_id}/send",
        json={"text": "short"},
        buffered=False,
    )
    events = StreamReader(response).read_to_end()
    assert events[0].data["message"]["content"] == [{"type": "text", "text": "short"}]  # type: ignore[index]


def test_images_are_stored_and_returned_as_parts(api: ApiClient) -> None:
    conversation_id = api.new_conversation()
    parts = [
        {"type": "text", "text": "look"},
        {"type": "image", "url": "https://example.com/cat.png"},
        {"type": "image", "data": "iVBORw0KGgo=", "mime_type": "image/png"},
    ]
    response = api.call(
        "POST",
        f"/agentik/conversations/{conversation_id}/send",
        json={"content": parts},
        buffered=False,
    )
    StreamReader(response).read_to_end()
    history = api.call("GET", f"/agentik/conversations/{conversation_id}/messages").get_json()
    assert history["items"][0]["content"] == parts


@pytest.mark.parametrize(
    ("part", "said"),
    [
        (
            {"type": "image", "url": "file:///etc/passwd"},
            "content[1].url must be an http(s) URL or a data:image/* URL",
        ),
        (
            {"type": "image", "url": "data:image/png;base64,!!!"},
            "content[1].url is a data: URL whose base64 payload is not valid base64",
        ),
        (
            {"type": "image", "data": "aGVsbG8=", "mime_type": "text/html"},
            "content[1].mime_type 'text/html' is not an image/* type",
        ),
    ],
)
def test_an_image_the_model_may_not_be_sent_is_400_naming_the_field_of_the_body(
    api: ApiClient, part: dict[str, str], said: str
) -> None:
    conversation_id = api.new_conversation()
    reply = api.call(
        "POST",
        f"/agentik/conversations/{conversation_id}/send",
        json={"content": [{"type": "text", "text": "look"}, part]},
    )
    assert reply.status_code == 400, reply.get_data()
    assert reply.get_json()["error"]["message"] == said
    history = api.call("GET", f"/agentik/conversations/{conversation_id}/messages").get_json()
    assert history["items"] == []


def test_reasoning_streams_start_reasoning_before_the_response(api: ApiClient) -> None:
    conversation_id = api.new_conversation()
    events = _send(api, conversation_id, "think [[reason]]").read_to_end()
    names = types(events)
    assert names.index("start_reasoning") < names.index("start_response")
    reasoning_id = events[names.index("start_reasoning")].data["message_id"]  # type: ignore[index]
    assert any(e.type == "append_text" and e.data["message_id"] == reasoning_id for e in events)  # type: ignore[index]


def test_a_tool_call_streams_tool_call_events_and_its_result(api: ApiClient) -> None:
    conversation_id = api.new_conversation()
    events = _send(
        api, conversation_id, 'sum [[tool:calculate {"expression": "6*7"}]]'
    ).read_to_end()
    names = types(events)
    start = events[names.index("tool_call_start")].data
    assert start["name"] == "calculate"  # type: ignore[index]
    assert "tool_call_args" in names
    result = next(e.data for e in events if e.type == "tool_call_result")
    assert result["tool_call_id"] == start["tool_call_id"] and not result["is_error"]  # type: ignore[index]
    assert "42" in result["content"]  # type: ignore[index]
    stored = [e.data["message"] for e in events if e.type == "message"]  # type: ignore[index]
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored[1]["tool_calls"][0]["name"] == "calculate"
    assert stored[2]["tool_call_id"] == start["tool_call_id"]  # type: ignore[index]
    assert names[-1] == "end"


def test_the_state_tool_streams_a_snapshot_then_a_delta(api: ApiClient) -> None:
    conversation_id = api.new_conversation()
    first = _send(api, conversation_id, '[[tool:update_state {"state": {"n": 1}}]]').read_to_end()
    snapshot = next(e.data for e in first if e.type == "state_snapshot")
    assert snapshot["snapshot"] == {"n": 1}  # type: ignore[index]
    patch = [{"op": "replace", "path": "/n", "value": 2}]
    directive = "[[tool:update_state " + json.dumps({"patch": patch}) + "]]"
    second = _send(api, conversation_id, directive).read_to_end()
    delta = next(e.data for e in second if e.type == "state_delta")
    assert delta["delta"] == patch  # type: ignore[index]


def test_an_llm_failure_ends_the_turn_with_an_error_event(api: ApiClient) -> None:
    conversation_id = api.new_conversation()
    events = _send(api, conversation_id, "fail [[error:500]]").read_to_end()
    last = events[-1]
    assert last.type == "error" and last.id is not None
    assert last.data["code"].startswith("llm_") and last.data["message"]  # type: ignore[index]


def test_messages_page_after_a_message_id_with_has_more(api: ApiClient) -> None:
    conversation_id = api.new_conversation()
    for text in ("one", "two"):
        _send(api, conversation_id, text).read_to_end()
    path = f"/agentik/conversations/{conversation_id}/messages"
    everything = api.call("GET", path).get_json()
    assert [m["role"] for m in everything["items"]] == ["user", "assistant"] * 2
    assert everything["has_more"] is False
    first_page = api.call("GET", f"{path}?limit=3").get_json()
    assert first_page["has_more"] is True and len(first_page["items"]) == 3
    rest = api.call("GET", f"{path}?after={first_page['items'][-1]['id']}&limit=3").get_json()
    assert rest["items"] == everything["items"][3:] and rest["has_more"] is False


def test_interrupt_ends_the_turn_with_interrupted_and_keeps_the_partial_answer(
    api: ApiClient,
) -> None:
    conversation_id = api.new_conversation()
    stream = _send(api, conversation_id, "never ending [[hang]]")
    stream.read_until(has("append_text"))
    busy = api.call("POST", f"/agentik/conversations/{conversation_id}/send", json={"text": "x"})
    assert busy.status_code == 409 and busy.get_json()["error"]["code"] == "busy"
    undeletable = api.call("DELETE", f"/agentik/conversations/{conversation_id}")
    assert undeletable.status_code == 409
    run_id = stream.events[0].data["run_id"]  # type: ignore[index]
    reply = api.call("POST", f"/agentik/conversations/{conversation_id}/interrupt")
    assert reply.get_json() == {"interrupted": True, "run_id": run_id}
    events = stream.read_to_end()
    assert types(events)[-2:] == ["message", "interrupted"]
    partial = events[-2].data["message"]  # type: ignore[index]
    assert partial["status"] == "interrupted" and partial["content"][0]["text"].startswith("Echo")
    history = api.call("GET", f"/agentik/conversations/{conversation_id}/messages").get_json()
    assert history["items"][-1] == partial


def test_interrupting_an_idle_conversation_answers_false(api: ApiClient) -> None:
    conversation_id = api.new_conversation()
    reply = api.call("POST", f"/agentik/conversations/{conversation_id}/interrupt", json={})
    assert reply.status_code == 200 and reply.get_json() == {"interrupted": False}


def test_events_resumes_after_last_event_id_with_exactly_the_missing_events(
    api: ApiClient,
) -> None:
    conversation_id = api.new_conversation()
    sent = _send(api, conversation_id, "a b c d e").read_to_end()
    cut = sent[2].id
    path = f"/agentik/conversations/{conversation_id}/events?until_idle=true"
    resumed = StreamReader(
        api.call("GET", path, headers={"Last-Event-ID": str(cut)}, buffered=False)
    )
    again = resumed.read_to_end()
    assert [(e.id, e.data) for e in again] == [(e.id, e.data) for e in sent[3:]]
    by_query = StreamReader(api.call("GET", f"{path}&after={cut}", buffered=False)).read_to_end()
    assert [e.id for e in by_query] == [e.id for e in again]
    header_wins = StreamReader(
        api.call("GET", f"{path}&after=0", headers={"Last-Event-ID": str(cut)}, buffered=False)
    ).read_to_end()
    assert [e.id for e in header_wins] == [e.id for e in again]
    everything = StreamReader(api.call("GET", f"{path}&after=0", buffered=False)).read_to_end()
    assert [e.id for e in everything] == [e.id for e in sent]


def test_a_resume_point_past_the_conversations_last_event_is_400_not_a_silent_stream(
    api: ApiClient,
) -> None:
    # As after a conversation deleted and made again under its id: its ids start again at 1,
    # and a client's old Last-Event-ID would have hidden every event up to it.
    conversation_id = api.new_conversation()
    sent = _send(api, conversation_id, "a b").read_to_end()
    last = sent[-1].id
    assert last is not None
    path = f"/agentik/conversations/{conversation_id}/events"
    for headers, query in (({"Last-Event-ID": str(last + 1)}, ""), ({}, f"?after={last + 500}")):
        reply = api.call("GET", path + query, headers=headers)
        assert reply.status_code == 400, reply.get_data()
        error = reply.get_json()["error"]
        assert error["code"] == "invalid_argument"
        assert f"is past the conversation's last event ({last})" in error["message"]
    # The last event itself is a resume point: nothing to replay.
    at_end = api.call("GET", f"{path}?until_idle=1&after={last}", buffered=False)
    assert StreamReader(at_end).read_to_end() == []


def test_events_without_a_resume_point_starts_at_the_current_point(api: ApiClient) -> None:
    conversation_id = api.new_conversation()
    _send(api, conversation_id, "before").read_to_end()
    path = f"/agentik/conversations/{conversation_id}/events?until_idle=1"
    assert StreamReader(api.call("GET", path, buffered=False)).read_to_end() == []


def test_events_follows_a_turn_live(api: ApiClient) -> None:
    conversation_id = api.new_conversation()
    watcher = StreamReader(
        api.call("GET", f"/agentik/conversations/{conversation_id}/events", buffered=False)
    )
    watcher.read_until(lambda _: True)
    sent = _send(api, conversation_id, "live words").read_to_end()
    seen = watcher.read_until(has("end"))
    assert [(e.id, e.data) for e in seen] == [(e.id, e.data) for e in sent]
    watcher.close()


def test_an_idle_event_stream_sends_heartbeat_comments(api: ApiClient) -> None:
    conversation_id = api.new_conversation()
    watcher = StreamReader(
        api.call("GET", f"/agentik/conversations/{conversation_id}/events", buffered=False)
    )
    deadline = time.monotonic() + WAIT
    while not any("keep-alive" in f.comments for f in watcher.frames):
        assert time.monotonic() < deadline
        watcher.frames.extend(watcher._parser.feed(next(watcher._chunks)))
    watcher.close()


def test_a_client_leaving_send_does_not_stop_the_turn(api: ApiClient) -> None:
    conversation_id = api.new_conversation()
    stream = _send(api, conversation_id, "keep going [[slow:0.02]]")
    stream.read_until(has("append_text"))
    stream.close()
    _wait_idle(api, conversation_id)
    history = api.call("GET", f"/agentik/conversations/{conversation_id}/messages").get_json()
    assert history["items"][-1]["status"] == "complete"
    assert history["items"][-1]["content"][0]["text"] == "Echo: keep going"


def test_with_on_disconnect_cancel_a_client_leaving_send_interrupts_the_turn(
    make_app: Callable[..., Flask],
) -> None:
    api = ApiClient(make_app(AGENTIK_ON_DISCONNECT="cancel").test_client())
    conversation_id = api.new_conversation()
    stream = _send(api, conversation_id, "stop me [[hang]]")
    stream.read_until(has("append_text"))
    stream.close()
    _wait_idle(api, conversation_id)
    history = api.call("GET", f"/agentik/conversations/{conversation_id}/messages").get_json()
    assert history["items"][-1]["status"] == "interrupted"
