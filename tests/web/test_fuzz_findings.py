"""What the property-based run over openapi.json (test_openapi_fuzz.py) found, one targeted
test each. All were the document's mistakes, not the server's: it described the SSE bodies as
a plain string, left out the id rule and the 400 it brings on GET and DELETE, left out the
largest ``offset`` and event id, promised 404 for an unknown ``?after=`` message (the engine
answers 400) and said nothing of what base64 ``data`` the server takes. One was the server's:
an integer query parameter or header of more than 18 digits was refused as "not an integer"
even when it was one (and in range, for event ids up to int64)."""

from __future__ import annotations

import json
import re
from typing import Any

from jsonschema import Draft202012Validator

from tests.web.agentik.streams import StreamReader
from tests.web.conftest import ApiClient
from tests.web.openapi_check import DOCUMENT, assert_event_conforms, operation
from web_facade.agentik.routes import MAX_SEQ

_COMPONENTS = DOCUMENT["components"]


def _matches(schema: dict[str, Any], instance: Any) -> bool:
    return Draft202012Validator({**schema, "components": _COMPONENTS}).is_valid(instance)


def _error(response: Any, status: int, code: str) -> str:
    assert response.status_code == status, response.get_data()
    error = response.get_json()["error"]
    assert error["code"] == code
    message: str = error["message"]
    return message


def _raw_events(body: bytes) -> list[dict[str, Any]]:
    """The events of an SSE body as an EventSource reads them: blocks with ``data``."""
    events = []
    for block in body.decode().split("\n\n"):
        event: dict[str, Any] = {}
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(": ")
            event[name] = int(value) if name == "retry" else value
        if "data" in event:
            events.append(event)
    return events


# -- the SSE responses are event streams, each event described -----------------------------


def test_the_sse_responses_are_documented_as_event_streams_of_agentik_frames() -> None:
    for path in ("/agentik/conversations/x/send", "/agentik/conversations/x/events"):
        method = "POST" if path.endswith("send") else "GET"
        content = operation(method, path)["responses"]["200"]["content"]
        assert set(content) == {"text/event-stream"}
        assert content["text/event-stream"]["schema"] == {
            "$ref": "#/components/schemas/AgentikFrame"
        }
    data = _COMPONENTS["schemas"]["AgentikFrame"]["properties"]["data"]
    assert data["contentMediaType"] == "application/json"
    assert data["contentSchema"] == {"$ref": "#/components/schemas/AgentikEvent"}


def test_every_event_of_a_sent_turn_fits_agentik_frame_and_its_data_agentik_event(
    api: ApiClient,
) -> None:
    conversation_id = api.new_conversation()
    response = api.call(
        "POST", f"/agentik/conversations/{conversation_id}/send", json={"text": "hello"}
    )
    assert response.status_code == 200 and response.mimetype == "text/event-stream"
    events = _raw_events(response.get_data())
    assert [json.loads(e["data"])["type"] for e in events][-1] == "end"
    frame_schema = {"$ref": "#/components/schemas/AgentikFrame"}
    for event in events:
        assert _matches(frame_schema, event), event
        data = json.loads(event["data"])
        assert_event_conforms(data)
        assert event["event"] == data["type"]
    # The same events, replayed on /events, fit too.
    replay = api.call(
        "GET",
        f"/agentik/conversations/{conversation_id}/events?after=0&until_idle=true",
        buffered=False,
    )
    replayed = StreamReader(replay).read_to_end()
    assert [f.data for f in replayed] == [json.loads(e["data"]) for e in events]


# -- the id rule: 400 on every operation with {id}, documented ------------------------------


def test_a_conversation_id_that_breaks_the_id_rule_is_400_on_get_and_delete(
    api: ApiClient,
) -> None:
    for method in ("GET", "DELETE"):
        response = api.call(method, "/agentik/conversations/%C3%B6N%C3%B1")  # "öNñ"
        message = _error(response, 400, "invalid_argument")
        assert "'öNñ' is not a valid id" in message and "1 to 128 characters" in message


def test_the_document_states_the_engines_id_rule() -> None:
    id_schema = {"$ref": "#/components/schemas/Id"}
    for good in ("a", "7e7ec11c7a254c8380c099ec8c7d0b58", "urn:uuid:1-2", "x" * 128, "..."):
        assert _matches(id_schema, good), good
    for bad in ("", ".", "..", "öNñ", "a b", "a/b", "x" * 129):
        assert not _matches(id_schema, bad), bad
    assert _COMPONENTS["parameters"]["ConversationId"]["schema"] == id_schema


