"""Every error is a JSON body with a fitting status: client mistakes, unknown ids, a dead engine."""

from __future__ import annotations

import gc
import socket
import types
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from flask import Flask

from tests.web.conftest import ApiClient
from web_facade.errors import (
    AGENTIK_WORDS,
    AGUI_WORDS,
    ENGINE_WORDS,
    GRPC_TO_HTTP,
    MCP_WORDS,
    from_rpc_error,
)

CONVERSATION_ENDPOINTS = [
    ("GET", "/agentik/conversations/{id}", None),
    ("GET", "/agentik/conversations/{id}/messages", None),
    ("POST", "/agentik/conversations/{id}/rename", {"title": "t"}),
    ("DELETE", "/agentik/conversations/{id}", None),
    ("POST", "/agentik/conversations/{id}/send", {"text": "hi"}),
    ("GET", "/agentik/conversations/{id}/events", None),
    ("POST", "/agentik/conversations/{id}/interrupt", None),
]


def _error(response: Any, status: int, code: str) -> str:
    assert response.status_code == status, response.get_data()
    assert response.mimetype == "application/json"
    body = response.get_json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == code
    message: str = body["error"]["message"]
    assert "Traceback" not in message and "<" not in message
    return message


def test_an_unknown_route_is_a_json_404(api: ApiClient) -> None:
    _error(api.client.get("/nowhere"), 404, "not_found")
    _error(api.client.get("/agentik/conversations/x/nothing"), 404, "not_found")


def test_a_wrong_method_is_a_json_405_that_lists_the_allowed_ones(api: ApiClient) -> None:
    response = api.client.put("/agentik/conversations")
    _error(response, 405, "method_not_allowed")
    assert set(response.headers["Allow"].split(", ")) >= {"GET", "POST"}


def test_a_body_over_the_limit_is_413(make_app: Callable[..., Flask]) -> None:
    client = make_app(AGENTIK_MAX_BODY_BYTES="1000").test_client()
    message = _error(
        client.post("/agentik/conversations", json={"title": "x" * 2000}), 413, "payload_too_large"
    )
    assert "1000" in message


@pytest.mark.parametrize("body", [b"{", b"{'title': 1}", b"\xff\xfe\x00", b"[" * 100_000])
def test_malformed_json_is_400_invalid_json(api: ApiClient, body: bytes) -> None:
    response = api.call(
        "POST", "/agentik/conversations", data=body, content_type="application/json"
    )
    _error(response, 400, "invalid_json")


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/agentik/conversations", [1], "body"),
        ("/agentik/conversations", {"title": 5}, "title"),
        ("/agentik/conversations", {"id": ["x"]}, "id"),
        ("/agentik/conversations/{id}/rename", {}, "title"),
        ("/agentik/conversations/{id}/rename", {"title": None}, "title"),
        ("/agentik/conversations/{id}/send", {}, "content"),
        ("/agentik/conversations/{id}/send", {"content": "hi"}, "content"),
        ("/agentik/conversations/{id}/send", {"content": []}, "content"),
        ("/agentik/conversations/{id}/send", {"content": ["hi"]}, "content[0]"),
        ("/agentik/conversations/{id}/send", {"content": [{"type": "audio"}]}, "content[0].type"),
        (
            "/agentik/conversations/{id}/send",
            {"content": [{"type": "text", "text": "a"}, {"type": "text"}]},
            "content[1].text",
        ),
        (
            "/agentik/conversations/{id}/send",
            {"content": [{"type": "image", "data": "aGk="}]},
            "content[0].mime_type",
        ),
        (
            "/agentik/conversations/{id}/send",
            {"content": [{"type": "image", "data": "not base64!", "mime_type": "image/png"}]},
            "content[0].data",
        ),
        (
            "/agentik/conversations/{id}/send",
            {"content": [{"type": "image", "url": "https://x", "data": "aGk="}]},
            "content[0]",
        ),
        ("/agentik/conversations/{id}/send", {"text": 3}, "text"),
        ("/agentik/conversations/{id}/interrupt", {"run_id": 3}, "run_id"),
    ],
)
def test_a_missing_or_mistyped_field_is_400_naming_the_field(
    api: ApiClient, path: str, body: object, field: str
) -> None:
    conversation_id = api.new_conversation()
    response = api.call("POST", path.format(id=conversation_id), json=body)
    message = _error(response, 400, "invalid_argument")
    assert message.startswith(field) or f" {field} " in f" {message} "


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("limit=abc", "limit"),
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=1.5", "limit"),
        ("offset=-1", "offset"),
        ("offset=99999999999999999999999999", "offset"),
        ("offset=%EF%BC%91", "offset"),
    ],
)
def test_a_bad_limit_or_offset_is_400_naming_it(api: ApiClient, query: str, name: str) -> None:
    message = _error(api.call("GET", f"/agentik/conversations?{query}"), 400, "invalid_argument")
    assert message.startswith(name)


