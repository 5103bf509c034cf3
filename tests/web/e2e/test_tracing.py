"""Traces of a turn through the real stack: gunicorn facade → gRPC → engine → LLM → tool.

A small OTLP/HTTP collector in the test receives what both processes export (protobuf
bodies on ``POST /v1/traces``, decoded with the opentelemetry-proto classes).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.fakes.fake_openai import FakeOpenAI
from tests.web.e2e.conftest import ROOT, WAIT, SseStream, Stack, wait_for

pytestmark = pytest.mark.processes

OFFLINE = {"OPENAI_BASE_URL": "", "OPENAI_API_KEY": ""}
"""The built-in offline model: "calculate 2+2" makes it call the calculate tool."""
QUICK_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "100"}
"""Batches leave every 100 ms instead of every 5 s."""


class Collected:
    """A span as received, with the service that sent it."""

    def __init__(self, service: str, span: Span) -> None:
        self.service = service
        self.name = span.name
        self.trace_id = span.trace_id.hex()
        self.span_id = span.span_id.hex()
        self.parent_id = span.parent_span_id.hex()
        self.kind = span.kind
        self.failed = span.status.code == span.status.STATUS_CODE_ERROR
        self.events = [event.name for event in span.events]
        self.attributes: dict[str, Any] = {}
        for item in span.attributes:
            value = item.value
            field = value.WhichOneof("value")
            self.attributes[item.key] = getattr(value, field) if field else None

    def __repr__(self) -> str:
        return f"<{self.service} {self.name} {self.span_id} parent={self.parent_id or '-'}>"


class Collector:
    """An OTLP/HTTP receiver on a free loopback port, in a thread."""

    def __init__(self) -> None:
        self.spans: list[Collected] = []
        self.requests = 0
        self._lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                request = ExportTraceServiceRequest.FromString(body)
                collector.add(request)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def add(self, request: ExportTraceServiceRequest) -> None:
        with self._lock:
            self.requests += 1
            for resource_spans in request.resource_spans:
                service = ""
                for item in resource_spans.resource.attributes:
                    if item.key == "service.name":
                        service = item.value.string_value
                for scope_spans in resource_spans.scope_spans:
                    self.spans.extend(Collected(service, span) for span in scope_spans.spans)

    def received(self) -> list[Collected]:
        with self._lock:
            return list(self.spans)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def collector() -> Iterator[Collector]:
    receiver = Collector()
    yield receiver
    receiver.close()


CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
CLIENT_TRACEPARENT = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
"""A trace the client already is in, sent with the conversation's creation."""


def _turn(stack: Stack, text: str) -> str:
    """Send ``text`` in a new conversation and read the answer to its end; the id."""
    with stack.client() as http:
        created = http.post(
            "/agentik/conversations", json={}, headers={"traceparent": CLIENT_TRACEPARENT}
        )
        conversation_id: str = created.json()["id"]
        stream = SseStream(
            http, "POST", f"/agentik/conversations/{conversation_id}/send", json={"text": text}
        )
        try:
            frames = stream.read_to_end()
        finally:
            stream.close()
    assert any(f.type == "tool_call_result" for f in frames), [f.type for f in frames]
    return conversation_id


def _one(spans: list[Collected], name: str) -> Collected:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, spans)
    return found[0]


def test_one_trace_links_the_http_request_the_rpc_the_run_the_llm_and_the_tool(
    llm: FakeOpenAI, tmp_path: Path, collector: Collector
) -> None:
    env = {
        **OFFLINE,
        **QUICK_EXPORT,
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
    }
    stack = Stack(llm, tmp_path, **env)
    try:
        session_id = _turn(stack, "calculate 2+2")

        def whole_turn() -> bool:
            return any(s.name == "agentik.run" for s in collector.received()) and any(
                s.name.startswith("POST /agentik/conversations/") for s in collector.received()
            )

        wait_for(whole_turn, "the turn's spans at the collector")
    finally:
        stack.stop()

    spans = collector.received()
    run = _one(spans, "agentik.run")
    trace = [s for s in spans if s.trace_id == run.trace_id]
    http = _one(trace, "POST /agentik/conversations/<conversation_id>/send")
    rpc = _one(trace, "agentik.engine.v1.AgentEngine/Run")
    llm_rounds = [s for s in trace if s.name == "chat offline"]
    tool = _one(trace, "execute_tool calculate")

    assert http.service == "agentik-web" and http.parent_id == ""
    assert http.kind == Span.SPAN_KIND_SERVER
    assert http.attributes["http.response.status_code"] == 200
    assert http.attributes["http.route"] == "/agentik/conversations/<conversation_id>/send"
    assert rpc.service == "agentik-engine" and rpc.parent_id == http.span_id
    assert rpc.kind == Span.SPAN_KIND_SERVER and rpc.attributes["rpc.method"] == "Run"
    assert run.parent_id == rpc.span_id
    assert run.attributes["agentik.session.id"] == session_id
    assert run.attributes["agentik.run.outcome"] == "succeeded"
    assert run.attributes["agentik.run.id"]
    # Two LLM rounds: the tool call, then the answer that uses its result.
    assert len(llm_rounds) == 2 and all(s.parent_id == run.span_id for s in llm_rounds)
    assert all(s.events == ["first_token"] and not s.failed for s in llm_rounds)
    assert all(s.attributes["gen_ai.request.model"] == "offline" for s in llm_rounds)
    assert tool.parent_id == run.span_id
    assert tool.attributes["gen_ai.tool.name"] == "calculate"
    assert tool.attributes["agentik.tool.outcome"] == "ok" and not tool.failed
    # The conversation's creation joined the client's trace, with its own RPC under it.
    create = _one(spans, "POST /agentik/conversations")
    assert (create.trace_id, create.parent_id) == (CLIENT_TRACE, CLIENT_SPAN)
    assert any(s.parent_id == create.span_id and s.name.endswith("/CreateSession") for s in spans)
    # Probes are not traced.
    assert not [s for s in spans if s.attributes.get("url.path") == "/health"]


