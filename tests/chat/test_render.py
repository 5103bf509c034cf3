"""The chat client's rendering of a turn's events."""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from agentik_chat.api import Event
from agentik_chat.render import Renderer


def test_a_retried_answer_is_said_on_the_aside_and_the_new_answer_starts_on_its_own_line() -> None:
    text, aside = io.StringIO(), io.StringIO()
    renderer = Renderer(text, aside, color=False)
    for event in [
        Event("start_response", {"message_id": "m1"}),
        Event("append_text", {"message_id": "m1", "text": "half an"}),
        Event("retry", {"message_id": "m1", "reason": "the engine stopped"}),
        Event("start_response", {"message_id": "m2"}),
        Event("append_text", {"message_id": "m2", "text": "the whole answer"}),
    ]:
        renderer.event(event)
    renderer.finish()
    assert "[the answer was cut; asking again]" in aside.getvalue()
    assert text.getvalue().splitlines()[-1] == "the whole answer"


def _one_pipe() -> tuple[TextIO, TextIO, Callable[[], str]]:
    """stdout and stderr as ``2>&1 | ...`` makes them: two streams on one pipe; and what
    came out of it, once both are closed."""
    read, write = os.pipe()
    text = os.fdopen(write, "w", encoding="utf-8")
    aside = os.fdopen(os.dup(write), "w", encoding="utf-8")

    def came_out() -> str:
        text.close()
        aside.close()
        with os.fdopen(read, encoding="utf-8") as pipe:
            return pipe.read()

    return text, aside, came_out


def test_a_notice_on_stderr_ends_the_answers_open_line_when_both_go_to_one_pipe() -> None:
    text, aside, came_out = _one_pipe()
    renderer = Renderer(text, aside, color=False)
    renderer.event(Event("start_response", {"message_id": "m1"}))
    renderer.event(Event("append_text", {"message_id": "m1", "text": "You said: (offline — "}))
    renderer.notice("the stream broke; picking the turn up again")
    renderer.event(Event("append_text", {"message_id": "m1", "text": "the rest."}))
    renderer.finish()

    assert came_out() == (
        "You said: (offline — \nthe stream broke; picking the turn up again\nthe rest.\n"
    )


def test_the_answer_in_a_file_of_its_own_gets_no_line_breaks_of_the_notices(
    tmp_path: Path,
) -> None:
    with (tmp_path / "out").open("w") as text, (tmp_path / "err").open("w") as aside:
        renderer = Renderer(text, aside, color=False)
        renderer.event(Event("append_text", {"message_id": "m1", "text": "half "}))
        renderer.notice("the stream broke; picking the turn up again")
        renderer.event(Event("append_text", {"message_id": "m1", "text": "whole"}))
        renderer.finish()

    assert (tmp_path / "out").read_text() == "half whole\n"
    assert (tmp_path / "err").read_text() == "the stream broke; picking the turn up again\n"
