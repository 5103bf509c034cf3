"""Logs and Prometheus metrics of the real stack: the engine process (metrics on a port of
its own) and gunicorn (multi-process ``GET /metrics``), after real turns, in both log
formats. docs/operations.md describes what is checked here."""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fakes.fake_openai import FakeOpenAI
from tests.web.e2e.conftest import (
    ROOT,
    WAIT,
    Process,
    SseStream,
    Stack,
    free_port,
    has,
    wait_for,
)

TOKEN = "tok-observability-secret-7f3a"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
METRICS_LISTENING = re.compile(r"engine metrics on http://127\.0\.0\.1:(\d+)/metrics")
SEND_ROUTE = "/agentik/conversations/<conversation_id>/send"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


class Observed:
    def __init__(self, stack: Stack, log_format: str) -> None:
        self.stack = stack
        self.log_format = log_format
        self.engine_metrics = (
            f"http://127.0.0.1:{stack.engine.wait_for_log(METRICS_LISTENING)}/metrics"
        )
        self.conversations: list[str] = []
        self.runs: dict[str, str] = {}
        with stack.client() as http:
            self.runs["success"] = self._turn(http, '[[tool:calculate {"expression": "6*7"}]] go')
            self.runs["error"] = self._turn(http, "[[error:401]] fail please")

    def _turn(self, http: httpx.Client, text: str) -> str:
        created = http.post("/agentik/conversations", json={"title": "o"}, headers=AUTH)
        assert created.status_code == 201, created.text
        conversation_id = created.json()["id"]
        self.conversations.append(conversation_id)
        stream = SseStream(
            http,
            "POST",
            f"/agentik/conversations/{conversation_id}/send",
            json={"text": text},
            headers=AUTH,
        )
        try:
            frames = stream.read_until(lambda fs: has("end")(fs) or has("error")(fs))
        finally:
            stream.close()
        run_ids = [
            f.data["run_id"] for f in frames if isinstance(f.data, dict) and "run_id" in f.data
        ]
        assert run_ids, [f.type for f in frames]
        return str(run_ids[0])


@pytest.fixture(scope="module", params=["text", "json"])
def observed(
    request: pytest.FixtureRequest, llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Observed]:
    log_format: str = request.param
    logs = tmp_path_factory.mktemp(f"observability-{log_format}")
    config = logs / "agentik.toml"
    # An MCP server that cannot start: its status metric and its WARNING line.
    config.write_text(
        f'[[mcp.servers]]\nname = "broken"\ncommand = "{logs / "no-such-server"}"\n'
        '[[a2a.agents]]\nname = "away"\nurl = "http://127.0.0.1:1/"\n'  # nothing listens
    )
    stack = Stack(
        llm,
        logs,
        AGENTIK_CONFIG=str(config),
        AGENTIK_METRICS_ADDR="127.0.0.1:0",
        AGENTIK_LOG_FORMAT=log_format,
        AGENTIK_TOKENS=f"alice:{TOKEN}",
    )
    try:
        yield Observed(stack, log_format)
    finally:
        stack.stop()


def scrape(url: str) -> Samples:
    response = httpx.get(url, timeout=WAIT)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum over the series of ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    found = [v for (n, have), v in samples.items() if n == name and wanted <= have]
    assert found, f"no {name}{labels} among {sorted({n for n, _ in samples})}"
    return sum(found)


def log_records(observed: Observed, process: str) -> list[dict[str, object]]:
    """The process's log, each line parsed (JSON) or as ``{"line": ...}`` (text)."""
    text = getattr(observed.stack, process).log()
    lines = [line for line in text.splitlines() if line.strip()]
    if observed.log_format == "text":
        return [{"line": line} for line in lines]
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            raise AssertionError(f"{process}: a log line is not JSON: {line!r}") from None
    return records


def test_the_engine_metrics_count_the_turns(observed: Observed) -> None:
    run = "agentik.engine.v1.AgentEngine/Run"

    def both_ended() -> bool:
        samples = scrape(observed.engine_metrics)
        streams = [
            v
            for (name, labels), v in samples.items()
            if name == "agentik_grpc_server_handling_seconds_count" and ("method", run) in labels
        ]
        return value(samples, "agentik_runs_finished_total") >= 2 and sum(streams) >= 2

    wait_for(both_ended, "the engine to count both runs")
    samples = scrape(observed.engine_metrics)
    assert value(samples, "agentik_runs_started_total") >= 2
    assert value(samples, "agentik_runs_finished_total", outcome="success") >= 1
    assert value(samples, "agentik_runs_finished_total", outcome="error") >= 1
    assert value(samples, "agentik_runs_active") == 0
    assert value(samples, "agentik_run_first_token_seconds_count") >= 1
    ttft = value(samples, "agentik_run_first_token_seconds_sum")
    assert 0 < ttft < WAIT
    assert value(samples, "agentik_run_duration_seconds_count", outcome="success") >= 1
    # The fake reports usage counted from words: some in, some out.
    assert value(samples, "agentik_llm_tokens_total", direction="input") > 0
    assert value(samples, "agentik_llm_tokens_total", direction="output") > 0
    assert value(samples, "agentik_tool_calls_total", tool="calculate", outcome="ok") >= 1
    assert value(samples, "agentik_llm_errors_total") >= 1
    assert value(samples, "agentik_grpc_server_handling_seconds_count", method=run) >= 2
    created = "agentik.engine.v1.AgentEngine/CreateSession"
    assert (
        value(samples, "agentik_grpc_server_handling_seconds_count", method=created, code="OK") >= 2
    )
    assert value(samples, "agentik_grpc_streams_open", method=run) == 0


