"""``[[a2a.agents]]`` and ``AGENTIK_A2A_AGENTS``: remote A2A agents as tools, in the config."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from agentik.config import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_RESPONSE_BYTES,
    A2aAgentConfig,
    A2aSettings,
    ConfigError,
    Settings,
    load_settings,
    parse_a2a_agents_env,
)
from engine_service.build import build_tools


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agentik.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _load(
    tmp_path: Path, text: str, env: dict[str, str] | None = None, *, mcp: bool = True
) -> Settings:
    return load_settings(_write(tmp_path, text), env or {}, mcp=mcp)


def _refused(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text, env)
    return str(caught.value)


def _refused_env(value: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_settings(None, {"AGENTIK_A2A_AGENTS": value})
    return str(caught.value)


_RESEARCH = """
[[a2a.agents]]
name = "research"
url = "https://research.example.com/"
headers = { Authorization = "Bearer ${RESEARCH_TOKEN}", X-Team = "blue" }
endpoint = "https://internal.example.com:8000/rpc"
description = "Finds papers."
connect_timeout = 5
call_timeout = 90.5
max_response_bytes = 65536

[[a2a.agents]]
name = "plain-2"
url = "https://user:pw@cards.example.com:8443/agents/plain.json?x=1"
"""


def test_every_key_of_an_entry_is_read(tmp_path: Path) -> None:
    settings = _load(tmp_path, _RESEARCH, {"RESEARCH_TOKEN": "s3cret"})
    research, plain = settings.a2a.agents
    assert research == A2aAgentConfig(
        name="research",
        url="https://research.example.com/",
        headers={"Authorization": "Bearer s3cret", "X-Team": "blue"},
        endpoint="https://internal.example.com:8000/rpc",
        description="Finds papers.",
        connect_timeout=5.0,
        call_timeout=90.5,
        max_response_bytes=65536,
    )
    assert plain == A2aAgentConfig(
        name="plain-2", url="https://user:pw@cards.example.com:8443/agents/plain.json?x=1"
    )
    assert plain.headers == {} and plain.endpoint == "" and plain.description == ""
    assert plain.connect_timeout == DEFAULT_CONNECT_TIMEOUT
    assert plain.call_timeout is None
    assert plain.max_response_bytes == DEFAULT_MAX_RESPONSE_BYTES == 4 * 1024 * 1024
    assert settings.mcp.servers == ()


def test_the_card_url_of_a_base_url_and_of_a_json_url(tmp_path: Path) -> None:
    research, plain = _load(tmp_path, _RESEARCH, {"RESEARCH_TOKEN": "t"}).a2a.agents
    assert research.card_url == "https://research.example.com/.well-known/agent-card.json"
    assert research.target == "https://research.example.com/.well-known/agent-card.json"
    assert plain.card_url == plain.url  # a .json URL is the card itself
    assert plain.target == "https://cards.example.com:8443/agents/plain.json"  # no pw, no query
    [nested] = parse_a2a_agents_env("n=http://host:81/a2a/v1")
    assert nested.card_url == "http://host:81/a2a/v1/.well-known/agent-card.json"


def test_the_secret_in_headers_is_not_in_the_repr(tmp_path: Path) -> None:
    [research, _] = _load(tmp_path, _RESEARCH, {"RESEARCH_TOKEN": "s3cret"}).a2a.agents
    assert "s3cret" not in repr(research)


def test_an_unset_variable_in_headers_is_refused_by_name(tmp_path: Path) -> None:
    message = _refused(tmp_path, _RESEARCH, {"OTHER": "x"})
    assert message == (
        f"invalid headers.Authorization of [[a2a.agents]] entry 1 in "
        f"{str(tmp_path / 'agentik.toml')!r} ('research'): names the environment variable "
        "'RESEARCH_TOKEN', which is unset"
    )


def test_the_env_form_names_two_agents() -> None:
    settings = load_settings(
        None, {"AGENTIK_A2A_AGENTS": " research=https://r.example.com/ , other=http://o:9/c.json,"}
    )
    assert settings.a2a.agents == (
        A2aAgentConfig(name="research", url="https://r.example.com/"),
        A2aAgentConfig(name="other", url="http://o:9/c.json"),
    )
    assert settings.a2a.agents[1].card_url == "http://o:9/c.json"


def test_the_env_form_refuses_an_item_that_is_not_name_equals_url() -> None:
    message = _refused_env("good=https://g.example.com/,just-a-name")
    assert message == (
        "item 2 of AGENTIK_A2A_AGENTS must be NAME=URL with a NAME of 1 to 64 characters of "
        "A-Z a-z 0-9 _ -; got 'just-a-name'"
    )
    assert "item 1 of AGENTIK_A2A_AGENTS" in _refused_env("bad name=https://x.example.com/")


def test_the_env_form_refuses_a_url_that_is_not_http() -> None:
    message = _refused_env("files=ftp://files.example.com/")
    assert message == (
        "invalid url of item 1 of AGENTIK_A2A_AGENTS ('files'): must be an http:// or "
        "https:// URL; got 'ftp://files.example.com/'"
    )
    assert "invalid url of item 1" in _refused_env("empty=")


def test_the_env_form_refuses_a_name_used_twice() -> None:
    message = _refused_env("a=https://one.example.com/,a=https://two.example.com/")
    assert message == "AGENTIK_A2A_AGENTS: the agent name 'a' is used twice"


def test_a_name_used_twice_in_the_file_is_refused(tmp_path: Path) -> None:
    message = _refused(
        tmp_path,
        '[[a2a.agents]]\nname = "a"\nurl = "https://one.example.com/"\n'
        '[[a2a.agents]]\nname = "a"\nurl = "https://two.example.com/"\n',
    )
    path = str(tmp_path / "agentik.toml")
    assert message == f"[[a2a.agents]] in {path!r}: the agent name 'a' is used twice"


def test_the_env_form_replaces_the_files_list(tmp_path: Path) -> None:
    settings = _load(
        tmp_path,
        _RESEARCH,
        {"RESEARCH_TOKEN": "t", "AGENTIK_A2A_AGENTS": "only=https://only.example.com/"},
    )
    assert settings.a2a.agents == (A2aAgentConfig(name="only", url="https://only.example.com/"),)
    # An empty variable does not replace anything.
    kept = _load(tmp_path, _RESEARCH, {"RESEARCH_TOKEN": "t", "AGENTIK_A2A_AGENTS": "  "})
    assert [a.name for a in kept.a2a.agents] == ["research", "plain-2"]


def test_the_web_facade_skips_the_agents_and_needs_none_of_their_variables(
    tmp_path: Path,
) -> None:
    env = {"AGENTIK_A2A_AGENTS": "only=https://only.example.com/"}
    settings = _load(tmp_path, _RESEARCH + '\n[a2a]\nname = "Me"\n', env, mcp=False)
    assert settings.a2a.agents == ()
    assert settings.a2a.name == "Me"  # the rest of [a2a] still counts
    # The same file for the engine needs RESEARCH_TOKEN.
    assert "RESEARCH_TOKEN" in _refused(tmp_path, _RESEARCH)
    # A broken AGENTIK_A2A_AGENTS is not the facade's business either.
    assert load_settings(None, {"AGENTIK_A2A_AGENTS": "bad item"}, mcp=False).a2a.agents == ()


@pytest.mark.parametrize("size", [0, 1023, "1MB"])
def test_a_max_response_bytes_under_1024_or_not_a_number_is_refused(
    tmp_path: Path, size: object
) -> None:
    value = f'"{size}"' if isinstance(size, str) else size
    message = _refused(
        tmp_path,
        '[[a2a.agents]]\nname = "a"\nurl = "https://a.example.com/"\n'
        f"max_response_bytes = {value}\n",
    )
    path = str(tmp_path / "agentik.toml")
    why = "must be an integer, not str" if isinstance(size, str) else "must be between 1024 and"
    assert message.startswith(
        f"invalid max_response_bytes of [[a2a.agents]] entry 1 in {path!r} ('a'): {why}"
    )


def test_an_unknown_key_gets_a_did_you_mean_hint(tmp_path: Path) -> None:
    message = _refused(
        tmp_path,
        '[[a2a.agents]]\nname = "a"\nurl = "https://a.example.com/"\ncall_timout = 5\n',
    )
    path = str(tmp_path / "agentik.toml")
    assert message == (
        f"unknown key 'call_timout' in [[a2a.agents]] entry 1 in {path!r}; "
        "did you mean 'call_timeout'?"
    )


def test_a_misspelt_agents_key_in_the_a2a_section_gets_a_hint(tmp_path: Path) -> None:
    message = _refused(tmp_path, "[a2a]\nagent = []\n")
    path = str(tmp_path / "agentik.toml")
    assert message == f"unknown key 'agent' in [a2a] of {path!r}; did you mean 'agents'?"


def test_a_header_value_with_a_line_break_is_refused(tmp_path: Path) -> None:
    literal = _refused(
        tmp_path,
        '[[a2a.agents]]\nname = "a"\nurl = "https://a.example.com/"\n'
        'headers = { X-Bad = "one\\r\\nInjected: two" }\n',
    )
    path = str(tmp_path / "agentik.toml")
    assert literal == (
        f"invalid headers.X-Bad of [[a2a.agents]] entry 1 in {path!r} ('a'): "
        "must not contain line breaks or NUL"
    )
    expanded = _refused(
        tmp_path,
        '[[a2a.agents]]\nname = "a"\nurl = "https://a.example.com/"\n'
        'headers = { Authorization = "Bearer ${TOK}" }\n',
        {"TOK": "abc\nInjected: yes"},
    )
    assert expanded.startswith("invalid headers.Authorization of [[a2a.agents]] entry 1")
    assert "must not contain line breaks or NUL" in expanded
    assert "Injected" not in expanded  # the secret is not echoed


def test_a_header_name_that_is_not_a_token_is_refused(tmp_path: Path) -> None:
    message = _refused(
        tmp_path,
        '[[a2a.agents]]\nname = "a"\nurl = "https://a.example.com/"\n'
        'headers = { "Bad Header" = "x" }\n',
    )
    assert message.startswith("invalid headers of [[a2a.agents]] entry 1 in ")
    assert message.endswith(
        "('a'): has a name that is not a valid HTTP header name; got 'Bad Header'"
    )


@pytest.mark.parametrize("length", [1, 64])
def test_a_name_of_up_to_64_characters_is_accepted(tmp_path: Path, length: int) -> None:
    name = ("Ab_9-" * 13)[:length]
    [agent] = _load(
        tmp_path, f'[[a2a.agents]]\nname = "{name}"\nurl = "https://a.example.com/"\n'
    ).a2a.agents
    assert agent.name == name


@pytest.mark.parametrize("name", ["a" * 65, "has space", "dotted.name", "slash/name", "ümlaut"])
def test_a_name_too_long_or_with_other_characters_is_refused(tmp_path: Path, name: str) -> None:
    message = _refused(
        tmp_path, f'[[a2a.agents]]\nname = "{name}"\nurl = "https://a.example.com/"\n'
    )
    path = str(tmp_path / "agentik.toml")
    assert message == (
        f"invalid name of [[a2a.agents]] entry 1 in {path!r}: must be 1 to 64 characters of "
        f"A-Z a-z 0-9 _ -; got {name!r}"
    )


def test_an_entry_without_url_and_a_bad_timeout_are_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "agentik.toml")
    missing = _refused(tmp_path, '[[a2a.agents]]\nname = "a"\n')
    assert missing == f"[[a2a.agents]] entry 1 in {path!r} ('a') needs 'url'"
    zero = _refused(
        tmp_path, '[[a2a.agents]]\nname = "a"\nurl = "https://a.example.com/"\ncall_timeout = 0\n'
    )
    assert zero == (
        f"invalid call_timeout of [[a2a.agents]] entry 1 in {path!r} ('a'): "
        "must be a positive number of seconds; got 0"
    )
    endpoint = _refused(
        tmp_path, '[[a2a.agents]]\nname = "a"\nurl = "https://a.example.com/"\nendpoint = "x"\n'
    )
    assert endpoint.startswith(f"invalid endpoint of [[a2a.agents]] entry 1 in {path!r} ('a')")


def test_agents_must_be_an_array_of_tables(tmp_path: Path) -> None:
    # The env form's string is not accepted in the file (nor blamed on the variable).
    message = _refused(tmp_path, '[a2a]\nagents = "research=https://r.example.com/"\n')
    path = str(tmp_path / "agentik.toml")
    assert message == (f"a2a.agents in {path!r} must be an array of tables ([[a2a.agents]])")


def test_build_tools_refuses_an_agent_named_like_a_native_tool() -> None:
    settings = load_settings(None, {})
    clash = dataclasses.replace(
        settings,
        a2a=A2aSettings(agents=(A2aAgentConfig(name="calculate", url="https://c.example.com/"),)),
    )
    with pytest.raises(ConfigError) as caught:
        build_tools(clash)
    assert str(caught.value) == (
        "the A2A agent name 'calculate' is taken by the native tool of that name: rename the agent"
    )
    fine = dataclasses.replace(
        settings,
        a2a=A2aSettings(agents=(A2aAgentConfig(name="calculator", url="https://c.example.com/"),)),
    )
    registry = build_tools(fine)
    assert "calculate" in registry and "calculator" not in registry  # joins when started
