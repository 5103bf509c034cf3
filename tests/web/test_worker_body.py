"""``web_facade.gunicorn_worker``: whether an answer may keep its connection, given what is
left of its request's body (the e2e side: ``tests/web/e2e/test_body_over_limit.py``)."""

from __future__ import annotations

import io
from typing import Any

import pytest

from web_facade.gunicorn_worker import _body_read, _says_close

BOUND = 1000


def _environ(body: bytes, read: int, length: bool = True) -> dict[str, Any]:
    stream = io.BytesIO(body)
    stream.read(read)  # what the app read
    environ: dict[str, Any] = {"wsgi.input": stream}
    if length:
        environ["CONTENT_LENGTH"] = str(len(body))
    return environ


def test_a_body_read_whole_keeps_the_connection_whatever_its_length() -> None:
    # a bound set below the largest body the app takes must not close every such answer
    assert _body_read(_environ(b"x" * 5000, read=5000), BOUND)
    assert _body_read(_environ(b"", read=0), BOUND)
    assert _body_read({}, BOUND)


def test_the_rest_of_a_body_within_the_bound_is_read_and_dropped() -> None:
    environ = _environ(b"x" * 900, read=10)
    assert _body_read(environ, BOUND)
    assert environ["wsgi.input"].read() == b""


def test_a_rest_over_the_bound_closes() -> None:
    assert not _body_read(_environ(b"x" * 5000, read=10), BOUND)  # its length says so
    assert not _body_read(_environ(b"x" * 5000, read=10, length=False), BOUND)  # chunked


def test_a_body_that_fails_to_arrive_closes() -> None:
    class Late(io.RawIOBase):
        def read(self, size: int = -1) -> bytes:
            raise TimeoutError("the request body did not arrive within 10 seconds")

    assert not _body_read({"wsgi.input": Late(), "CONTENT_LENGTH": "10"}, BOUND)


@pytest.mark.parametrize(
    ("headers", "closes"),
    [
        ([("Content-Type", "application/json")], False),
        ([("Connection", "close")], True),
        ([("connection", "Close")], True),
        ([("Connection", "keep-alive")], False),
    ],
)
def test_an_answer_saying_close_closes(headers: list[tuple[str, str]], closes: bool) -> None:
    assert _says_close(headers) is closes
