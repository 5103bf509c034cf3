"""Where the rest of a body ends, fed a piece at a time: ``web_facade.body_rest``, checked
against gunicorn's own reader (the e2e side: ``tests/web/e2e/test_held_body.py``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

# gunicorn ships no type information.
from gunicorn.http.body import (  # type: ignore[import-untyped]
    Body,
    ChunkedReader,
    LengthReader,
)
from gunicorn.http.errors import ParseException  # type: ignore[import-untyped]
from gunicorn.http.unreader import IterUnreader  # type: ignore[import-untyped]

from web_facade.body_rest import (
    BodyRest,
    ChunkedRest,
    LengthRest,
    RestNotDropped,
    must_close,
    read_in_part,
    rest_of,
)

BOUND = 10_000
LINE = 40
"""The longest chunk size line here (gunicorn: ``limit_request_field_size``)."""
NEXT = b"GET /health HTTP/1.1\r\nHost: a\r\n\r\n"


def _fed(rest: BodyRest, data: bytes, step: int) -> bytes | None:
    """What follows the body when ``data`` comes ``step`` bytes at a time; None if it
    did not end."""
    for start in range(0, len(data), step):
        after = rest.feed(data[start : start + step])
        if after is not None:
            return after + data[start + step :]
    return None


def _gunicorn_chunked(data: bytes) -> tuple[ChunkedReader, IterUnreader]:
    unreader = IterUnreader([data])
    req = SimpleNamespace(limit_request_field_size=LINE, max_buffer_headers=0, trailers=None)
    return ChunkedReader(req, unreader), unreader


def _gunicorn_after(data: bytes) -> bytes:
    """What follows a chunked body in ``data``, by gunicorn's reader."""
    reader, unreader = _gunicorn_chunked(data)
    while reader.read(65536):
        pass
    return bytes(unreader.read())


VALID = [
    b"5\r\nhello\r\n0\r\n\r\n",
    b"0\r\n\r\n",
    b"000A\r\n0123456789\r\n0\r\n\r\n",
    b'3;name\r\nabc\r\n2 ; a=b;c="d e"\r\nde\r\n0;last\r\n\r\n',
    b"1\r\n\r\r\n1\r\n\n\r\n0\r\n\r\n",  # CR and LF as chunk data
    b"400\r\n" + b"x" * 1024 + b"\r\n0\r\n\r\n",
]


@pytest.mark.parametrize("body", VALID)
@pytest.mark.parametrize("step", [1, 2, 3, 7, 100_000])
def test_a_chunked_body_ends_where_gunicorn_ends_it(body: bytes, step: int) -> None:
    assert _gunicorn_after(body + NEXT) == NEXT
    assert _fed(ChunkedRest(BOUND, LINE), body + NEXT, step) == NEXT


def test_a_chunked_body_not_whole_yet_waits_for_more() -> None:
    rest = ChunkedRest(BOUND, LINE)
    assert rest.feed(b"5\r\nhel") is None
    assert rest.feed(b"lo\r\n0\r") is None
    assert rest.feed(b"\n\r\n") == b""


BROKEN = {
    "bad-size": b"zz\r\n" + NEXT,
    "no-size": b"\r\nabc\r\n0\r\n\r\n",
    "overlong-chunk": b"5\r\nabcdeXX\r\n0\r\n\r\n" + NEXT,
    "bare-lf-size": b"5\nhello\r\n0\r\n\r\n",
    "bad-extension": b"5;=x\r\nhello\r\n0\r\n\r\n",
    "cr-in-extension": b"5;a\rb\r\nhello\r\n0\r\n\r\n",
    "long-size-line": b"5;" + b"a" * LINE,  # and no end in sight
}


@pytest.mark.parametrize("body", BROKEN.values(), ids=BROKEN.keys())
@pytest.mark.parametrize("step", [1, 100_000])
def test_a_broken_chunked_body_is_not_dropped_nor_taken_by_gunicorn(body: bytes, step: int) -> None:
    reader, _ = _gunicorn_chunked(body)
    with pytest.raises(ParseException):
        while reader.read(65536):
            pass
    with pytest.raises(RestNotDropped):
        _fed(ChunkedRest(BOUND, LINE), body, step)


