"""A property-based fuzz of the gRPC contract against a real engine process.

Hypothesis builds requests for every RPC of ``agentik.engine.v1.AgentEngine`` from hostile
field values (:mod:`tests.hostile.strategies`), with a valid token most of the time and a
hostile one or none otherwise, and sends each with a deadline. Every answer must be a normal
one or a clean refusal (:func:`tests.hostile.verdict.assert_clean_refusal`): no server error,
no UNAVAILABLE, no hang, no internal text, no huge echo. Bytes that are not the method's
message at all are sent too. Afterwards the engine must still serve, run a turn, and hold its
memory within :data:`RSS_GROWTH`.

Once on SQLite and once on PostgreSQL. Bounded for ``make test`` (about 20 s a store):
derandomized (a fixed seed), :data:`EXAMPLES` per RPC, no shrinking.
"""

from __future__ import annotations

import uuid
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, Phase, given, settings

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.engine.auth_helpers import TOKENS
from tests.hostile.conftest import EngineProcess, alice
from tests.hostile.strategies import REQUESTS, credentials, raw_bytes, runs_with_hostile_content
from tests.hostile.verdict import DEADLINE, assert_clean_refusal

EXAMPLES = 40
"""Generated requests per RPC."""
MAX_REQUEST = 6 << 20
"""Larger requests are not sent (they only measure the network); over the engine's 4 MiB
limit gRPC refuses them with RESOURCE_EXHAUSTED, a clean refusal too."""
RSS_GROWTH = 64 << 20
"""How much the engine's resident memory may grow over the whole fuzz."""
STREAMING = frozenset({"Run", "Subscribe"})
SERVICE = "/agentik.engine.v1.AgentEngine/"
GOOD = tuple(f"Bearer {TOKENS[name]}" for name in ("alice", "bob", "ops"))

pytestmark = pytest.mark.processes  # the engine is a real process (its memory is measured)

FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.generate],  # no shrinking: a failure is reported as found
)


def _call(engine: EngineProcess, method: str, request: Any, authorization: str | None) -> None:
    """Send one request; its answer must be normal or a clean refusal."""
    metadata = (("authorization", authorization),) if authorization is not None else ()
    call = getattr(engine.stub, method)
    try:
        if method in STREAMING:
            events = list(call(request, metadata=metadata, timeout=DEADLINE))
            if method == "Run":
                assert events and events[-1].WhichOneof("kind") in ("run_finished", "run_error")
                _clean_run_error(events[-1])
        else:
            call(request, metadata=metadata, timeout=DEADLINE)
    except grpc.RpcError as error:
        assert_clean_refusal(error, method)


def _clean_run_error(last: pb.Event) -> None:
    """A run that failed says why in words, like any refusal."""
    if last.WhichOneof("kind") == "run_error":
        assert last.run_error.code != "internal", last.run_error.message


def _still_well(engine: EngineProcess) -> None:
    assert engine.process.popen.poll() is None, "the engine died:\n" + engine.process.log()[-3000:]
    assert engine.serving()
    grown = engine.rss - engine.baseline_rss
    assert grown < RSS_GROWTH, f"the engine grew by {grown >> 20} MiB"


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")  # huge reprs
@pytest.mark.parametrize("method", list(REQUESTS))
def test_every_rpc_answers_hostile_requests_cleanly(
    engine_process: EngineProcess, method: str
) -> None:
    @FUZZ_SETTINGS
    @given(
        request=REQUESTS[method](engine_process.known_ids),
        authorization=credentials(GOOD),
    )
    def fuzz(request: Any, authorization: str | None) -> None:
        if request.ByteSize() > MAX_REQUEST:
            return
        _call(engine_process, method, request, authorization)

    fuzz()
    _still_well(engine_process)


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")  # huge reprs
def test_runs_with_hostile_content_end_and_stay_readable(engine_process: EngineProcess) -> None:
    @FUZZ_SETTINGS
    @given(request=runs_with_hostile_content())
    def fuzz(request: pb.RunRequest) -> None:
        if request.ByteSize() > MAX_REQUEST:
            return
        request.session_id = f"c-{uuid.uuid4().hex}"  # a new conversation each time
        try:
            events = list(engine_process.stub.Run(request, metadata=alice(), timeout=DEADLINE))
        except grpc.RpcError as error:  # refused before it started: cleanly
            assert_clean_refusal(error, "Run")
            return
        assert events[-1].WhichOneof("kind") in ("run_finished", "run_error")
        _clean_run_error(events[-1])
        session = pb.GetSessionRequest(session_id=request.session_id)
        engine_process.stub.GetSession(session, metadata=alice(), timeout=DEADLINE)
        page = pb.ListMessagesRequest(session_id=request.session_id)
        listed = engine_process.stub.ListMessages(page, metadata=alice(), timeout=DEADLINE)
        assert listed.messages[0].content == request.messages[0].content

    fuzz()
    _still_well(engine_process)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("method", list(REQUESTS))