def test_a_bad_message_limit_or_resume_point_is_400(api: ApiClient) -> None:
    conversation_id = api.new_conversation()
    base = f"/agentik/conversations/{conversation_id}"
    assert _error(api.call("GET", f"{base}/messages?limit=-5"), 400, "invalid_argument").startswith(
        "limit"
    )
    bad_header = api.call("GET", f"{base}/events", headers={"Last-Event-ID": "abc"})
    assert _error(bad_header, 400, "invalid_argument").startswith("Last-Event-ID")
    assert _error(api.call("GET", f"{base}/events?after=-1"), 400, "invalid_argument").startswith(
        "after"
    )
    assert _error(
        api.call("GET", f"{base}/events?until_idle=maybe"), 400, "invalid_argument"
    ).startswith("until_idle")


@pytest.mark.parametrize(("method", "path", "body"), CONVERSATION_ENDPOINTS)
def test_an_unknown_conversation_is_404_naming_a_conversation_not_an_engine_session(
    api: ApiClient, method: str, path: str, body: object
) -> None:
    response = api.call(method, path.format(id="no-such-conversation"), json=body)
    message = _error(response, 404, "not_found")
    assert message == "conversation 'no-such-conversation' not found"


def test_an_unknown_after_message_id_is_a_client_error_naming_the_id(api: ApiClient) -> None:
    conversation_id = api.new_conversation()
    response = api.call("GET", f"/agentik/conversations/{conversation_id}/messages?after=nope")
    # The proto says NOT_FOUND; the engine answers INVALID_ARGUMENT. Either is the client's.
    code = "not_found" if response.status_code == 404 else "invalid_argument"
    assert "nope" in _error(response, response.status_code, code)
    assert response.status_code in (400, 404)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/agentik/conversations", None),
        ("GET", "/agentik/conversations", None),
        *CONVERSATION_ENDPOINTS,
    ],
)
def test_an_unreachable_engine_is_503_engine_unavailable(
    make_app: Callable[..., Flask], method: str, path: str, body: object
) -> None:
    api = ApiClient(make_app(f"127.0.0.1:{_closed_port()}").test_client())
    response = api.call(method, path.format(id="any"), json=body)
    assert _error(response, 503, "engine_unavailable") == "the engine is unreachable"


def test_an_unexpected_failure_is_a_json_500_without_details(
    make_app: Callable[..., Flask],
) -> None:
    app = make_app()
    app.testing = False

    @app.get("/boom")
    def boom() -> str:
        raise RuntimeError("secret internals")

    message = _error(app.test_client().get("/boom"), 500, "internal")
    assert "secret" not in message


def test_the_grpc_table_maps_every_status_but_ok_and_no_client_mistake_to_500() -> None:
    assert set(GRPC_TO_HTTP) == set(grpc.StatusCode) - {grpc.StatusCode.OK}
    for code in (
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.ALREADY_EXISTS,
    ):
        assert 400 <= GRPC_TO_HTTP[code][0] < 500
    assert GRPC_TO_HTTP[grpc.StatusCode.FAILED_PRECONDITION] == (409, "busy")


