"""The A2A errors every binding shares: an engine refusal worded with the A2A fields."""

from __future__ import annotations

import pytest
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError

from agentik.a2a.errors import engine_refusal


@pytest.mark.parametrize(
    ("engine", "a2a"),
    [
        (
            "session_id 'bad id!' is not a valid id: ids are ...",
            ("contextId", "contextId: 'bad id!' is not a valid id: ids are ..."),
        ),
        (
            "messages[0].content[2].image.url must be an http(s) URL or a data:image/* URL",
            ("message.parts[2].url", "message.parts[2].url: must be an http(s) URL or a data:"),
        ),
        (
            "messages[0].content[0].image.data is empty",
            ("message.parts[0].raw", "message.parts[0].raw: is empty"),
        ),
        (
            "messages[0].content[1].image.mime_type 'x' is not an image/* type",
            ("message.parts[1].mediaType", "message.parts[1].mediaType: 'x' is not an image/*"),
        ),
        (
            "messages[0].content[3] is empty (set text, image or document)",
            ("message.parts[3]", "message.parts[3]: is empty (set text, image or document)"),
        ),
        ("messages[0].id 'm' appears twice", ("message", "message: 'm' appears twice")),
    ],
)
def test_an_engine_field_at_the_start_of_a_refusal_becomes_the_a2a_field(
    engine: str, a2a: tuple[str, str]
) -> None:
    error = engine_refusal(InvalidParamsError, engine, grpcStatus="INVALID_ARGUMENT")
    field, start = a2a
    assert isinstance(error, InvalidParamsError)
    assert error.data == {"grpcStatus": "INVALID_ARGUMENT", "field": field}
    assert error.message.startswith(start), error.message


def test_a_refusal_naming_no_engine_field_is_kept_as_it_is() -> None:
    error = engine_refusal(TaskNotFoundError, "run 'x' not found", grpcStatus="NOT_FOUND")
    assert (error.message, error.data) == ("run 'x' not found", {"grpcStatus": "NOT_FOUND"})
    assert engine_refusal(InvalidParamsError, "limit must be between 1 and 100").data is None
