"""``web_facade.gunicorn_worker``: whether an answer may keep its connection, given what is
left of its request's body, decided without waiting for that body; and ``drop_rest``, which
drops that rest where no worker's loop does it (under gunicorn the loop drops it after the
answer: ``tests/web/test_body_rest.py``; the e2e side: ``tests/web/e2e/test_body_over_limit.py``
and ``tests/web/e2e/test_held_body.py``)."""

from __future__ import annotations

import io
from typing import Any

import pytest

from web_facade.gunicorn_worker import _rest_too_long, _says_close
from web_facade.request_heads import drop_rest

BOUND = 1000


class Held(io.RawIOBase):
    """A body whose client holds it back: any read fails the test (it would wait)."""

    def read(self, size: int = -1) -> bytes:
        raise AssertionError("the body was waited for before the answer")


def _environ(body: bytes, read: int, length: bool = True) -> dict[str, Any]:
    stream = io.BytesIO(body)
    stream.read(read)  # what the app read
    environ: dict[str, Any] = {"wsgi.input": stream}
    if length:
        environ["CONTENT_LENGTH"] = str(len(body))
    return environ


def test_a_body_read_whole_keeps_the_connection_whatever_its_length() -> None:
    # a bound set below the largest body the app takes must not close every such answer
    assert not _rest_too_long(_environ(b"x" * 5000, read=5000), BOUND)
    assert not _rest_too_long(_environ(b"", read=0), BOUND)
    assert not _rest_too_long({}, BOUND)


def test_a_rest_within_the_bound_is_not_read_before_the_answer() -> None:
    """The answer goes out at once; the rest is dropped after it."""
    assert not _rest_too_long({"wsgi.input": Held(), "CONTENT_LENGTH": "900"}, BOUND)
    assert not _rest_too_long({"wsgi.input": Held()}, BOUND)  # chunked: judged after
    environ = _environ(b"x" * 900, read=10)
    assert not _rest_too_long(environ, BOUND)
    assert environ["wsgi.input"].tell() == 10
    assert drop_rest(environ["wsgi.input"], None, BOUND)  # after the answer
    assert environ["wsgi.input"].read() == b""


def test_a_rest_over_the_bound_closes() -> None:
    assert _rest_too_long(_environ(b"x" * 5000, read=10), BOUND)  # its length says so
    chunked = _environ(b"x" * 5000, read=10, length=False)
    assert not drop_rest(chunked["wsgi.input"], None, BOUND)  # found after the answer


def test_a_body_that_fails_to_arrive_after_the_answer_closes() -> None:
    class Late(io.RawIOBase):
        def read(self, size: int = -1) -> bytes:
            raise TimeoutError("the request body did not arrive within 10 seconds")

    assert not drop_rest(Late(), None, BOUND)


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