def test_bytes_that_are_not_the_message_are_invalid_argument(
    engine_process: EngineProcess, method: str
) -> None:
    identity = lambda raw: raw  # noqa: E731
    call: Any
    if method in STREAMING:
        call = engine_process.channel.unary_stream(SERVICE + method, identity, identity)
    else:
        call = engine_process.channel.unary_unary(SERVICE + method, identity, identity)

    @FUZZ_SETTINGS
    @given(raw=raw_bytes())
    def fuzz(raw: bytes) -> None:
        try:
            answer = call(raw, metadata=alice(), timeout=DEADLINE)
            if method in STREAMING:
                list(answer)
        except grpc.RpcError as error:
            assert_clean_refusal(error, method)

    fuzz()
    _still_well(engine_process)


def test_the_engine_still_runs_a_turn_after_the_fuzz(engine_process: EngineProcess) -> None:
    request = pb.RunRequest(
        session_id="after-fuzz",
        create_session=True,
        messages=[
            pb.Message(role=pb.ROLE_USER, content=[pb.ContentPart(text=pb.TextPart(text="hi"))])
        ],
    )
    events = list(engine_process.stub.Run(request, metadata=alice(), timeout=DEADLINE))

    assert events[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
    _still_well(engine_process)


def _raw_call(engine: EngineProcess, method: str, kind: str, raw: bytes) -> None:
    """Send ``raw`` as the request of ``method`` (``unary``, ``server`` or ``bidi``
    streaming) and read the whole answer."""
    identity = lambda data: data  # noqa: E731
    channel = engine.channel
    if kind == "unary":
        channel.unary_unary(method, identity, identity)(raw, timeout=DEADLINE)
    elif kind == "server":
        list(channel.unary_stream(method, identity, identity)(raw, timeout=DEADLINE))
    else:
        list(channel.stream_stream(method, identity, identity)(iter([raw]), timeout=DEADLINE))


@pytest.mark.parametrize(
    ("method", "kind"),
    [
        ("/grpc.health.v1.Health/Check", "unary"),
        ("/grpc.health.v1.Health/Watch", "server"),  # written with context.write
        ("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", "bidi"),
        ("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "bidi"),
    ],
)
def test_health_and_reflection_refuse_bytes_that_are_not_their_message(
    engine_process: EngineProcess, method: str, kind: str
) -> None:
    for raw in (b"\x0a\x03\xff\xfe\xfd", b"\xff\xff\xff\xff"):
        with pytest.raises(grpc.RpcError) as caught:
            _raw_call(engine_process, method, kind, raw)

        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert_clean_refusal(caught.value, method)


def test_watching_health_still_streams_its_status(engine_process: EngineProcess) -> None:
    health: Any = health_pb2_grpc.HealthStub(engine_process.channel)
    watch = health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=DEADLINE)

    first = next(iter(watch))
    watch.cancel()

    assert first.status == health_pb2.HealthCheckResponse.SERVING
