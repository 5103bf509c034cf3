"""When a request read in pieces may go to a thread: ``web_facade.request_heads``."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from web_facade.request_heads import (
    HEAD_BYTES,
    LOOP_BODY_BYTES,
    HeadLimits,
    body_to_read,
    head_state,
    request_path,
)

LIMITS = HeadLimits(
    SimpleNamespace(limit_request_line=100, limit_request_fields=4, limit_request_field_size=50)
)


@pytest.mark.parametrize(
    "data",
    [b"", b"GET / HTTP/1.1\r\n", b"GET / HTTP/1.1\r\nHost: a\r\n", b"GET / HTTP/1.1\r\nHost: a\r"],
)
def test_a_head_without_its_empty_line_is_partial(data: bytes) -> None:
    assert head_state(data, LIMITS) == "partial"


def test_a_head_with_its_empty_line_is_whole_and_so_is_one_with_a_bare_lf() -> None:
    assert head_state(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n{", LIMITS) == "whole"
    assert head_state(b"GET / HTTP/1.1\nHost: a", LIMITS) == "whole"


def test_a_request_line_past_its_limit_is_refused_before_it_ends() -> None:
    assert head_state(b"GET /" + b"x" * 100, LIMITS)[0] == 414
    line = b"GET /" + b"x" * 86 + b" HTTP/1.1"  # 100 bytes: at the limit, its CR may follow
    assert head_state(line + b"\r", LIMITS) == "partial"


def test_a_head_past_every_header_at_its_largest_is_refused_before_it_ends() -> None:
    data = b"GET / HTTP/1.1\r\n" + b"X: " + b"y" * 400
    state = head_state(data, LIMITS)
    assert isinstance(state, tuple) and state[:2] == (431, "headers_too_large")


def test_a_head_past_head_bytes_is_refused_whole_or_not() -> None:
    limits = HeadLimits(
        SimpleNamespace(
            limit_request_line=4094, limit_request_fields=100, limit_request_field_size=8190
        )
    )
    assert limits.total == HEAD_BYTES
    big = b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * (HEAD_BYTES // 5)
    for data in (big, big + b"\r\n"):
        state = head_state(data, limits)
        assert isinstance(state, tuple) and state[0] == 431
        assert str(HEAD_BYTES) in state[2]
    assert head_state(b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 100 + b"\r\n", limits) == "whole"


def test_a_small_body_with_a_plain_length_is_read_before_a_thread_is_taken() -> None:
    assert body_to_read(b"POST / HTTP/1.1\r\nContent-Length: 12\r\n\r\n") == 12
    assert body_to_read(b"POST / HTTP/1.1\r\ncontent-length:  7 \r\n\r\n") == 7
    assert body_to_read(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n") == 0


@pytest.mark.parametrize(
    "headers",
    [
        f"Content-Length: {LOOP_BODY_BYTES + 1}",
        "Content-Length: 5\r\nContent-Length: 5",
        "Content-Length: -5",
        "Content-Length: 5\r\nTransfer-Encoding: chunked",
        "Content-Length: 5\r\nExpect: 100-continue",
    ],
    ids=["large", "repeated", "invalid", "chunked", "expect"],
)
def test_any_other_body_is_left_to_the_thread_and_gunicorn(headers: str) -> None:
    assert body_to_read(f"POST / HTTP/1.1\r\n{headers}\r\n\r\n".encode()) == 0


def test_a_body_over_the_limit_is_left_to_the_thread_so_its_413_comes_at_once() -> None:
    """Read in the loop, a body the app refuses would hold its 413 back until it arrived
    whole (or until its deadline, from a client that holds it back)."""
    head = b"POST / HTTP/1.1\r\nContent-Length: 5000\r\n\r\n"
    assert body_to_read(head, limit=5000) == 5000
    assert body_to_read(head, limit=4999) == 0


def test_the_path_of_the_request_line_is_read_without_its_query() -> None:
    assert request_path(b"GET /health?x=1 HTTP/1.1\r\n") == "/health"
    assert request_path(b"\r\nGET /metrics HTTP/1.1\r\n") == "/metrics"
    assert request_path(b"GARBAGE\r\n") == ""
