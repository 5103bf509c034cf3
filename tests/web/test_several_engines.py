"""Several engines behind one facade: round robin, retries of the safe calls, and event
streams that resume on another engine when theirs is cut.

Every engine here is a real gRPC server on a free port and the facade is the real app
with its real channel. Engines that share a store run on one event loop, as the memory
store's signals ask. A stream is cut with :class:`CuttableProxy`, a TCP proxy in front of
one engine that can hold back the engine's answers and then drop every connection and
send new ones to another engine: the facade sees what a dying engine looks like (the
connection goes away, the call ends with UNAVAILABLE), and the run it followed is still
in the shared store.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable, Iterator
from concurrent import futures
from typing import Any, ClassVar, TypeVar, cast

import grpc
import pytest
from ag_ui.core import EventType
from flask import Flask

from agentik.config import Settings
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from engine_service.build import build_engine, build_model, build_tools
from engine_service.core.engine import Engine
from engine_service.server import EngineServer
from engine_service.stores.memory import MemorySessionStore
from tests.cuttable_proxy import CuttableProxy
from tests.fakes.fake_openai import FakeOpenAI
from tests.web.a2a.conftest import Rpc, user_message
from tests.web.agentik.streams import StreamReader
from tests.web.agui.agui_reader import AguiReader, assert_well_formed, has, text, types
from tests.web.conftest import WAIT, ApiClient, engine_settings
from tests.web.e2e.conftest import wait_for
from tests.web.sse_frames import Frame
from web_facade.engine_client import RETRIED_METHODS
from web_facade.stream import relay as relay_module

T = TypeVar("T")


class EngineGroup:
    """Engine servers on one asyncio loop in a thread (a shared memory store needs one)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.servers: list[EngineServer] = []

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(WAIT)

    def start(self, settings: Settings, store: MemorySessionStore | None = None) -> int:
        """Start an engine (on ``store`` when given); returns its port."""

        async def start() -> int:
            if store is None:
                engine = build_engine(settings)
            else:
                engine = Engine(store, build_model(settings), build_tools(settings))
            server = EngineServer(engine, settings)
            self.servers.append(server)
            return await server.start()

        return self.run(start())

    def stop(self, index: int) -> None:
        self.run(self.servers[index].stop())

    def close(self) -> None:
        for server in self.servers:
            with contextlib.suppress(Exception):  # stopped already
                self.run(server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(WAIT)
        self.loop.close()


@pytest.fixture
def group() -> Iterator[EngineGroup]:
    engines = EngineGroup()
    yield engines
    engines.close()


@pytest.fixture
def shared_pair(group: EngineGroup, llm: FakeOpenAI) -> tuple[MemorySessionStore, int, int]:
    """Two engines on one shared store: (store, port A, port B)."""
    store = MemorySessionStore(shared=True)
    first = group.start(engine_settings(llm), store)
    second = group.start(engine_settings(llm), store)
    return store, first, second


def _send(api: ApiClient, conversation_id: str, text: str) -> StreamReader:
    response = api.call(
        "POST",
        f"/agentik/conversations/{conversation_id}/send",
        json={"content": [{"type": "text", "text": text}]},
        buffered=False,
    )
    return StreamReader(response)


def _follow(api: ApiClient, conversation_id: str, query: str) -> StreamReader:
    response = api.call(
        "GET", f"/agentik/conversations/{conversation_id}/events?{query}", buffered=False
    )
    return StreamReader(response)


def _ids(frames: list[Frame]) -> list[int]:
    return [frame.id for frame in frames if frame.id is not None]


def _stored_ids(api: ApiClient, conversation_id: str) -> list[int]:
    """Every event id of the conversation, read in one piece after the fact."""
    reader = _follow(api, conversation_id, "after=0&until_idle=true")
    return _ids(reader.read_to_end())


def _assert_no_loss_no_duplicate(got: list[int], stored: list[int]) -> None:
    duplicated = [seq for seq, count in Counter(got).items() if count > 1]
    lost = sorted(set(stored) - set(got))
    assert duplicated == [] and lost == [], f"duplicated {duplicated}, lost {lost}"
    assert got == stored


# --- round robin -----------------------------------------------------------------------


def test_calls_are_balanced_over_every_engine_of_a_list(
    group: EngineGroup, llm: FakeOpenAI, make_app: Callable[..., Flask]
) -> None:
    first = group.start(engine_settings(llm))
    second = group.start(engine_settings(llm))
    api = ApiClient(make_app(f"ipv4:127.0.0.1:{first},127.0.0.1:{second}").test_client())
    for index in range(10):
        api.new_conversation(f"c{index}")

    def sessions(port: int) -> int:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.AgentEngineStub(channel)
            return len(stub.ListSessions(pb.ListSessionsRequest(), timeout=WAIT).sessions)

    on_first, on_second = sessions(first), sessions(second)
    assert on_first + on_second == 10
    assert on_first > 0 and on_second > 0, (on_first, on_second)


# --- retries -----------------------------------------------------------------------------


class FlakyEngine:
    """An engine that is always unavailable for a few methods: counts what it refused."""

    METHODS: ClassVar[dict[str, Callable[[bytes], Any]]] = {
        "GetSession": pb.GetSessionRequest.FromString,
        "ListSessions": pb.ListSessionsRequest.FromString,
        "ListMessages": pb.ListMessagesRequest.FromString,
        "CreateSession": pb.CreateSessionRequest.FromString,
        "ListAgents": pb.ListAgentsRequest.FromString,
        "GetAgent": pb.GetAgentRequest.FromString,
    }

    def __init__(self) -> None:
        self.refused: Counter[str] = Counter()

    def handler(self) -> grpc.GenericRpcHandler:
        def refuse(name: str) -> Callable[[Any, grpc.ServicerContext], Any]:
            def behaviour(request: Any, context: grpc.ServicerContext) -> Any:
                self.refused[name] += 1
                context.abort(grpc.StatusCode.UNAVAILABLE, "this engine is going away")

            return behaviour

        handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
            name: grpc.unary_unary_rpc_method_handler(refuse(name), request_deserializer=parse)
            for name, parse in self.METHODS.items()
        }
        return grpc.method_handlers_generic_handler("agentik.engine.v1.AgentEngine", handlers)