# -- offset has a largest value -------------------------------------------------------------


def test_the_largest_offset_is_documented_and_one_more_is_400(api: ApiClient) -> None:
    largest = _COMPONENTS["parameters"]["Offset"]["schema"]["maximum"]
    page = api.call("GET", f"/agentik/conversations?offset={largest}&limit=1")
    assert page.status_code == 200 and page.get_json()["items"] == []
    message = _error(
        api.call("GET", f"/agentik/conversations?offset={largest + 1}"), 400, "invalid_argument"
    )
    assert message == f"offset must be between 0 and {largest}, got {largest + 1}"


# -- an unknown ?after= message is 400, as documented ---------------------------------------


def test_an_after_that_is_not_a_message_of_the_conversation_is_400_not_404(
    api: ApiClient,
) -> None:
    conversation_id = api.new_conversation()
    response = api.call("GET", f"/agentik/conversations/{conversation_id}/messages?after=r")
    assert "'r' is not a message" in _error(response, 400, "invalid_argument")
    documented = _COMPONENTS["parameters"]["AfterMessage"]["description"]
    assert "400 invalid_argument" in documented
    assert "?after=" not in _COMPONENTS["responses"]["NotFound"]["description"]


# -- base64 data: what the document allows is what the server takes -------------------------


def test_image_data_is_standard_padded_base64_in_the_document_and_the_server(
    api: ApiClient,
) -> None:
    data_schema = _COMPONENTS["schemas"]["ImageDataPart"]["properties"]["data"]
    path = f"/agentik/conversations/{api.new_conversation()}/send"
    for bad in ("s\u0091\u61fe\u00b9", "abc", "ab c", "YQ"):
        assert not _matches(data_schema, bad), bad
        part = {"type": "image", "data": bad, "mime_type": "image/png"}
        response = api.call("POST", path, json={"content": [part]})
        assert _error(response, 400, "invalid_argument") == "content[0].data must be base64"
    for good in ("YQ==", "YWI=", "YWJj", "iVBORw0KGgo="):
        assert _matches(data_schema, good), good
    assert re.fullmatch(data_schema["pattern"], "iVBORw0KGgo=")


# -- integers past 18 digits: named as out of range, not "not an integer" ------------------


def test_an_event_id_past_18_digits_is_in_range_up_to_int64_and_named_out_of_range_past_it(
    api: ApiClient,
) -> None:
    largest = _COMPONENTS["parameters"]["AfterEvent"]["schema"]["maximum"]
    assert largest == MAX_SEQ == _COMPONENTS["parameters"]["LastEventId"]["schema"]["maximum"]
    path = f"/agentik/conversations/{api.new_conversation()}/events?until_idle=true"
    # 19 digits, within int64: read as a number, and refused as past the conversation's
    # last event (0 here), not as "not an integer".
    for resume in ({"query": f"&after={largest}"}, {"header": str(largest)}):
        headers = {"Last-Event-ID": resume["header"]} if "header" in resume else {}
        response = api.call("GET", path + resume.get("query", ""), headers=headers)
        message = _error(response, 400, "invalid_argument")
        said = f"the resume point {largest} (after, or Last-Event-ID) is past the conversation's"
        assert message.startswith(f"{said} last event (0)")
    for name, raw in (("after", str(largest + 1)), ("Last-Event-ID", "1066233575744789888123")):
        headers = {"Last-Event-ID": raw} if name == "Last-Event-ID" else {}
        query = f"&after={raw}" if name == "after" else ""
        message = _error(api.call("GET", path + query, headers=headers), 400, "invalid_argument")
        assert message == f"{name} must be between 0 and {largest}, got {raw}"


def test_a_limit_of_many_digits_is_named_out_of_range_and_leading_zeros_are_fine(
    api: ApiClient,
) -> None:
    long = "9" * 5000  # past Python's 4300-digit limit for int(): still a clean 400
    message = _error(
        api.call("GET", f"/agentik/conversations?limit={long}"), 400, "invalid_argument"
    )
    assert message == f"limit must be between 1 and 1000, got {long[:40]}…"
    padded = "0" * 5000 + "7"
    page = api.call("GET", f"/agentik/conversations?limit={padded}")
    assert page.status_code == 200 and page.get_json()["limit"] == 7
    for raw in ("1.5", "ten", "-", "%2B3"):
        message = _error(
            api.call("GET", f"/agentik/conversations?limit={raw}"), 400, "invalid_argument"
        )
        assert message == "limit must be an integer"