def test_the_facade_metrics_sum_the_workers_by_route_template(observed: Observed) -> None:
    samples = scrape(f"{observed.stack.base_url}/metrics")
    sends = value(
        samples,
        "agentik_http_request_duration_seconds_count",
        method="POST",
        route=SEND_ROUTE,
        status="200",
    )
    assert sends >= 2
    assert (
        value(
            samples, "agentik_http_request_duration_seconds_count", route="/agentik/conversations"
        )
        >= 2
    )
    routes = {
        dict(labels).get("route", "")
        for (name, labels) in samples
        if name.startswith("agentik_http_request_duration_seconds")
    }
    assert not [r for r in routes if any(c in r for c in observed.conversations)], routes
    assert value(samples, "agentik_http_streams_open", route=SEND_ROUTE) == 0


def test_every_run_leaves_a_start_and_an_end_line_with_its_numbers(observed: Observed) -> None:
    def ended_lines() -> list[dict[str, object]]:
        records = log_records(observed, "engine")
        if observed.log_format == "json":
            return [r for r in records if r.get("event") == "run_finished"]
        return [r for r in records if "run finished" in str(r["line"])]

    wait_for(lambda: len(ended_lines()) >= 2, "both runs' end lines")
    records = log_records(observed, "engine")
    success, error = observed.runs["success"], observed.runs["error"]
    if observed.log_format == "json":
        by_run = {(r.get("event"), r.get("run_id")): r for r in records}
        started = by_run[("run_started", success)]
        assert started["level"] == "INFO" and started["principal"] == "alice"
        ok = by_run[("run_finished", success)]
        assert ok["outcome"] == "success" and ok["principal"] == "alice"
        assert ok["session_id"] == observed.conversations[0]
        assert isinstance(ok["input_tokens"], int) and ok["input_tokens"] > 0
        assert isinstance(ok["output_tokens"], int) and ok["output_tokens"] > 0
        assert ok["tool_calls"] == 1
        assert isinstance(ok["duration_s"], float) and 0 <= ok["duration_s"] < WAIT
        failed = by_run[("run_finished", error)]
        assert failed["outcome"] == "error" and failed["failed_in"] == "llm"
        assert failed["error_code"] and "401" in str(failed["error_cause"])
        warnings = [r for r in records if r["level"] == "WARNING" and error in str(r["message"])]
    else:
        lines = [str(r["line"]) for r in records]
        ok_line = next(line for line in lines if "run finished" in line and success in line)
        assert " INFO " in ok_line and "outcome=success" in ok_line
        assert "principal=alice" in ok_line and observed.conversations[0] in ok_line
        assert "tool_calls=1" in ok_line and "tokens_in=0" not in ok_line
        assert any("run started" in line and success in line for line in lines)
        failed_line = next(line for line in lines if "run finished" in line and error in line)
        assert "outcome=error" in failed_line and "error=" in failed_line
        assert "401" in failed_line
        warnings = [{"line": line} for line in lines if " WARNING " in line and error in line]
    # The LLM's failure, with its cause, once.
    assert len(warnings) == 1, warnings
    assert "401" in json.dumps(warnings[0])


def test_the_access_log_names_each_request_and_never_the_token(observed: Observed) -> None:
    def access() -> list[dict[str, object]]:
        records = log_records(observed, "web")
        if observed.log_format == "json":
            return [r for r in records if r.get("logger") == "agentik.access"]
        return [r for r in records if "agentik.access" in str(r["line"])]

    wait_for(lambda: len(access()) >= 4, "the access lines")
    send_path = f"/agentik/conversations/{observed.conversations[0]}/send"
    if observed.log_format == "json":
        send = next(r for r in access() if r.get("path") == send_path)
        assert send["method"] == "POST" and send["status"] == 200
        assert send["route"] == SEND_ROUTE
        assert isinstance(send["bytes"], int) and send["bytes"] > 0
        assert isinstance(send["duration_s"], float)
        # gunicorn's own lines are JSON too (log_records parsed every line).
        assert any(
            str(r.get("logger", "")).startswith("gunicorn") for r in log_records(observed, "web")
        )
    else:
        line = next(str(r["line"]) for r in access() if send_path in str(r["line"]))
        assert '"POST ' in line and '" 200 ' in line and re.search(r" \d+B$", line), line
    for process in ("web", "engine"):
        text = getattr(observed.stack, process).log()
        assert TOKEN not in text and "Bearer" not in text, process