class _RpcError(grpc.RpcError):
    """A failed engine call as grpc raises it: a status code and its details."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


@pytest.mark.parametrize(
    ("code", "details"),
    [
        (grpc.StatusCode.UNAVAILABLE, "cannot reach http://10.0.0.7:8080/v1/chat/completions"),
        (grpc.StatusCode.UNAVAILABLE, "ipv4:10.1.2.3:50051: Socket closed"),
        (grpc.StatusCode.UNAVAILABLE, "recvmsg: Connection reset by peer (engine.internal:50051)"),
        (grpc.StatusCode.INVALID_ARGUMENT, "Unexpected <class 'ValueError'>: bad value"),
        (grpc.StatusCode.FAILED_PRECONDITION, "sqlite3.OperationalError: database is locked"),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "KeyError: 'x' at /srv/agentik/engine.py"),
    ],
)
def test_engine_details_with_urls_hosts_or_exception_classes_never_reach_the_client(
    code: grpc.StatusCode, details: str
) -> None:
    mapped = from_rpc_error(_RpcError(code, details))
    assert (mapped.status, mapped.code) == GRPC_TO_HTTP[code]
    for leak in ("://", "10.", "50051", "engine.internal", "Error", "<class", "/srv"):
        assert leak not in mapped.message, mapped.message
    assert mapped.message


@pytest.mark.parametrize(
    ("code", "details"),
    [
        (grpc.StatusCode.UNAVAILABLE, "storage unavailable: the disk is full"),
        (grpc.StatusCode.INVALID_ARGUMENT, "message ids must be unique, got u1 twice"),
        (grpc.StatusCode.NOT_FOUND, "no conversation c-1"),
    ],
)
def test_engine_details_meant_for_clients_pass_through(code: grpc.StatusCode, details: str) -> None:
    assert from_rpc_error(_RpcError(code, details)).message == details


@pytest.mark.parametrize(
    ("details", "words", "said"),
    [
        ("session 's1' not found", ENGINE_WORDS, "session 's1' not found"),
        ("session 's1' not found", AGENTIK_WORDS, "conversation 's1' not found"),
        ("session 's1' not found", MCP_WORDS, "conversation 's1' not found"),
        ("session 's1' not found", AGUI_WORDS, "thread 's1' not found"),
        # A quoted value is the client's own: never reworded.
        ("session 'session' not found", AGENTIK_WORDS, "conversation 'session' not found"),
        (
            "after_seq 9 is past the session's last event (2)",
            AGENTIK_WORDS,
            "the resume point 9 (after, or Last-Event-ID) is past the conversation's last "
            "event (2)",
        ),
        (
            "resume[1].interrupt_id 'nope' is not pending in this conversation",
            AGENTIK_WORDS,
            "decisions[1].interrupt_id 'nope' is not pending in this conversation",
        ),
        (
            "resume[1].interrupt_id 'nope' is not pending in this conversation",
            AGUI_WORDS,
            "resume[1].interruptId 'nope' is not pending in this conversation",
        ),
        (
            "resume must answer every pending interrupt; missing 'i1' (approve calculate)",
            MCP_WORDS,
            "decisions must answer every pending interrupt; missing 'i1' (approve calculate)",
        ),
    ],
)
def test_each_surface_says_the_engines_refusal_in_its_own_words(
    details: str, words: Any, said: str
) -> None:
    mapped = from_rpc_error(_RpcError(grpc.StatusCode.NOT_FOUND, details), words)
    assert mapped.message == said


@pytest.mark.parametrize(
    "details",
    [
        "SERVER: Sent message larger than max (5000385 vs. 4194304)",
        "CLIENT: Received message larger than max (5000385 vs. 4194304)",
    ],
)
def test_grpcs_own_message_size_refusal_is_an_engine_error_without_its_text(details: str) -> None:
    mapped = from_rpc_error(_RpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, details))
    assert (mapped.status, mapped.code) == (502, "engine_error")
    assert "vs." not in mapped.message and "SERVER" not in mapped.message
    assert "4 MiB" in mapped.message


def test_an_answered_error_lets_go_of_the_request(app: Flask) -> None:
    """Errors of routing and of gRPC's interceptors sit in reference cycles with their
    frames, which hold the request's body: with the web worker's collector set for a
    server, 240 refused 900 KB requests grew a worker by 85 MiB. Each error handler lets its
    error go of its traceback. With the collector off, after refusals of each kind (a route
    that does not exist, the engine's refusal, the facade's own, one a route maps itself), no
    error may be among what only the collector could free."""
    client = app.test_client()
    big = "y" * 200_000
    gc.collect()
    gc.disable()
    try:
        _error(client.post("/nowhere", json={"text": big}), 404, "not_found")
        _error(client.post("/agentik/conversations", json={"title": big}), 400, "invalid_argument")
        _error(client.get("/agentik/conversations/nope"), 404, "not_found")
        _error(
            client.post("/agentik/conversations", data="{", content_type="application/json"),
            400,
            "invalid_json",
        )
        # a refusal the route maps itself (A2A: a JSON-RPC error, HTTP 200)
        task = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "nope"}}
        answer = client.post("/", json=task, headers={"A2A-Version": "1.0"}).get_json()
        assert answer["error"]["code"] == -32001, answer  # TaskNotFoundError
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        kept = [
            repr(o)[:80]
            for o in gc.garbage
            # the engine of these tests runs in this process: its calls' own (frameless)
            # AbortErrors are not the facade's
            if (isinstance(o, BaseException) and not isinstance(o, grpc.aio.AbortError))
            or (isinstance(o, types.FrameType) and "web_facade" in o.f_code.co_filename)
        ]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert kept == [], f"errors and frames held in reference cycles: {kept}"
