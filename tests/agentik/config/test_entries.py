"""Arrays of tables (``agentik.config.entries``): bounded, each entry a table, a wrong
value shown unless it is secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentik.config import ConfigError, load_settings


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agentik.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_every_array_of_tables_is_bounded(tmp_path: Path) -> None:
    servers = "".join(f'[[mcp.servers]]\nname = "s{n}"\ncommand = "x"\n' for n in range(257))
    with pytest.raises(ConfigError, match=r"\[\[mcp.servers\]\] in .*: at most 256, got 257"):
        load_settings(_write(tmp_path, servers), {})
    agents = "".join(
        f'[[a2a.agents]]\nname = "a{n}"\nurl = "https://a.example/"\n' for n in range(257)
    )
    with pytest.raises(ConfigError, match=r"at most 256, got 257"):
        load_settings(_write(tmp_path, agents), {})


def test_an_entry_shows_a_wrong_value_unless_it_is_secret(tmp_path: Path) -> None:
    path = _write(tmp_path, '[[agents]]\nname = "a"\nmax_runs = "2"\n')
    with pytest.raises(
        ConfigError, match=r"invalid max_runs of .*\('a'\): must be an integer, not str; got '2'"
    ):
        load_settings(path, {})
    path = _write(tmp_path, '[[agents]]\nname = "a"\napi_key = 5\n')
    with pytest.raises(ConfigError, match=r"invalid api_key of .*: must be a string, not int$"):
        load_settings(path, {})


def test_mcp_entries_must_be_tables(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="must be an array of tables"):
        load_settings(_write(tmp_path, "[mcp]\nservers = 'x'\n"), {})
    with pytest.raises(ConfigError, match=r"\[\[mcp.servers\]\] entry 2 .* must be a table"):
        load_settings(_write(tmp_path, "[mcp]\nservers = [{name = 'a'}, 3]\n"), {})
    with pytest.raises(ConfigError, match=r"unknown key 'mcp\.server'"):
        load_settings(_write(tmp_path, "[[mcp.server]]\nname = 'a'\n"), {})