@pytest.fixture
def flaky() -> Iterator[tuple[FlakyEngine, int]]:
    servicer = FlakyEngine()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((servicer.handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, port
    server.stop(None)


def _reads(api: ApiClient, conversation_id: str) -> list[int]:
    statuses = []
    for _ in range(10):
        statuses.append(api.call("GET", f"/agentik/conversations/{conversation_id}").status_code)
        statuses.append(api.call("GET", "/agentik/agents").status_code)
        statuses.append(api.call("GET", "/agentik/agents/agentik").status_code)
        statuses.append(api.call("GET", "/agentik/conversations").status_code)
        statuses.append(
            api.call("GET", f"/agentik/conversations/{conversation_id}/messages").status_code
        )
    return statuses


def test_reads_are_retried_on_another_engine_when_one_is_unavailable(
    group: EngineGroup,
    llm: FakeOpenAI,
    make_app: Callable[..., Flask],
    flaky: tuple[FlakyEngine, int],
) -> None:
    servicer, flaky_port = flaky
    good = group.start(engine_settings(llm))
    api = ApiClient(make_app(f"ipv4:127.0.0.1:{flaky_port},127.0.0.1:{good}").test_client())
    with grpc.insecure_channel(f"127.0.0.1:{good}") as channel:
        session = pb_grpc.AgentEngineStub(channel).CreateSession(
            pb.CreateSessionRequest(title="t"), timeout=WAIT
        )
    assert set(_reads(api, session.id)) == {200}
    # Round robin sent some first attempts to the refusing engine; each was retried.
    assert sum(servicer.refused.values()) > 0
    assert servicer.refused["ListAgents"] > 0 and servicer.refused["GetAgent"] > 0
    # A create is not retried: every refusal reached the caller as 503.
    created = [api.call("POST", "/agentik/conversations", json={}) for _ in range(10)]
    statuses = Counter(response.status_code for response in created)
    assert statuses[503] == servicer.refused["CreateSession"]
    assert statuses[201] + statuses[503] == 10


def test_every_read_of_the_engine_is_retried() -> None:
    """Each ``Get*``/``List*`` method of the service, and ``Authenticate``, is in
    ``RETRIED_METHODS``: a read added to the proto is retried too, or this fails."""
    service = pb.DESCRIPTOR.services_by_name["AgentEngine"]
    reads = {
        method.name
        for method in service.methods
        if method.name.startswith(("Get", "List")) or method.name == "Authenticate"
    }
    assert reads - set(RETRIED_METHODS) == set()
    assert {"Run", "CreateSession", "DeleteSession"} & set(RETRIED_METHODS) == set()


def test_reads_succeed_with_a_dead_address_in_the_list(
    group: EngineGroup, llm: FakeOpenAI, make_app: Callable[..., Flask]
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        dead = placeholder.getsockname()[1]  # closed below: nothing listens there
    good = group.start(engine_settings(llm))
    api = ApiClient(make_app(f"ipv4:127.0.0.1:{dead},127.0.0.1:{good}").test_client())
    with grpc.insecure_channel(f"127.0.0.1:{good}") as channel:
        session = pb_grpc.AgentEngineStub(channel).CreateSession(
            pb.CreateSessionRequest(title="t"), timeout=WAIT
        )
    assert set(_reads(api, session.id)) == {200}


# --- streams resumed on another engine ---------------------------------------------------


def test_a_follow_cut_by_a_dying_engine_resumes_on_another(
    shared_pair: tuple[MemorySessionStore, int, int], make_app: Callable[..., Flask]
) -> None:
    _, first, second = shared_pair
    proxy = CuttableProxy(first)
    try:
        api = ApiClient(make_app(proxy.target).test_client())
        conversation_id = api.new_conversation()
        _send(api, conversation_id, "[[chunks:5]] one").read_to_end()
        follow = _follow(api, conversation_id, "after=0")
        follow.read_until(lambda frames: any(f.type == "end" for f in frames))
        before = len(follow.events)
        proxy.cut_to(second)  # the first engine is gone; the follow is resumed on the second
        # A read is retried, so it waits out the reconnection that a new run (not retried:
        # it would run twice) could otherwise meet on the dying connection.
        assert api.call("GET", f"/agentik/conversations/{conversation_id}").status_code == 200
        _send(api, conversation_id, "[[chunks:5]] two").read_to_end()
        follow.read_until(lambda frames: [f.type for f in frames].count("end") == 2)
        follow.close()
        assert len(follow.events) > before
        _assert_no_loss_no_duplicate(_ids(follow.events), _stored_ids(api, conversation_id))
        assert not any(f.type == "error" for f in follow.events)
    finally:
        proxy.close()


def _run_store_idle(
    group: EngineGroup, store: MemorySessionStore, conversation_id: str
) -> Callable[[], bool]:
    def idle() -> bool:
        async def check() -> bool:
            session = await store.get_session(conversation_id)
            return not session.active_run_id

        return group.run(check())

    return idle


def test_a_run_stream_cut_by_a_dying_engine_ends_through_another(
    group: EngineGroup,
    shared_pair: tuple[MemorySessionStore, int, int],
    make_app: Callable[..., Flask],
) -> None:
    store, first, second = shared_pair
    proxy = CuttableProxy(first)
    try:
        api = ApiClient(make_app(proxy.target).test_client())
        conversation_id = api.new_conversation()
        stream = _send(api, conversation_id, "[[chunks:20]] [[slow:0.02]] go")
        stream.read_until(lambda frames: len(frames) >= 1)
        proxy.hold()  # the engine's answers stop reaching the facade ...
        wait_for(_run_store_idle(group, store, conversation_id), "the run to end")
        proxy.cut_to(second)  # ... and it dies with the run's end unsent
        seen = len(stream.events)
        events = stream.read_to_end()
        assert len(events) > seen, "nothing came after the cut: the test cut too late"
        assert events[-1].type == "end"
        assert not any(f.type == "error" for f in events)
        _assert_no_loss_no_duplicate(_ids(events), _stored_ids(api, conversation_id))
    finally:
        proxy.close()


def test_a_run_stream_cut_mid_run_follows_the_run_live_on_another_engine(
    shared_pair: tuple[MemorySessionStore, int, int], make_app: Callable[..., Flask]
) -> None:
    _, first, second = shared_pair
    proxy = CuttableProxy(first)
    try:
        api = ApiClient(make_app(proxy.target).test_client())
        conversation_id = api.new_conversation()
        stream = _send(api, conversation_id, "[[chunks:40]] [[slow:0.05]] go")
        stream.read_until(lambda frames: len(frames) >= 2)
        proxy.cut_to(second)  # the run goes on in the first engine, unseen by the facade
        events = stream.read_to_end(within=WAIT)
        assert events[-1].type == "end"
        _assert_no_loss_no_duplicate(_ids(events), _stored_ids(api, conversation_id))
    finally:
        proxy.close()


def test_a_stream_that_cannot_resume_ends_with_the_error(
    group: EngineGroup,
    llm: FakeOpenAI,
    make_app: Callable[..., Flask],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(relay_module, "RESUME_WINDOW", 1.5)
    only = group.start(engine_settings(llm))
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        dead = placeholder.getsockname()[1]
    proxy = CuttableProxy(only)
    try:
        api = ApiClient(make_app(proxy.target).test_client())
        conversation_id = api.new_conversation()
        follow = _follow(api, conversation_id, "after=0")
        follow.read_until(lambda frames: True)
        started = time.monotonic()
        proxy.cut_to(dead)  # no engine left
        follow.read_until(lambda frames: any(f.type == "error" for f in frames), within=30)
        # It tried for the resume window, not for ever.
        assert 1.0 < time.monotonic() - started < 1.5 + WAIT / 2
        error = next(f for f in follow.events if f.type == "error")
        assert error.data is not None and error.data["code"] == "engine_unavailable"
    finally:
        proxy.close()


def test_an_agui_run_cut_by_a_dying_engine_ends_through_another(
    group: EngineGroup,
    shared_pair: tuple[MemorySessionStore, int, int],
    make_app: Callable[..., Flask],
) -> None:
    """AG-UI frames carry no id: the answer's text deltas, put together, must be the
    stored answer exactly, and the run has one RUN_STARTED and one RUN_FINISHED."""
    store, first, second = shared_pair
    proxy = CuttableProxy(first)
    try:
        client = make_app(proxy.target).test_client()
        thread_id = f"agui-{uuid.uuid4().hex}"
        body = {
            "threadId": thread_id,
            "runId": uuid.uuid4().hex,
            "messages": [
                {"id": uuid.uuid4().hex, "role": "user", "content": "[[chunks:20]] [[slow:0.02]]"}
            ],
        }
        response = client.post("/agui", json=body, buffered=False)
        assert response.status_code == 200, response.get_data()
        reader = AguiReader(cast("Iterable[bytes]", response.response))
        reader.read_until(has(EventType.TEXT_MESSAGE_CONTENT))
        proxy.hold()
        wait_for(_run_store_idle(group, store, thread_id), "the run to end")
        proxy.cut_to(second)
        seen = len(reader.events)
        events = reader.read_to_end()
        assert len(events) > seen, "nothing came after the cut: the test cut too late"
        assert_well_formed(events)
        assert types(events).count("RUN_STARTED") == 1
        assert types(events)[-1] == "RUN_FINISHED"
        assert text(events) == "".join(f"w{i} " for i in range(20))
    finally:
        proxy.close()


def test_a_resumed_stream_keeps_the_callers_credentials(
    group: EngineGroup, llm: FakeOpenAI, make_app: Callable[..., Flask]
) -> None:
    store = MemorySessionStore(shared=True)
    first = group.start(engine_settings(llm, AGENTIK_TOKENS="alice:token-a"), store)
    second = group.start(engine_settings(llm, AGENTIK_TOKENS="alice:token-a"), store)
    proxy = CuttableProxy(first)
    headers = {"Authorization": "Bearer token-a"}
    try:
        api = ApiClient(make_app(proxy.target).test_client())
        response = api.call("POST", "/agentik/conversations", json={}, headers=headers)
        assert response.status_code == 201
        conversation_id = response.get_json()["id"]
        response = api.call(
            "POST",
            f"/agentik/conversations/{conversation_id}/send",
            json={"content": [{"type": "text", "text": "[[chunks:3]] one"}]},
            headers=headers,
        )
        assert response.status_code == 200
        follow = StreamReader(
            api.call(
                "GET",
                f"/agentik/conversations/{conversation_id}/events?after=0",
                headers=headers,
                buffered=False,
            )
        )
        follow.read_until(lambda frames: any(f.type == "end" for f in frames))
        proxy.cut_to(second)
        # The relay thread has no request: it reopens with the header taken at the start.
        assert (
            api.call(
                "GET", f"/agentik/conversations/{conversation_id}", headers=headers
            ).status_code
            == 200
        )
        response = api.call(
            "POST",
            f"/agentik/conversations/{conversation_id}/send",
            json={"content": [{"type": "text", "text": "[[chunks:3]] two"}]},
            headers=headers,
        )
        assert response.status_code == 200
        follow.read_until(lambda frames: [f.type for f in frames].count("end") == 2)
        follow.close()
        assert not any(f.type == "error" for f in follow.events)
        assert len(set(_ids(follow.events))) == len(_ids(follow.events))
    finally:
        proxy.close()


def test_an_a2a_task_stream_cut_by_a_dying_engine_ends_through_another(
    group: EngineGroup,
    shared_pair: tuple[MemorySessionStore, int, int],
    make_app: Callable[..., Flask],
) -> None:
    store, first, second = shared_pair
    proxy = CuttableProxy(first)
    try:
        rpc = Rpc(make_app(proxy.target).test_client())
        message = user_message("[[chunks:20]] [[slow:0.02]]")
        stream = rpc.open("SendStreamingMessage", {"message": message})
        replies = [stream.next()]
        task = replies[0]["result"]["task"]
        while "artifactUpdate" not in replies[-1]["result"]:
            replies.append(stream.next())
        proxy.hold()
        wait_for(_run_store_idle(group, store, task["contextId"]), "the run to end")
        proxy.cut_to(second)
        seen = len(replies)
        replies += stream.rest()
        stream.close()
        assert len(replies) > seen, "nothing came after the cut: the test cut too late"
        assert all("error" not in reply for reply in replies), replies[-1]
        chunks = [r["result"]["artifactUpdate"] for r in replies if "artifactUpdate" in r["result"]]
        answer = "".join(c["artifact"]["parts"][0]["text"] for c in chunks)
        assert answer == "".join(f"w{i} " for i in range(20))
        final = replies[-1]["result"]["statusUpdate"]
        assert final["taskId"] == task["id"]
        assert final["status"]["state"] == "TASK_STATE_COMPLETED"
    finally:
        proxy.close()
