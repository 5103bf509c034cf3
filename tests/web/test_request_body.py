"""Reading request bodies, shared by every protocol: the size limit holds with or without a
``Content-Length``; each protocol words the refusal (413 here, a JSON-RPC error in A2A)."""

from __future__ import annotations

import io
from typing import Any

import pytest
from flask import Flask
from flask.ctx import RequestContext
from werkzeug.exceptions import RequestEntityTooLarge, UnsupportedMediaType
from werkzeug.test import EnvironBuilder

from web_facade.errors import ApiError
from web_facade.request_body import read_body, read_json

LIMIT = 64


@pytest.fixture
def app() -> Flask:
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = LIMIT
    return app


def _chunked(app: Flask, body: bytes) -> RequestContext:
    """A request context whose body comes without a length, as chunked bodies do."""
    environ = EnvironBuilder(
        method="POST", input_stream=io.BytesIO(body), content_type="application/json"
    ).get_environ()
    del environ["CONTENT_LENGTH"]
    environ["wsgi.input_terminated"] = True
    return app.request_context(environ)


def test_a_chunked_body_within_the_limit_is_read_whole(app: Flask) -> None:
    with _chunked(app, b"x" * LIMIT):
        assert read_body() == b"x" * LIMIT


def test_a_chunked_body_past_the_limit_is_refused_not_cut(app: Flask) -> None:
    with _chunked(app, b"x" * (LIMIT + 1)), pytest.raises(RequestEntityTooLarge):
        read_body()


def test_a_body_with_a_length_past_the_limit_is_refused(app: Flask) -> None:
    request = app.test_request_context("/", method="POST", data=b"x" * (LIMIT + 1))
    with request, pytest.raises(RequestEntityTooLarge):
        read_body()


def test_a_body_that_is_not_json_is_invalid_json_with_the_parsers_reason(app: Flask) -> None:
    request = app.test_request_context(
        "/", method="POST", data=b"{nope", content_type="application/json"
    )
    with request, pytest.raises(ApiError) as caught:
        read_json()
    assert (caught.value.status, caught.value.code) == (400, "invalid_json")
    assert "line 1 column 2" in caught.value.message


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 32 levels"),
        (b'{"n": ' + b"9" * 5_000 + b"}", "a number with more digits than the server accepts"),
    ],
    ids=["too deep", "too many digits"],
)
def test_a_body_past_pythons_own_limits_is_invalid_json_in_the_clients_words(
    body: bytes, named: str
) -> None:
    app = Flask(__name__)
    request = app.test_request_context(
        "/", method="POST", data=body, content_type="application/json"
    )
    with request, pytest.raises(ApiError) as caught:
        read_json()
    assert (caught.value.status, caught.value.code) == (400, "invalid_json")
    assert named in caught.value.message
    assert "sys." not in caught.value.message and "recursion" not in caught.value.message


class _Unreadable(io.BytesIO):
    """A body that must not be read: the client holds it back."""

    def read(self, size: int | None = -1) -> bytes:
        raise AssertionError("the body was read")

    def readline(self, size: int | None = -1) -> bytes:
        raise AssertionError("the body was read")

    def readinto(self, buffer: Any) -> int:
        raise AssertionError("the body was read")


def test_a_body_announced_as_not_json_is_refused_before_it_is_read(app: Flask) -> None:
    environ = EnvironBuilder(
        method="POST", input_stream=_Unreadable(), content_type="text/plain"
    ).get_environ()
    environ["CONTENT_LENGTH"] = "10"
    with app.request_context(environ), pytest.raises(UnsupportedMediaType) as caught:
        read_body()
    assert "the request sent Content-Type 'text/plain'" in str(caught.value.description)


def test_a_body_announced_past_the_limit_is_refused_by_its_length_first(app: Flask) -> None:
    environ = EnvironBuilder(
        method="POST", input_stream=_Unreadable(), content_type="text/plain"
    ).get_environ()
    environ["CONTENT_LENGTH"] = str(LIMIT + 1)
    with app.request_context(environ), pytest.raises(RequestEntityTooLarge):
        read_body()