def _reported_down(observed: Observed, metric: str, label: str, name: str) -> Samples:
    """The first scrape of the engine's metrics that shows source ``name`` unavailable.

    The source retries, so its state moves on between scrapes (unavailable, connecting,
    ...): the checks read the one scrape that showed it unavailable."""
    seen: list[Samples] = []

    def down() -> bool:
        seen[:] = [scrape(observed.engine_metrics)]
        return (metric, frozenset({(label, name), ("state", "unavailable")})) in seen[0]

    wait_for(down, f"{metric} to report {name!r} unavailable")
    return seen[0]


def _warnings(observed: Observed, needle: str) -> list[str]:
    records = [json.dumps(r) for r in log_records(observed, "engine")]
    return [t for t in records if "WARNING" in t and needle in t]


def test_an_mcp_server_that_cannot_start_is_down_in_the_metrics_and_warned_of(
    observed: Observed,
) -> None:
    samples = _reported_down(observed, "agentik_mcp_server_up", "server", "broken")
    assert value(samples, "agentik_mcp_server_up", server="broken") == 0
    assert value(samples, "agentik_mcp_server_up", server="broken", state="unavailable") == 0
    warned = _warnings(observed, "'broken' unavailable")
    assert warned and "cannot start" in warned[0]


def test_a_remote_a2a_agent_that_is_down_is_down_in_the_metrics_and_warned_of(
    observed: Observed,
) -> None:
    samples = _reported_down(observed, "agentik_a2a_agent_up", "agent", "away")
    assert value(samples, "agentik_a2a_agent_up", agent="away", state="unavailable") == 0
    warned = _warnings(observed, "A2A agent 'away' unavailable")
    assert warned and "cannot reach http://127.0.0.1:1/" in warned[0]


def test_the_facade_metrics_directory_is_private_and_goes_with_gunicorn(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    stale = Path(tempfile.gettempdir()) / "agentik-web-metrics-999999999-left"
    stale.mkdir(exist_ok=True)
    (stale / "counter_1.db").write_bytes(b"old")
    stack = Stack(llm, tmp_path)
    try:
        master = stack.web.wait_for_log(re.compile(r"Listening at: \S+ \((\d+)\)"))
        [ours] = Path(tempfile.gettempdir()).glob(f"agentik-web-metrics-{master}-*")
        assert stat.S_IMODE(ours.stat().st_mode) == 0o700
        assert not stale.exists(), "a dead master's directory is removed at start"
        assert httpx.get(f"{stack.base_url}/metrics", timeout=WAIT).status_code == 200
        assert any(ours.iterdir()), "the workers write their metrics there"
    finally:
        stack.stop()
    assert not ours.exists()


def test_agentik_serve_in_json_writes_only_json_lines(llm: FakeOpenAI, tmp_path: Path) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if k != "AGENTIK_CONFIG"},
        "PYTHONPATH": str(ROOT),
        "AGENTIK_GRPC_ADDR": f"127.0.0.1:{free_port()}",
        "AGENTIK_HTTP_ADDR": "127.0.0.1:0",
        "AGENTIK_STORE": "memory://",
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_API_KEY": "test-key",
        "AGENTIK_WEB_WORKERS": "1",
        "AGENTIK_WEB_THREADS": "4",
        "AGENTIK_LOG_FORMAT": "json",
    }
    argv = [sys.executable, "-m", "agentik.cli", "serve"]
    serve = Process("serve", argv, env, tmp_path)
    try:
        port = serve.wait_for_log(re.compile(r"Listening at: http://127\.0\.0\.1:(\d+)"))
        base = f"http://127.0.0.1:{port}"

        def healthy() -> bool:
            try:
                return httpx.get(f"{base}/health", timeout=2.0).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(healthy, "serve to be healthy")
        created = httpx.post(f"{base}/agentik/conversations", json={}, timeout=WAIT)
        assert created.status_code == 201
    finally:
        assert serve.stop() == 0, serve.log()
    lines = [line for line in serve.log().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # each one JSON, or this fails
    messages = [str(r["message"]) for r in records]
    assert any(m.startswith("agentik: engine on") for m in messages)
    assert any(m.startswith("agentik: stopping") for m in messages)
    assert any(r["logger"] == "agentik.access" and r["status"] == 201 for r in records)
    assert any("engine listening" in m for m in messages)


def test_the_facade_metrics_carry_the_engines_too(observed: Observed) -> None:
    samples = scrape(f"{observed.stack.base_url}/metrics")

    assert value(samples, "agentik_runs_started_total") >= 2
    assert value(samples, "agentik_runs_finished_total", outcome="error") >= 1
    assert value(samples, "agentik_http_request_duration_seconds_count", route=SEND_ROUTE) >= 2
