"""The spans a run opens through the core's tracing port (``core.trace``).

A recording tracer stands in for OpenTelemetry: it keeps the current span in a context
variable, as OpenTelemetry does, so the parents it records are the ones a real trace gets.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

from engine_service.core import events as ev
from engine_service.core.caller import ANONYMOUS
from engine_service.core.chat import ChatDelta, ChatModel, ChatRequest
from engine_service.core.context import ContextLimits
from engine_service.core.engine import Engine, EngineLimits
from engine_service.core.errors import LLMError
from engine_service.core.limits import RunLimits
from engine_service.core.models import Message, Role, RunInput, TextPart
from engine_service.core.registry import ToolRegistry
from engine_service.core.trace import NO_TRACER, AttributeValue, Span
from engine_service.llm.offline import OfflineChatModel
from engine_service.stores import MemorySessionStore
from engine_service.tools.builtin import builtin_tools

WAIT = 10.0


@dataclass
class Recorded:
    name: str
    parent: str | None
    attributes: dict[str, AttributeValue]
    events: list[str] = field(default_factory=list)
    failed: tuple[str, str] | None = None
    ended: bool = False

    def set(self, key: str, value: AttributeValue) -> None:
        self.attributes[key] = value

    def event(self, name: str) -> None:
        self.events.append(name)

    def fail(self, code: str, message: str = "") -> None:
        self.failed = (code, message)


class RecordingTracer:
    def __init__(self) -> None:
        self.spans: list[Recorded] = []
        self._current: contextvars.ContextVar[str | None] = contextvars.ContextVar(
            "current", default=None
        )

    def span(
        self, name: str, attributes: Mapping[str, AttributeValue]
    ) -> AbstractContextManager[Span]:
        return self._open(name, attributes)

    @contextmanager
    def _open(self, name: str, attributes: Mapping[str, AttributeValue]) -> Iterator[Span]:
        span = Recorded(name, self._current.get(), dict(attributes))
        self.spans.append(span)
        token = self._current.set(name)
        try:
            yield span
        finally:
            self._current.reset(token)
            span.ended = True

    def named(self, name: str) -> list[Recorded]:
        return [s for s in self.spans if s.name == name]


class _FailingModel(ChatModel):
    name = "failing"
    endpoint_host = "llm.example"

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        raise LLMError("llm_auth", "the LLM refused the credentials")
        yield  # pragma: no cover - makes this an async generator


async def _run(engine: Engine, text: str) -> list[ev.Event]:
    await engine.start()
    message = Message(id="u", role=Role.USER, content=[TextPart(text)])
    handle = await engine.start_run(
        ANONYMOUS, RunInput(session_id="t", run_id="r", create_session=True, messages=[message])
    )
    async with asyncio.timeout(WAIT):
        events = [event async for event in engine.run_events(handle)]
    await engine.shutdown(1.0)
    return events


def _tools() -> ToolRegistry:
    registry = ToolRegistry()
    for tool in builtin_tools():
        registry.register(tool)
    return registry


async def test_a_run_opens_its_span_with_an_llm_span_per_round_and_a_tool_span_inside() -> None:
    tracer = RecordingTracer()
    engine = Engine(MemorySessionStore(), OfflineChatModel(), _tools(), tracer=tracer)
    await _run(engine, "calculate 2+2")

    assert [s.name for s in tracer.spans] == [
        "agentik.run",
        "chat offline",
        "execute_tool calculate",
        "chat offline",
    ]
    run = tracer.named("agentik.run")[0]
    assert run.parent is None and run.failed is None and run.ended
    assert run.attributes["agentik.session.id"] == "t"
    assert run.attributes["agentik.run.id"] == "r"
    assert run.attributes["agentik.run.outcome"] == "succeeded"
    rounds = tracer.named("chat offline")
    assert (
        sum(int(s.attributes["gen_ai.usage.output_tokens"]) for s in rounds)
        == (run.attributes["gen_ai.usage.output_tokens"])
    )
    for llm_round in rounds:
        assert llm_round.parent == "agentik.run" and llm_round.events == ["first_token"]
        assert "server.address" not in llm_round.attributes  # an in-process model
    tool = tracer.named("execute_tool calculate")[0]
    assert tool.parent == "agentik.run" and tool.failed is None
    assert tool.attributes["agentik.tool.outcome"] == "ok"
    assert tool.attributes["gen_ai.tool.name"] == "calculate"


async def test_a_failed_llm_round_fails_its_span_and_the_run_span_with_the_error_code() -> None:
    tracer = RecordingTracer()
    engine = Engine(MemorySessionStore(), _FailingModel(), _tools(), tracer=tracer)
    events = await _run(engine, "hello")

    assert isinstance(events[-1].body, ev.RunError)
    llm_round = tracer.named("chat failing")[0]
    assert llm_round.failed == ("llm_auth", "the LLM refused the credentials")
    assert llm_round.attributes["server.address"] == "llm.example"
    assert llm_round.events == []  # no first token
    run = tracer.named("agentik.run")[0]
    assert run.failed is not None and run.failed[0] == "llm_auth"
    assert run.attributes["agentik.run.outcome"] == "failed"


async def test_a_failing_tool_call_is_a_failed_span_with_its_outcome() -> None:
    tracer = RecordingTracer()
    engine = Engine(MemorySessionStore(), OfflineChatModel(), _tools(), tracer=tracer)
    await _run(engine, "calculate 2/0")

    tool = tracer.named("execute_tool calculate")[0]
    assert tool.attributes["agentik.tool.outcome"] == "error"
    assert tool.failed is not None and tool.failed[0] == "tool_error"


def test_the_default_tracer_hands_out_one_shared_span_that_records_nothing() -> None:
    first = NO_TRACER.span("a", {"k": 1})
    with first as span:
        span.set("k", 2)
        span.event("e")
        span.fail("code")
    assert NO_TRACER.span("b", {}) is first


async def test_a_compaction_is_a_span_inside_the_run() -> None:
    """A conversation over the budget is compacted in a span of its own (core/context.py)."""
    store = MemorySessionStore()
    await store.create_session("t", "", datetime.now(UTC))
    old = [
        Message(
            id=f"o{i}",
            role=Role.USER if i % 2 == 0 else Role.ASSISTANT,
            content=[TextPart("blah " * 200)],
        )
        for i in range(20)
    ]
    await store.append_messages("t", old)
    tracer = RecordingTracer()
    limits = EngineLimits(run=RunLimits(context=ContextLimits(window=4000, compaction="trim")))
    engine = Engine(store, OfflineChatModel(), _tools(), limits, tracer=tracer)
    await _run(engine, "and now?")

    (compact,) = tracer.named("agentik.compact")
    assert compact.parent == "agentik.run" and compact.ended and compact.failed is None
    assert compact.attributes["agentik.compaction.mode"] == "trim"
    assert int(compact.attributes["agentik.compaction.covered"]) >= 10
    assert int(compact.attributes["agentik.compaction.tokens"]) > 3000
