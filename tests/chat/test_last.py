"""Where ``agentik chat --continue`` keeps the last conversation: per server, ids only."""

from __future__ import annotations

from pathlib import Path

from agentik_chat.last import last_conversation, remember_conversation, state_file


def test_the_state_file_follows_xdg_state_home_else_the_home_directory(tmp_path: Path) -> None:
    assert state_file({"XDG_STATE_HOME": "/x/state"}) == Path("/x/state/agentik/chat.json")
    assert state_file({"HOME": "/home/ann"}) == Path("/home/ann/.local/state/agentik/chat.json")


def test_the_last_conversation_is_kept_per_server(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path)}
    remember_conversation("http://a:8000/", "c-1", env)
    remember_conversation("http://b:8000", "c-2", env)
    remember_conversation("http://a:8000", "c-3", env)

    assert last_conversation("http://a:8000", env) == "c-3"
    assert last_conversation("http://b:8000/", env) == "c-2"
    assert last_conversation("http://c:8000", env) is None


def test_a_damaged_or_unwritable_state_file_is_ignored(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path)}
    (tmp_path / "agentik").mkdir()
    (tmp_path / "agentik" / "chat.json").write_text("{not json")
    assert last_conversation("http://a:8000", env) is None

    blocked = {"XDG_STATE_HOME": str(tmp_path / "file")}
    (tmp_path / "file").write_text("a file, not a directory")
    remember_conversation("http://a:8000", "c-1", blocked)  # no exception
    assert last_conversation("http://a:8000", blocked) is None
