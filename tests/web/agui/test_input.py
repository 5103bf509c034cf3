"""RunAgentInput → RunRequest: what is refused before any stream (and how the field is named),
and how every role, part and option reaches the engine."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from ag_ui.core import RunAgentInput
from flask import Flask
from flask.testing import FlaskClient
from google.protobuf import json_format

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.fakes.fake_openai import FakeOpenAI
from tests.web.conftest import BackgroundEngine, engine_settings
from tests.web.e2e.conftest import free_port
from web_facade.agui.input import RunOptions, run_options, run_request


def _body(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "threadId": f"agui-{uuid.uuid4().hex}",
        "runId": uuid.uuid4().hex,
        "messages": [{"id": "u1", "role": "user", "content": "hi"}],
    }
    base.update(fields)
    return base


def _refusal(client: FlaskClient, body: Any, status: int = 422) -> str:
    response = client.post("/agui", json=body)
    assert response.status_code == status, response.get_data()
    assert response.mimetype == "application/json"
    error = response.get_json()["error"]
    message: str = error["message"]
    return message


def _request(body: dict[str, Any], **options: Any) -> pb.RunRequest:
    run_input = RunAgentInput.model_validate(body)
    return run_request(run_input, RunOptions(**options), cancel_on_disconnect=False)


def test_a_body_that_is_not_json_is_refused_with_400_before_any_stream(
    client: FlaskClient,
) -> None:
    response = client.post("/agui", data="{nope", content_type="application/json")

    assert response.status_code == 400
    assert response.get_json()["error"]["code"] == "invalid_json"


def test_a_body_without_thread_run_or_messages_is_refused_naming_each_field(
    client: FlaskClient,
) -> None:
    message = _refusal(client, {"threadId": "t"})

    assert "runId: Field required" in message and "messages: Field required" in message


def test_a_body_that_is_not_an_object_is_refused(client: FlaskClient) -> None:
    assert "JSON object" in _refusal(client, [1, 2])


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("threadId", 7, "threadId: Input should be a valid string"),
        ("messages", [{"id": "x", "role": "robot", "content": "hi"}], "messages[0].role:"),
        ("messages", [{"id": "x", "role": "user"}], "messages[0].content: Field required"),
        (
            "messages",
            [{"id": "x", "role": "user", "content": [{"type": "text"}]}],
            "messages[0].content[0].text: Field required",
        ),
        ("tools", [{"name": "t"}], "tools[0].description: Field required"),
        (
            "messages",
            [{"id": "x", "role": "tool", "content": "r"}],
            "messages[0].toolCallId: Field required",
        ),
    ],
)
def test_a_malformed_field_is_refused_with_422_naming_its_path(
    client: FlaskClient, field: str, value: Any, named: str
) -> None:
    assert named in _refusal(client, _body(**{field: value}))


@pytest.mark.parametrize("kind", ["audio", "video"])
def test_audio_and_video_parts_are_refused_naming_the_part(client: FlaskClient, kind: str) -> None:
    part = {"type": kind, "source": {"type": "url", "value": "https://example.com/x"}}
    content = [{"type": "text", "text": "see"}, part]
    message = _refusal(client, _body(messages=[{"id": "u", "role": "user", "content": content}]))

    assert message.startswith(f"messages[0].content[1]: {kind} parts are not supported")


def test_a_document_by_url_is_refused_naming_the_part(client: FlaskClient) -> None:
    part = {"type": "document", "source": {"type": "url", "value": "https://example.com/x"}}
    content = [{"type": "text", "text": "see"}, part]
    message = _refusal(client, _body(messages=[{"id": "u", "role": "user", "content": content}]))

    assert message.startswith("messages[0].content[1].source: a document cannot be sent by url")


@pytest.mark.parametrize(
    ("source", "named"),
    [
        ({"type": "file", "value": "file-123"}, "messages[0].content[0].source:"),
        ({"type": "data", "value": "not base64!", "mimeType": "image/png"}, "source.value"),
    ],
)
def test_an_image_by_provider_file_or_bad_base64_is_refused_naming_the_source(
    client: FlaskClient, source: dict[str, Any], named: str
) -> None:
    content = [{"type": "image", "source": source}]
    message = _refusal(client, _body(messages=[{"id": "u", "role": "user", "content": content}]))

    assert named in message


@pytest.mark.parametrize(
    ("source", "said"),
    [
        (
            {"type": "url", "value": "file:///etc/passwd"},
            "messages[0].content[0].source.value must be an http(s) URL or a data:image/* URL",
        ),
        (
            {"type": "url", "value": "data:image/png;base64,!!!"},
            "messages[0].content[0].source.value is a data: URL whose base64 payload is not",
        ),
        (
            {"type": "data", "value": "iVBORw0KGgo=", "mimeType": "text/html"},
            "messages[0].content[0].source.mimeType 'text/html' is not an image/* type",
        ),
    ],
)
def test_an_image_the_model_may_not_be_sent_is_refused_naming_the_agui_field(
    client: FlaskClient, source: dict[str, Any], said: str
) -> None:
    content = [{"type": "image", "source": source}]
    message = _refusal(client, _body(messages=[{"id": "u", "role": "user", "content": content}]))

    assert message.startswith(said)


@pytest.mark.parametrize(
    ("props", "named"),
    [
        ("a string", "forwardedProps must be a JSON object"),
        ({"agentik": []}, "forwardedProps.agentik must be an object"),
        ({"agentik": {"reconcile": "merge"}}, "forwardedProps.agentik.reconcile"),
        ({"agentik": {"messagesSnapshot": "yes"}}, "forwardedProps.agentik.messagesSnapshot"),
        ({"agentik": {"cancelOnDisconect": True}}, "forwardedProps.agentik.cancelOnDisconect"),
    ],
)
def test_malformed_agentik_options_are_refused_naming_the_key(
    client: FlaskClient, props: Any, named: str
) -> None:
    assert named in _refusal(client, _body(forwardedProps=props))


def test_resume_entries_reach_the_engine_with_their_status_and_payload() -> None:
    resume = [
        {"interruptId": "i1", "status": "resolved"},
        {"interruptId": "i2", "status": "resolved", "payload": {"arguments": {"n": 1}}},
        {"interruptId": "i3", "status": "cancelled", "metadata": {"by": "ann"}},
        {"interruptId": "i4", "status": "resolved", "payload": "teal"},
    ]

    request = _request(_body(messages=[], resume=resume))

    assert [(e.interrupt_id, e.status) for e in request.resume] == [
        ("i1", pb.RESUME_STATUS_RESOLVED),
        ("i2", pb.RESUME_STATUS_RESOLVED),
        ("i3", pb.RESUME_STATUS_CANCELLED),
        ("i4", pb.RESUME_STATUS_RESOLVED),
    ]
    assert [e.HasField("payload") for e in request.resume] == [False, True, False, True]
    assert json_format.MessageToDict(request.resume[1].payload) == {"arguments": {"n": 1.0}}
    assert request.resume[3].payload.string_value == "teal"
    assert list(request.messages) == []


def test_a_frontend_tool_named_like_an_engine_tool_is_refused_by_the_engine_with_400(
    client: FlaskClient,
) -> None:
    tools = [{"name": "calculate", "description": "mine"}]
    message = _refusal(client, _body(tools=tools), status=400)

    assert "tools[0].name" in message


def test_an_unreachable_engine_is_503_before_any_stream(make_app: Any) -> None:
    app: Flask = make_app(target=f"127.0.0.1:{free_port()}")
    response = app.test_client().post("/agui", json=_body())

    assert response.status_code == 503
    assert response.get_json()["error"]["code"] == "engine_unavailable"


def test_every_role_and_part_reaches_the_engine_as_its_message() -> None:
    messages = [
        {"id": "d", "role": "developer", "content": "be brief"},
        {"id": "s", "role": "system", "content": "you are kind", "name": "policy"},
        {
            "id": "u",
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {
                    "type": "image",
                    "source": {"type": "data", "value": "AQID", "mimeType": "image/webp"},
                },
                {"type": "image", "source": {"type": "url", "value": "https://x/y.png"}},
            ],
        },
        {
            "id": "a",
            "role": "assistant",
            "toolCalls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"id": "t", "role": "tool", "toolCallId": "c1", "content": "", "error": "it broke"},
        {"id": "r", "role": "reasoning", "content": "hmm"},
        {"id": "v", "role": "activity", "activityType": "plan", "content": {}},
    ]
    request = _request(_body(messages=messages))

    expected = [
        pb.Message(
            id="d",
            role=pb.ROLE_DEVELOPER,
            content=[pb.ContentPart(text=pb.TextPart(text="be brief"))],
        ),
        pb.Message(
            id="s",
            role=pb.ROLE_SYSTEM,
            name="policy",
            content=[pb.ContentPart(text=pb.TextPart(text="you are kind"))],
        ),
        pb.Message(
            id="u",
            role=pb.ROLE_USER,
            content=[
                pb.ContentPart(text=pb.TextPart(text="look")),
                pb.ContentPart(image=pb.ImagePart(data=b"\x01\x02\x03", mime_type="image/webp")),
                pb.ContentPart(image=pb.ImagePart(url="https://x/y.png")),
            ],
        ),
        pb.Message(
            id="a",
            role=pb.ROLE_ASSISTANT,
            tool_calls=[pb.ToolCall(id="c1", name="f", arguments="{}")],
        ),
        pb.Message(
            id="t",
            role=pb.ROLE_TOOL,
            tool_call_id="c1",
            status=pb.MESSAGE_STATUS_ERROR,
            content=[pb.ContentPart(text=pb.TextPart(text="it broke"))],
        ),
    ]
    assert list(request.messages) == expected


def test_tools_context_and_forwarded_props_reach_the_engine_untouched() -> None:
    body = _body(
        tools=[{"name": "pick", "description": "d", "parameters": {"type": "object"}}],
        context=[{"description": "page", "value": "/cart"}],
        forwardedProps={"agentik": {"reconcile": "append"}, "app": {"x": [1, "y"]}},
        parentRunId="r0",
    )
    request = _request(body)

    assert [(t.name, json_format.MessageToDict(t.parameters)) for t in request.tools] == [
        ("pick", {"type": "object"})
    ]
    assert [(c.description, c.value) for c in request.context] == [("page", "/cart")]
    assert json_format.MessageToDict(request.forwarded_props) == body["forwardedProps"]
    assert request.parent_run_id == "r0" and request.create_session
    assert request.reconcile == pb.RECONCILE_MODE_APPEND and request.messages_snapshot


@pytest.mark.parametrize(
    ("state", "replace", "sent"),
    [
        (None, False, False),
        ({}, False, False),
        ({"n": 1}, False, True),
        ({}, True, True),
        ([1], False, True),
    ],
)
def test_an_empty_state_keeps_the_threads_state_unless_the_client_replaces_the_thread(
    state: Any, replace: bool, sent: bool
) -> None:
    request = _request(_body(state=state), replace=replace)

    assert request.HasField("state") is sent
    if sent:
        assert json_format.MessageToDict(request.state) == state


def test_agentik_options_default_to_append_with_a_snapshot() -> None:
    assert run_options(None) == RunOptions()
    assert run_options({"other": 1}) == RunOptions(False, True, None)
    chosen = {
        "agentik": {"reconcile": "replace", "messagesSnapshot": False, "cancelOnDisconnect": True}
    }
    assert run_options(chosen) == RunOptions(True, False, True)


def test_a_state_over_the_engines_limit_is_refused_with_400_naming_it(
    llm: FakeOpenAI, make_app: Any
) -> None:
    engine = BackgroundEngine(engine_settings(llm, AGENTIK_MAX_STATE_BYTES="1000"))
    target = engine.start()
    try:
        client = make_app(target=target).test_client()
        message = _refusal(client, _body(state={"big": "x" * 1000}), status=400)
    finally:
        engine.stop()

    assert "max_state_bytes" in message


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["pick", "pick"], "tools[1].name 'pick' is already offered by tools[0]"),
        (["pick color"], "tools[0].name 'pick color' is not a valid tool name"),
    ],
)
def test_a_duplicate_or_invalid_frontend_tool_name_is_refused_with_400_naming_it(
    client: FlaskClient, names: list[str], expected: str
) -> None:
    tools = [{"name": name, "description": "mine"} for name in names]
    message = _refusal(client, _body(tools=tools), status=400)

    assert message.startswith(expected), message