def test_a_request_sent_as_trailers_closes() -> None:
    """gunicorn would parse trailers (and refuse a request line as one); the loop drops
    none: the connection closes."""
    with pytest.raises(RestNotDropped, match="trailers"):
        _fed(ChunkedRest(BOUND, LINE), b"0\r\n" + NEXT, 1)
    with pytest.raises(RestNotDropped, match="trailers"):
        _fed(ChunkedRest(BOUND, LINE), b"0\r\nX-Sum: 1\r\n\r\n", 1)


def test_a_chunked_body_longer_than_the_bound_closes_as_soon_as_it_says_so() -> None:
    rest = ChunkedRest(BOUND, LINE)
    with pytest.raises(RestNotDropped, match="longer"):
        rest.feed(f"{BOUND:x}\r\n".encode())  # nothing of the chunk has come yet
    many = b"".join([b"100\r\n" + b"x" * 256 + b"\r\n"] * 40)  # 40 chunks, 10.5 KB in all
    assert _fed(ChunkedRest(len(many) + 5, LINE), many + b"0\r\n\r\n", 1000) == b""
    with pytest.raises(RestNotDropped, match="longer"):
        _fed(ChunkedRest(BOUND, LINE), many + b"0\r\n\r\n", 1000)


@pytest.mark.parametrize("step", [1, 5, 100_000])
def test_a_length_rest_ends_after_its_bytes(step: int) -> None:
    assert _fed(LengthRest(10), b"0123456789" + NEXT, step) == NEXT
    assert _fed(LengthRest(10), b"012345678", step) is None


def _length_body(data: bytes, length: int) -> Body:
    return Body(LengthReader(IterUnreader([data]), length))


def _chunked_body(data: bytes) -> Body:
    return Body(_gunicorn_chunked(data)[0])


def test_what_is_left_of_a_length_body_is_what_was_not_taken_from_the_socket() -> None:
    body = _length_body(b"x" * 5000, 5000)
    assert isinstance(rest := rest_of(body, BOUND), LengthRest) and rest.left == 5000
    body.read(100)  # gunicorn takes more than that from the socket: the rest is the rest
    assert isinstance(rest := rest_of(body, BOUND), LengthRest)
    assert 0 < rest.left == body.reader.length < 5000 - 100
    body.read()
    assert rest_of(body, BOUND) is None
    assert rest_of(_length_body(b"", 0), BOUND) is None
    assert not must_close(body)


def test_a_length_rest_past_the_bound_is_not_dropped() -> None:
    with pytest.raises(RestNotDropped):
        rest_of(_length_body(b"x" * 10, BOUND + 1), BOUND)


def test_a_chunked_body_untouched_is_dropped_from_its_start_and_one_read_whole_is_done() -> None:
    body = _chunked_body(b"5\r\nhello\r\n0\r\n\r\n")
    assert isinstance(rest_of(body, BOUND), ChunkedRest)
    assert not read_in_part(body) and not must_close(body)
    assert body.read() == b"hello"
    assert rest_of(body, BOUND) is None
    assert not read_in_part(body)


def test_a_chunked_body_read_in_part_must_close() -> None:
    """A 413 reads one byte past the limit: where gunicorn's reader stopped is not known."""
    body = _chunked_body(b"7d0\r\n" + b"x" * 2000 + b"\r\n5\r\nworld\r\n0\r\n\r\n")
    assert body.read(3) == b"xxx"
    assert read_in_part(body) and must_close(body)
    with pytest.raises(RestNotDropped):
        rest_of(body, BOUND)


def test_a_broken_body_must_close() -> None:
    body = _chunked_body(b"zz\r\n")
    with pytest.raises(ParseException):
        body.read()
    assert body.failed and must_close(body)
    with pytest.raises(RestNotDropped):
        rest_of(body, BOUND)
