"""Titles: the rule every store shares, and a title made from a first message."""

from __future__ import annotations

import pytest

from engine_service.core.errors import InvalidInput
from engine_service.core.text import TITLE_FROM_MESSAGE, check_title, title_from


def test_a_short_message_is_its_own_title_on_one_line_without_control_characters() -> None:
    assert title_from("  hello\n\tworld\x00\x07 ") == "hello world"


def test_a_long_message_is_cut_at_a_word_with_an_ellipsis() -> None:
    title = title_from("word " * 100)
    assert title.endswith("word…") and len(title) <= TITLE_FROM_MESSAGE
    check_title(title)


def test_a_message_of_one_long_word_is_cut_inside_it() -> None:
    assert title_from("x" * 500) == "x" * (TITLE_FROM_MESSAGE - 1) + "…"


def test_a_title_with_nul_is_refused() -> None:
    with pytest.raises(InvalidInput, match="NUL"):
        check_title("a\x00b")
