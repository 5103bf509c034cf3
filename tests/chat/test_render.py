"""The chat client's rendering of a turn's events."""

from __future__ import annotations

import io

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