def test_a_call_to_another_agentik_through_a2a_continues_the_trace_there(
    llm: FakeOpenAI, tmp_path: Path, collector: Collector
) -> None:
    traced = {
        **QUICK_EXPORT,
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
    }
    for side in ("a", "b"):
        (tmp_path / side).mkdir()
    remote = Stack(llm, tmp_path / "a", **OFFLINE, **traced)
    try:
        caller = Stack(llm, tmp_path / "b", AGENTIK_A2A_AGENTS=f"peer={remote.base_url}/", **traced)
        try:
            caller.engine.wait_for_log(re.compile(r"A2A agent 'peer' (ready)"))
            _turn(caller, '[[tool:peer {"message": "calculate 2+2"}]]')

            def remote_run_done() -> bool:
                runs = [s for s in collector.received() if s.name == "agentik.run"]
                return len(runs) == 2

            wait_for(remote_run_done, "both runs' spans at the collector")
        finally:
            caller.stop()
    finally:
        remote.stop()

    spans = collector.received()
    tool = _one(spans, "execute_tool peer")
    trace = [s for s in spans if s.trace_id == tool.trace_id]
    # The remote facade's request span is a child of our tool call's span ...
    # (a2a-sdk's own spans, one per streamed event, are off).
    [request] = [s for s in trace if s.parent_id == tool.span_id]
    assert not [s.name for s in trace if s.name.startswith("a2a.")]
    assert (
        request.name == "POST /"
        and request.service == "agentik-web"
        and request.kind == Span.SPAN_KIND_SERVER
    )
    # ... and the remote run (with its own tool call) is in the same trace.
    runs = [s for s in trace if s.name == "agentik.run"]
    assert len(runs) == 2
    assert _one(trace, "execute_tool calculate").parent_id in {r.span_id for r in runs}


@pytest.mark.parametrize(
    "off",
    [
        {"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"},
        {"OTEL_TRACES_EXPORTER": "none"},
    ],
    ids=["sdk-disabled", "exporter-none"],
)
def test_the_otel_variables_that_turn_tracing_off_export_nothing(
    llm: FakeOpenAI, tmp_path: Path, collector: Collector, off: dict[str, str]
) -> None:
    env = {**OFFLINE, **QUICK_EXPORT, "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint, **off}
    stack = Stack(llm, tmp_path, **env)
    try:
        _turn(stack, "calculate 2+2")
        time.sleep(1.0)  # ten export intervals
    finally:
        stack.stop()  # stopping flushes what an exporter would still hold
    assert collector.requests == 0


_NO_OTEL_SCRIPT = """
import asyncio, json, os, queue, sys, threading
from agentik import tracing
from engine_service.build import build_engine
from agentik.config import load_settings
from engine_service.server import EngineServer
from web_facade import create_app
from web_facade import gunicorn_conf

settings = load_settings(None, os.environ)
gunicorn_conf.post_fork(None, None)
assert not tracing.enabled()
ports = queue.Queue()

async def serve():
    server = EngineServer(build_engine(settings), settings)
    ports.put(await server.start())
    await asyncio.Event().wait()

threading.Thread(target=asyncio.run, args=(serve(),), daemon=True).start()
os.environ["AGENTIK_ENGINE_TARGET"] = f"127.0.0.1:{ports.get(timeout=30)}"
app = create_app(load_settings(None, os.environ, mcp=False))
http = app.test_client()
conversation = http.post("/agentik/conversations", json={}).get_json()["id"]
body = http.post(f"/agentik/conversations/{conversation}/send", json={"text": "calculate 2+2"})
assert b"tool_call_result" in body.get_data(), body.get_data()
print(json.dumps(sorted(m for m in sys.modules if m.startswith("opentelemetry"))))
sys.stdout.flush()
os._exit(0)
"""


def test_without_otel_variables_no_sdk_is_imported_and_no_exporter_made() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(
        OFFLINE,
        PYTHONPATH=str(ROOT),
        AGENTIK_GRPC_ADDR="127.0.0.1:0",
        AGENTIK_STORE="memory://",
    )
    env.pop("AGENTIK_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-c", _NO_OTEL_SCRIPT],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=WAIT * 4,
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert not [m for m in loaded if m.startswith(("opentelemetry.sdk", "opentelemetry.exporter"))]
    # Not even the API: a turn with tracing off goes through the core's no-op tracer.
    assert loaded == []


def test_the_console_exporter_prints_the_turns_spans(llm: FakeOpenAI, tmp_path: Path) -> None:
    stack = Stack(llm, tmp_path, **OFFLINE, **QUICK_EXPORT, OTEL_TRACES_EXPORTER="console")
    try:
        _turn(stack, "calculate 2+2")
        wait_for(lambda: '"name": "agentik.run"' in stack.engine.log(), "the run span printed")
    finally:
        stack.stop()
    engine_log = stack.engine.log()
    assert '"name": "execute_tool calculate"' in engine_log
    assert '"name": "chat offline"' in engine_log
    assert "traces: the console" in engine_log
    wait_for(lambda: '"name": "POST /agentik/conversations/' in stack.web.log(), "web span")
