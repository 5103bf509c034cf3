"""What the engine reports of each run (the run observer) and its /metrics, on a real
engine over real gRPC: the outcomes the stack test does not reach (interrupt, cancelled),
the tool outcomes, gRPC status codes, and the refusals of the metrics settings."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentik.cli import main as cli_main
from agentik.config import ConfigError, load_settings
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.core.observe import RunReport
from engine_service.server import EngineServer
from tests.engine.harness import (
    WAIT,
    Harness,
    collect,
    engine_settings,
    kind,
    next_event,
    running_engine,
    user,
)
from tests.engine.test_interrupt import BlockingTool
from tests.fakes.fake_openai import FakeOpenAI, FakeReply, FakeToolCall


class Recorder:
    def __init__(self) -> None:
        self.started: list[RunReport] = []
        self.finished: list[RunReport] = []
        self.done = asyncio.Event()

    def run_started(self, report: RunReport) -> None:
        self.started.append(report)

    def run_finished(self, report: RunReport) -> None:
        self.finished.append(report)
        self.done.set()


class Broken:
    def run_started(self, report: RunReport) -> None:
        raise RuntimeError("observer bug")

    def run_finished(self, report: RunReport) -> None:
        raise RuntimeError("observer bug")


@pytest.fixture
async def observed(llm: FakeOpenAI) -> AsyncIterator[tuple[Harness, Recorder]]:
    settings = engine_settings(
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_API_KEY="test-key",
        AGENTIK_LLM_MAX_RETRIES="0",
        AGENTIK_TOOL_TIMEOUT="2",
        AGENTIK_TOOLS_APPROVAL="calculate",
        AGENTIK_METRICS_ADDR="127.0.0.1:0",
    )
    async with running_engine(settings, tools=[BlockingTool()]) as harness:
        recorder = Recorder()
        harness.engine.observe(Broken())  # one that raises changes nothing for the others
        harness.engine.observe(recorder)
        yield harness, recorder


async def scrape(harness: Harness) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    url = f"http://127.0.0.1:{harness.server.metrics_port}/metrics"
    async with httpx.AsyncClient() as client:
        response = await client.get(url, timeout=WAIT)
    assert response.status_code == 200
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


async def test_an_interrupted_run_is_reported_cancelled_with_its_cut_tool_call(
    observed: tuple[Harness, Recorder], llm: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    harness, recorder = observed
    caplog.set_level(logging.INFO, logger="agentik.runs")
    llm.enqueue(FakeReply(tool_calls=[FakeToolCall("block")]))
    call = harness.stub.Run(
        pb.RunRequest(session_id="cut", create_session=True, messages=[user("x")])
    )
    async with asyncio.timeout(WAIT):
        while kind(await next_event(call)) != "tool_call_end":
            pass
        await asyncio.sleep(0.05)  # the tool is running
        await harness.stub.Interrupt(pb.InterruptRequest(session_id="cut"))
        await collect(call)
        await recorder.done.wait()
    [report] = recorder.finished
    assert recorder.started == [report]
    assert report.outcome == "cancelled" and report.session_id == "cut"
    assert report.tool_calls == [("block", "error")]
    assert report.time_to_first_token is not None and report.duration >= 0
    assert any("outcome=cancelled" in r.getMessage() for r in caplog.records)
    samples = await scrape(harness)
    assert samples[("agentik_runs_finished_total", frozenset({("outcome", "cancelled")}))] == 1
    by_agent = frozenset({("agent", "agentik"), ("outcome", "cancelled")})
    assert samples[("agentik_agent_runs_finished_total", by_agent)] == 1
    assert report.agent == "agentik"
    assert samples[("agentik_runs_active", frozenset())] == 0
    tool = frozenset({("tool", "block"), ("outcome", "error")})
    assert samples[("agentik_tool_calls_total", tool)] == 1


async def test_a_run_that_waits_for_approval_is_reported_interrupt(
    observed: tuple[Harness, Recorder], llm: FakeOpenAI
) -> None:
    harness, recorder = observed
    llm.enqueue(FakeReply(tool_calls=[FakeToolCall("calculate", {"expression": "1+1"})]))
    request = pb.RunRequest(session_id="ask", create_session=True, messages=[user("x")])
    async with asyncio.timeout(WAIT):
        await collect(harness.stub.Run(request))
        await recorder.done.wait()
    [report] = recorder.finished
    assert report.outcome == "interrupt" and report.tool_calls == []
    # The stream is timed once, when it ends (just after the client saw it end).
    run = frozenset({("method", "agentik.engine.v1.AgentEngine/Run"), ("code", "OK")})
    key = ("agentik_grpc_server_handling_seconds_count", run)
    for _ in range(int(WAIT / 0.02)):
        samples = await scrape(harness)
        if key in samples:
            break
        await asyncio.sleep(0.02)
    assert samples[key] == 1
    assert samples[("agentik_runs_finished_total", frozenset({("outcome", "interrupt")}))] == 1
    stream = frozenset({("method", "agentik.engine.v1.AgentEngine/Run")})
    assert samples[("agentik_grpc_streams_open", stream)] == 0


async def test_unknown_tools_are_one_series_and_grpc_codes_are_named(
    observed: tuple[Harness, Recorder], llm: FakeOpenAI
) -> None:
    harness, recorder = observed
    llm.enqueue(FakeReply(tool_calls=[FakeToolCall("made_up_by_the_llm")]))
    request = pb.RunRequest(session_id="unk", create_session=True, messages=[user("x")])
    async with asyncio.timeout(WAIT):
        await collect(harness.stub.Run(request))
        await recorder.done.wait()
    assert recorder.finished[0].tool_calls == [("made_up_by_the_llm", "unknown_tool")]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await harness.stub.GetSession(pb.GetSessionRequest(session_id="nope"))
    assert caught.value.code() is grpc.StatusCode.NOT_FOUND
    samples = await scrape(harness)
    unknown = frozenset({("tool", "(unknown)"), ("outcome", "unknown_tool")})
    assert samples[("agentik_tool_calls_total", unknown)] == 1
    assert not [k for k in samples if ("tool", "made_up_by_the_llm") in k[1]]
    not_found = frozenset(
        {("method", "agentik.engine.v1.AgentEngine/GetSession"), ("code", "NOT_FOUND")}
    )
    assert samples[("agentik_grpc_server_handling_seconds_count", not_found)] == 1


def test_metrics_beyond_loopback_without_authentication_are_refused() -> None:
    settings = load_settings(
        None, {"AGENTIK_METRICS_ADDR": "0.0.0.0:9464", "AGENTIK_STORE": "memory://"}
    )
    from engine_service.build import build_engine

    with pytest.raises(ConfigError, match=r"metrics endpoint would listen on 0\.0\.0\.0:9464"):
        EngineServer(build_engine(settings), settings)


def test_the_metrics_and_log_format_settings_are_checked() -> None:
    assert load_settings(None, {}).engine.metrics_addr == ""
    assert load_settings(None, {"AGENTIK_METRICS_ADDR": "127.0.0.1:9464"}).engine.metrics_addr
    with pytest.raises(ConfigError, match="metrics_addr"):
        load_settings(None, {"AGENTIK_METRICS_ADDR": "9464"})
    assert load_settings(None, {"AGENTIK_LOG_FORMAT": "JSON"}).log.format == "json"
    with pytest.raises(ConfigError, match=r"log_format.*text, json"):
        load_settings(None, {"AGENTIK_LOG_FORMAT": "xml"})


def test_metrics_with_several_engine_workers_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in {
        "AGENTIK_METRICS_ADDR": "127.0.0.1:9464",
        "AGENTIK_STORE": "postgresql://nobody@127.0.0.1:1/none",
        "AGENTIK_GRPC_ADDR": "127.0.0.1:50999",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AGENTIK_CONFIG", raising=False)
    assert cli_main(["engine", "--workers", "2"]) == 2
    assert "metrics_addr is set with more than one engine worker" in capsys.readouterr().err


async def test_a_request_that_does_not_parse_is_counted_invalid_argument(
    observed: tuple[Harness, Recorder],
) -> None:
    harness, _ = observed
    raw = harness.channel.unary_unary(
        "/agentik.engine.v1.AgentEngine/GetSession", lambda b: b, lambda b: b
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await raw(b"\x0a\x02\xff\xfe", timeout=WAIT)  # session_id: not UTF-8
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == (
        "the GetSession request is malformed: a string field holds bytes that are not UTF-8"
    )
    samples = await scrape(harness)
    invalid = frozenset(
        {("method", "agentik.engine.v1.AgentEngine/GetSession"), ("code", "INVALID_ARGUMENT")}
    )
    assert samples[("agentik_grpc_server_handling_seconds_count", invalid)] == 1
