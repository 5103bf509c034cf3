"""``[[agents]]`` in the config file (issue 23): errors name the agent and the key, names
are unique, and the facade reads the agents without their secrets."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentik.config import ConfigError, load_settings


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agentik.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('name = "a"\nmax_tool_rounds = 0', r"max_tool_rounds of \[\[agents\]\] entry 1 .*'a'.*"),
        ('name = "a"\nmodle = "x"', r"unknown key 'modle' in \[\[agents\]\] entry 1.*'model'"),
        ('name = "a b"', r"invalid name of \[\[agents\]\] entry 1"),
        ('name = "a"\ntools = "calculate"', r"tools of .*'a'.*array of strings"),
        ('name = "a"\ncompaction = "shrink"', r"compaction of .*'a'.*summarize"),
        ('name = "a"\nsystem_prompt = "x"\nsystem_prompt_file = "p.md"', r"not both"),
        ('name = "a"\nsystem_prompt_file = "missing.md"', r"system_prompt_file of .*'a'"),
        ('name = "a"\napi_key = "${UNSET_VAR}"', r"api_key of .*'a'.*'UNSET_VAR'"),
        ('name = "a"\ncontext_tokens = 1000\nreserve_output_tokens = 1000', r"of agent 'a'"),
    ],
)
def test_a_bad_agent_entry_names_the_agent_and_the_key(
    tmp_path: Path, entry: str, message: str
) -> None:
    path = _write(tmp_path, f"[[agents]]\n{entry}\n")
    with pytest.raises(ConfigError, match=message):
        load_settings(path, {})


def test_agent_names_are_unique_and_the_default_name_follows_the_id_rule(tmp_path: Path) -> None:
    path = _write(tmp_path, '[[agents]]\nname = "a"\n[[agents]]\nname = "a"\n')
    with pytest.raises(ConfigError, match="'a' is used twice"):
        load_settings(path, {})
    with pytest.raises(ConfigError, match="default_agent"):
        load_settings(None, {"AGENTIK_DEFAULT_AGENT": "no spaces"})


def test_the_facade_reads_agents_without_their_secrets(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        '[[agents]]\nname = "a"\napi_key = "${ONLY_THE_ENGINE_HAS}"\n'
        'system_prompt_file = "only/on/the/engine/host.md"\n',
    )
    agents = load_settings(path, {}, mcp=False).agent.agents
    assert [a.name for a in agents] == ["a"]
    assert agents[0].api_key is None


def test_an_agents_base_url_of_the_chat_endpoint_is_refused_naming_the_agent(
    tmp_path: Path,
) -> None:
    path = _write(tmp_path, '[[agents]]\nname = "r"\nbase_url = "http://h/v1/chat/completions"\n')
    with pytest.raises(ConfigError, match=r"invalid base_url of \[\[agents\]\] entry 1 .*'r'"):
        load_settings(path, {})
