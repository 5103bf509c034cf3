"""The LLM endpoints are checked at start (``GET /models``): a refused port, a wrong model and
a refused key are found before the first message, each agent's own endpoint too, and the fix
names the setting of the agent it belongs to; a good endpoint is ``ok``, one without
``/models`` a warning."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentik.config import load_settings
from engine_service.build import build_agents, build_model
from engine_service.core.agents import Agents
from engine_service.core.limits import RunLimits
from engine_service.core.registry import ToolRegistry
from engine_service.llm.offline import OfflineChatModel
from engine_service.llm.openai_chat import OpenAIChatModel
from engine_service.llm.probe import (
    OFFLINE,
    OK,
    UNAUTHORIZED,
    UNCHECKED,
    UNKNOWN_MODEL,
    UNREACHABLE,
    LlmWatch,
    llm_targets,
    probe_llm,
    probe_target,
)
from tests.fakes.fake_openai import FakeOpenAI

WAIT = 10.0


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(api_key="k") as server:
        yield server


def refused_url() -> str:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


async def test_a_good_endpoint_that_lists_the_model_is_ok(fake: FakeOpenAI) -> None:
    status = await probe_llm(fake.base_url, "k", "fake-model")

    assert status.state == OK and status.ok
    assert "serves 'fake-model'" in status.detail


async def test_a_refused_port_is_unreachable_with_a_fix() -> None:
    status = await probe_llm(refused_url(), "k", "fake-model")

    assert status.state == UNREACHABLE and not status.ok
    assert "OPENAI_BASE_URL" in status.fix


async def test_a_model_the_endpoint_does_not_list_is_an_unknown_model(fake: FakeOpenAI) -> None:
    status = await probe_llm(fake.base_url, "k", "gpt-9")

    assert status.state == UNKNOWN_MODEL
    assert "'gpt-9'" in status.detail and "fake-model, gpt-4o-mini" in status.detail
    assert "AGENTIK_MODEL" in status.fix


async def test_a_refused_key_is_unauthorized(fake: FakeOpenAI) -> None:
    status = await probe_llm(fake.base_url, "wrong", "fake-model")

    assert status.state == UNAUTHORIZED
    assert "OPENAI_API_KEY" in status.fix


async def test_an_endpoint_without_models_is_a_warning_that_the_model_is_not_checked(
    fake: FakeOpenAI,
) -> None:
    fake.models = None

    status = await probe_llm(fake.base_url, "k", "anything")

    assert status.state == UNCHECKED == "model not checked"
    assert not status.ok and not status.failed
    assert (
        status.detail == f"{fake.base_url} has no /models (HTTP 404): 'anything' cannot be checked"
    )
    assert "[llm] base_url (OPENAI_BASE_URL) is not the API's base" in status.fix


async def test_credentials_in_the_url_never_reach_the_detail() -> None:
    status = await probe_llm(refused_url().replace("http://", "http://user:secret@"), "k", "m")

    assert "secret" not in status.detail


async def test_the_watch_logs_its_first_answer_and_each_change(
    fake: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    model = OpenAIChatModel(base_url=fake.base_url, api_key="k", model="gpt-9")
    watch = LlmWatch.of(Agents.single(model, ToolRegistry(), RunLimits()), interval=0)
    assert watch.state == "checking"
    with caplog.at_level(logging.INFO, logger="engine_service.llm.probe"):
        watch.start()
        status = await watch.wait_first(WAIT)
    await watch.stop()
    await model.aclose()

    assert status.state == UNKNOWN_MODEL == watch.state
    assert [r.getMessage().split(":")[:2] for r in caplog.records] == [["llm", " unknown model"]]
    assert caplog.records[0].levelno == logging.WARNING


async def test_the_offline_model_is_not_probed() -> None:
    watch = LlmWatch.of(Agents.single(OfflineChatModel(), ToolRegistry(), RunLimits()), 0)
    watch.start()

    assert (await watch.wait_first(0)).state == OFFLINE


def agents_of(config: str, tmp_path: Path, **env: str) -> Agents:
    """The engine's agents as ``config`` and ``env`` make them (no store, no tools)."""
    path = tmp_path / "agentik.toml"
    path.write_text(config)
    settings = load_settings(path, env)
    return build_agents(settings, ToolRegistry(), build_model(settings), RunLimits())


async def test_each_agents_own_endpoint_is_watched_and_a_refusal_names_its_setting(
    fake: FakeOpenAI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    agents = agents_of(
        f'[[agents]]\nname = "researcher"\nbase_url = "{fake.base_url}"\napi_key = "wrong"\n'
        '[[agents]]\nname = "writer"\nmodel = "fake-model"\n',
        tmp_path,
        OPENAI_BASE_URL=fake.base_url,
        OPENAI_API_KEY="k",
    )
    watch = LlmWatch.of(agents, interval=0)
    with caplog.at_level(logging.INFO, logger="engine_service.llm.probe"):
        watch.start()
        status = await watch.wait_first(WAIT)
    await watch.stop()

    assert [s.state for s in watch.statuses] == [OK, UNAUTHORIZED, OK]
    assert status.state == UNAUTHORIZED  # the first failure is the engine's one state
    assert status.fix == "set [[agents]] 'researcher' api_key to a key this endpoint accepts"
    said = sorted(r.getMessage().split(": ")[0] for r in caplog.records)
    assert said == ["llm", "llm (agent 'researcher')", "llm (agent 'writer')"]


async def test_agents_that_share_an_endpoint_and_model_are_probed_once(tmp_path: Path) -> None:
    agents = agents_of(
        '[[agents]]\nname = "a"\nbase_url = "http://127.0.0.1:9/v1"\n'
        '[[agents]]\nname = "b"\nbase_url = "http://127.0.0.1:9/v1"\n'
        '[[agents]]\nname = "c"\n',
        tmp_path,
    )

    targets = llm_targets(agents)

    assert [(t.agents, t.default, t.label) for t in targets] == [
        (("a", "b"), False, "llm (agents 'a', 'b')")
    ]
    assert agents.get("").model.name == "offline"  # the default agent's: not probed


async def test_an_unknown_model_of_an_agent_names_the_agents_model_setting(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    agents = agents_of(
        '[[agents]]\nname = "writer"\nmodel = "gpt-9"\n',
        tmp_path,
        OPENAI_BASE_URL=fake.base_url,
        OPENAI_API_KEY="k",
    )
    (target,) = [t for t in llm_targets(agents) if not t.default]

    status = await probe_target(target)

    assert status.state == UNKNOWN_MODEL
    assert status.fix == "set [[agents]] 'writer' model to one of the listed models"
