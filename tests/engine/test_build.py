"""Building the engine from the settings (``engine_service.build``): the start-up warnings
for tool globs and approvals that match no tool (issue 23); each agent's model names its own
settings in a refusal."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from agentik.config import ConfigError, load_settings
from engine_service.build import build_engine, build_model, warn_unmatched
from engine_service.core.chat import ChatRequest
from engine_service.core.errors import LLMError
from engine_service.core.models import Message, Role, TextPart
from engine_service.llm.openai_chat import OpenAIChatModel
from tests.fakes.fake_openai import FakeOpenAI


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agentik.toml"
    path.write_text(text)
    return path


def test_a_misspelt_approval_is_a_start_up_warning(caplog: pytest.LogCaptureFixture) -> None:
    settings = load_settings(None, {"AGENTIK_TOOLS_APPROVAL": "calcualte,calculate"})
    with caplog.at_level(logging.WARNING, logger="engine_service.build"):
        engine = build_engine(settings)
    said = warn_unmatched(settings, engine.tools)
    assert said == ["[tools] approval entry 'calcualte' matches no tool: no call asks for it"]
    assert "'calcualte' matches no tool" in caplog.text
    assert "'calculate'" not in caplog.text


def test_an_agents_unmatched_tool_glob_is_a_warning_naming_the_agent(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
[[mcp.servers]]
name = "files"
command = "true"

[[agents]]
name = "a"
tools = ["calculate", "calcualte", "files__*"]
approval = ["nothing_here"]
""",
    )
    settings = load_settings(path, {})
    engine = build_engine(settings)
    said = warn_unmatched(settings, engine.tools)
    assert said == [
        "agent 'a': tools entry 'calcualte' matches no tool",  # files__*: not known yet
        "agent 'a': approval entry 'nothing_here' matches no tool",
    ]


def test_the_llm_connection_pool_is_bounded_by_the_settings() -> None:
    settings = load_settings(
        None,
        {
            "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
            "AGENTIK_LLM_MAX_IDLE_CONNECTIONS": "7",
            "AGENTIK_LLM_IDLE_TIMEOUT": "2.5",
        },
    )
    model = build_model(settings)
    assert isinstance(model, OpenAIChatModel)
    assert (model._http.max_idle, model._http.idle_timeout) == (7, 2.5)
    default = build_model(load_settings(None, {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}))
    assert isinstance(default, OpenAIChatModel)
    assert (default._http.max_idle, default._http.idle_timeout) == (256, 30.0)


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("AGENTIK_LLM_MAX_IDLE_CONNECTIONS", "-1", "AGENTIK_LLM_MAX_IDLE_CONNECTIONS"),
        ("AGENTIK_LLM_IDLE_TIMEOUT", "0", "AGENTIK_LLM_IDLE_TIMEOUT"),
    ],
)
def test_a_bad_pool_bound_is_refused_naming_it(name: str, value: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        load_settings(None, {name: value})


@pytest.mark.parametrize(
    ("agent", "named"),
    [
        ('base_url = "{url}"\napi_key = "wrong"\n', "check [[agents]] 'researcher' api_key"),
        ('model = "fake-model"\n', "check [llm] api_key (OPENAI_API_KEY)"),
    ],
)
async def test_a_refused_key_names_the_api_key_setting_of_the_agent_that_called(
    tmp_path: Path, agent: str, named: str
) -> None:
    with FakeOpenAI(api_key="sk-good") as fake:
        entry = '[[agents]]\nname = "researcher"\n' + agent.format(url=fake.base_url)
        env = {"OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "also-wrong"}
        settings = load_settings(_write(tmp_path, entry), env)
        model = build_model(settings, settings.agent.agents[0])
        request = ChatRequest([Message("m1", Role.USER, [TextPart("hi")])], [])
        with pytest.raises(LLMError) as refused:
            async for _ in model.stream(request):
                pass
        await model.aclose()

    assert refused.value.code == "llm_auth"
    assert refused.value.message.endswith(named)
