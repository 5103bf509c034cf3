"""``engine_service.stores.encoding``: the stored text of events. Bodies of strings, integers
and booleans (the deltas, the starts and ends) are written by orjson: the same text as the
``json`` module writes, for every code point; any other body keeps ``json``'s checks."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from engine_service.core import events as ev
from engine_service.core.errors import InvalidInput
from engine_service.stores import encoding
from engine_service.stores.encoding import event_rows


def _row(body: ev.EventBody) -> str:
    [row] = event_rows("s", [ev.Event(7, 1.5, "s", "r", body)])
    assert row[:4] == ("s", 7, 1.5, "r")
    return str(row[4])


def _json(body: ev.EventBody) -> str:
    raw = encoding.event_to_dict(ev.Event(7, 1.5, "s", "r", body))
    return json.dumps(raw, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def test_a_delta_is_stored_as_the_json_module_writes_it_for_every_code_point() -> None:
    points = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    for start in range(0, len(points), 4096):
        delta = "".join(map(chr, points[start : start + 4096]))
        for body in (
            ev.TextMessageContent("m-ü", delta),
            ev.ToolCallArgs("c1", delta),
            ev.ReasoningMessageContent("r", delta),
        ):
            assert _row(body) == _json(body)
    others: tuple[ev.EventBody, ...] = (
        ev.TextMessageStart("m", "assistant"),
        ev.TextMessageEnd(""),
        ev.ToolCallStart("c1", "search", "m"),
        ev.RunStarted(parent_run_id='p "1" \\ \u2028'),
    )
    for other in others:
        assert _row(other) == _json(other)


def test_a_lone_surrogate_is_written_as_before() -> None:
    body = ev.TextMessageContent("m", "half \ud83d of a pair")
    assert _row(body) == _json(body)


def test_plain_bodies_skip_the_json_module(json_dumps_calls: list[Any]) -> None:
    used = json_dumps_calls
    _row(ev.TextMessageContent("m", "hello"))
    _row(ev.TextMessageEnd("m"))
    assert used == []
    _row(ev.StateSnapshot({"n": 1.5}))
    assert len(used) == 1


def test_bodies_holding_any_json_keep_its_checks() -> None:
    assert ev.StateSnapshot not in encoding._PLAIN
    assert ev.Custom not in encoding._PLAIN
    assert ev.RunFinished not in encoding._PLAIN
    with pytest.raises(InvalidInput, match="not JSON-serialisable"):
        _row(ev.StateSnapshot({"x": math.nan}))
    with pytest.raises(InvalidInput, match="not JSON-serialisable"):
        _row(ev.Custom("c", {"x": math.inf}))
