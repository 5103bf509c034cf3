"""``core.bounds``: what is split, what is clipped and what is omitted, and by how much."""

from __future__ import annotations

from datetime import UTC, datetime

from engine_service.core import events as ev
from engine_service.core.bounds import (
    EVENT_OMITTED,
    body_size,
    bound_body,
    bound_message,
    bounded_events,
    bounded_page,
    bounded_snapshot,
    clip_text,
    message_size,
    split_text,
)
from engine_service.core.models import (
    ImagePart,
    Interrupt,
    InterruptKind,
    Message,
    Role,
    TextPart,
    ToolCall,
)

LIMIT = 64 * 1024


def test_split_text_cuts_no_character_and_loses_nothing() -> None:
    text = "aé€😀" * 50_000
    pieces = split_text(text, LIMIT)
    assert "".join(pieces) == text
    assert len(pieces) > 1
    assert all(len(p.encode()) <= LIMIT for p in pieces)


def test_split_text_leaves_short_text_alone() -> None:
    assert split_text("short", LIMIT) == ["short"]


def test_clip_text_fits_the_budget_and_says_how_much_was_cut() -> None:
    text = "x" * 200_000
    clipped, cut = clip_text(text, LIMIT, LIMIT)
    assert len(clipped.encode()) <= LIMIT
    assert cut == 200_000 - clipped.partition("\n")[0].count("x")
    assert f"{cut:,} of 200,000 bytes not shown" in clipped
    assert "max_event_bytes" in clipped


def test_a_message_over_the_limit_is_clipped_text_first_with_a_note() -> None:
    message = Message(
        "m",
        Role.ASSISTANT,
        [TextPart("t" * 300_000), ImagePart(data=b"i" * 100_000, mime_type="image/png")],
        tool_calls=[ToolCall("c", "tool", "a" * 100_000)],
        created_at=datetime.now(UTC),
    )
    clipped = bound_message(message, LIMIT)
    assert message_size(clipped) <= LIMIT
    assert clipped.id == "m" and clipped.created_at == message.created_at
    assert not any(isinstance(p, ImagePart) for p in clipped.content)  # dropped whole
    last = clipped.content[-1]
    assert isinstance(last, TextPart) and "clipped by agentik" in last.text
    assert message.content[0] == TextPart("t" * 300_000)  # the original is untouched


def test_a_message_that_fits_is_returned_as_is() -> None:
    message = Message("m", Role.USER, [TextPart("hello")])
    assert bound_message(message, LIMIT) is message


def test_the_snapshot_keeps_the_most_recent_messages_that_fit() -> None:
    history = [Message(f"m{i}", Role.USER, [TextPart("x" * 5_000)]) for i in range(100)]
    kept = bounded_snapshot(history, LIMIT)
    assert [m.id for m in kept] == [m.id for m in history[-len(kept) :]]
    assert 5 < len(kept) < 15
    assert sum(message_size(m) for m in kept) <= LIMIT


def test_a_page_stops_at_the_byte_budget_but_holds_at_least_one() -> None:
    history = [Message(f"m{i}", Role.USER, [TextPart("x" * 50_000)]) for i in range(10)]
    assert len(bounded_page(history, LIMIT, LIMIT)) == 1
    huge = [Message("h", Role.USER, [TextPart("x" * 500_000)])]
    (only,) = bounded_page(huge, LIMIT, LIMIT)
    assert message_size(only) <= LIMIT


def test_a_json_event_too_large_is_omitted_by_name_and_a_run_end_stays_an_end() -> None:
    state = ev.StateSnapshot({"blob": "s" * 100_000})
    omitted = bound_body(state, LIMIT)
    assert isinstance(omitted, ev.Custom) and omitted.name == EVENT_OMITTED
    assert omitted.value["event"] == "StateSnapshot" and omitted.value["bytes"] > LIMIT

    call = ToolCall("c", "deploy", "a" * 100_000)
    asked = Interrupt("i", InterruptKind.APPROVAL, "r", call, "approve?")
    finished = ev.RunFinished(
        outcome=ev.Outcome.INTERRUPT, result={"r": "x" * 100_000}, interrupts=[asked]
    )
    bounded = bound_body(finished, LIMIT)
    assert isinstance(bounded, ev.RunFinished) and bounded.result is None
    assert [i.id for i in bounded.interrupts] == ["i"]  # the run still waits for it
    assert body_size(bounded) <= LIMIT


def test_events_read_back_are_bounded_one_by_one_and_the_batch_by_bytes() -> None:
    events = [
        ev.Event(n, 0.0, "s", "r", ev.TextMessageContent("m", "x" * 200_000)) for n in (1, 2, 3)
    ]
    (first,) = bounded_events(events, LIMIT, LIMIT)
    assert first.seq == 1 and body_size(first.body) <= LIMIT
    assert isinstance(first.body, ev.TextMessageContent)
    assert "clipped by agentik" in first.body.delta
    small = [ev.Event(n, 0.0, "s", "r", ev.TextMessageContent("m", "x")) for n in range(9)]
    assert bounded_events(small, LIMIT, LIMIT) == small


def test_events_that_open_or_close_something_are_shortened_never_omitted() -> None:
    start = bound_body(ev.ToolCallStart("c", "n" * 200_000, "m"), LIMIT)
    assert isinstance(start, ev.ToolCallStart) and start.tool_call_id == "c"
    assert body_size(start) <= LIMIT
    step = bound_body(ev.StepStarted("s" * 200_000), LIMIT)
    assert isinstance(step, ev.StepStarted) and body_size(step) <= LIMIT
