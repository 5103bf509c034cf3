"""The server around the engine: health, reflection, graceful shutdown, restarts."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor_pb2 import FileDescriptorProto
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.stores import open_store
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
from tests.fakes.fake_openai import FakeOpenAI


async def test_health_says_serving_for_the_server_and_the_engine_service(harness: Harness) -> None:
    health: Any = health_pb2_grpc.HealthStub(harness.channel)
    for service in ("", "agentik.engine.v1.AgentEngine"):
        reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_reflection_lists_the_engine_and_health_services(harness: Harness) -> None:
    stub: Any = reflection_pb2_grpc.ServerReflectionStub(harness.channel)  # type: ignore[arg-type]
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    async with asyncio.timeout(WAIT):
        async for reply in stub.ServerReflectionInfo(iter([request])):
            names = {s.name for s in reply.list_services_response.service}
            break
    assert {"agentik.engine.v1.AgentEngine", "grpc.health.v1.Health"} <= names


async def test_reflection_is_served_as_v1_too_with_the_contract(harness: Harness) -> None:
    """Newer tools (grpcurl, grpcui, Postman) ask ``grpc.reflection.v1`` first."""
    call = harness.channel.stream_stream(
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    requests = [
        reflection_pb2.ServerReflectionRequest(list_services=""),
        reflection_pb2.ServerReflectionRequest(
            file_containing_symbol="agentik.engine.v1.AgentEngine"
        ),
    ]
    async with asyncio.timeout(WAIT):
        replies = [reply async for reply in call(iter(requests))]
    names = {s.name for s in replies[0].list_services_response.service}
    assert {
        "agentik.engine.v1.AgentEngine",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    } <= names
    files = replies[1].file_descriptor_response.file_descriptor_proto
    assert files and any(b"AgentEngine" in f for f in files)


CONTRACT = "agentik/engine/v1/engine.proto"


@pytest.mark.parametrize(
    "reflection_service",
    ["grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"],
)
async def test_reflection_describes_the_contract_under_its_public_path(
    harness: Harness, reflection_service: str
) -> None:
    """grpcurl ``describe`` and friends see ``agentik/engine/v1/engine.proto``, the path of the
    public contract (not the stubs' package path), and can fetch each of its imports by name."""
    call = harness.channel.stream_stream(
        f"/{reflection_service}/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )

    async def ask(*requests: reflection_pb2.ServerReflectionRequest) -> list[FileDescriptorProto]:
        """The first file of each reply: the one asked for (the rest are its imports)."""
        async with asyncio.timeout(WAIT):
            replies = [reply async for reply in call(iter(requests))]
        assert len(replies) == len(requests)
        first = []
        for reply in replies:
            assert not reply.HasField("error_response"), reply.error_response.error_message
            files = reply.file_descriptor_response.file_descriptor_proto
            assert files
            first.append(FileDescriptorProto.FromString(files[0]))
        return first

    by_symbol, by_name = await ask(
        reflection_pb2.ServerReflectionRequest(
            file_containing_symbol="agentik.engine.v1.AgentEngine"
        ),
        reflection_pb2.ServerReflectionRequest(file_by_filename=CONTRACT),
    )
    for contract in (by_symbol, by_name):
        assert contract.name == CONTRACT
        assert contract.package == "agentik.engine.v1"
        assert "AgentEngine" in {service.name for service in contract.service}
    imports = list(by_name.dependency)
    assert {"google/protobuf/struct.proto", "google/protobuf/timestamp.proto"} <= set(imports)
    fetched = await ask(
        *(reflection_pb2.ServerReflectionRequest(file_by_filename=name) for name in imports)
    )
    assert [dependency.name for dependency in fetched] == imports


BUF = Path(sys.executable).parent / "buf"


async def buf_curl(*args: str) -> tuple[int, str]:
    """Run ``buf curl`` (buf-bin, a dev dependency) over plain gRPC; (exit code, output)."""
    if not BUF.exists():
        pytest.fail(f"buf is missing ({BUF}): install the dev extras")
    process = await asyncio.create_subprocess_exec(
        str(BUF),
        "curl",
        "--protocol",
        "grpc",
        "--http2-prior-knowledge",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    async with asyncio.timeout(WAIT * 2):
        out, _ = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode()


async def test_buf_curl_lists_every_method_through_reflection_v1(harness: Harness) -> None:
    """buf asks reflection v1 to describe each service it lists, reflection itself included."""
    code, out = await buf_curl("--list-methods", f"http://{harness.target}")
    assert code == 0, out
    methods = set(out.split())
    assert {
        "agentik.engine.v1.AgentEngine/Run",
        "agentik.engine.v1.AgentEngine/Subscribe",
        "grpc.health.v1.Health/Check",
        "grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        "grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
    } <= methods


async def test_buf_curl_calls_a_method_it_learned_from_reflection(harness: Harness) -> None:
    url = f"http://{harness.target}/agentik.engine.v1.AgentEngine/CreateSession"
    code, out = await buf_curl("-d", '{"session_id": "from-buf"}', url)
    assert code == 0, out
    assert json.loads(out)["id"] == "from-buf"


async def test_reflection_v1_describes_itself_under_the_v1_package(harness: Harness) -> None:
    call = harness.channel.stream_stream(
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    request = reflection_pb2.ServerReflectionRequest(
        file_containing_symbol="grpc.reflection.v1.ServerReflection"
    )
    async with asyncio.timeout(WAIT):
        (reply,) = [reply async for reply in call(iter([request]))]
    assert not reply.HasField("error_response"), reply.error_response.error_message
    file = FileDescriptorProto.FromString(reply.file_descriptor_response.file_descriptor_proto[0])
    assert file.name == "grpc/reflection/v1/reflection.proto"
    assert file.package == "grpc.reflection.v1"
    (method,) = file.service[0].method
    assert method.input_type == ".grpc.reflection.v1.ServerReflectionRequest"
    assert method.output_type == ".grpc.reflection.v1.ServerReflectionResponse"


async def test_shutdown_lets_a_short_run_finish_and_then_refuses_new_runs(llm: FakeOpenAI) -> None:
    settings = engine_settings(OPENAI_BASE_URL=llm.base_url, AGENTIK_SHUTDOWN_GRACE="5")
    async with running_engine(settings) as harness:
        call = harness.stub.Run(
            pb.RunRequest(
                session_id="g", create_session=True, messages=[user("[[slow:0.02]] a b c")]
            )
        )
        await next_event(call)
        health: Any = health_pb2_grpc.HealthStub(harness.channel)
        stopping = asyncio.create_task(harness.engine.shutdown(settings.engine.shutdown_grace))
        await asyncio.sleep(0)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await collect(harness.stub.Run(pb.RunRequest(session_id="n", create_session=True)))
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        events = await collect(call)
        assert events[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
        async with asyncio.timeout(WAIT):
            await stopping
        await harness.server.health.enter_graceful_shutdown()
        reply = await health.Check(health_pb2.HealthCheckRequest(service=""))
        assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING


async def test_shutdown_interrupts_runs_that_outlast_the_grace_period(llm: FakeOpenAI) -> None:
    settings = engine_settings(OPENAI_BASE_URL=llm.base_url, AGENTIK_SHUTDOWN_GRACE="0.2")
    async with running_engine(settings) as harness:
        call = harness.stub.Run(
            pb.RunRequest(session_id="long", create_session=True, messages=[user("[[hang]] a b")])
        )
        first = await next_event(call)
        assert kind(first) == "run_started"
        async with asyncio.timeout(WAIT):
            await harness.engine.shutdown(settings.engine.shutdown_grace)
        events = await collect(call)
        assert events[-1].run_finished.outcome == pb.OUTCOME_TYPE_CANCELLED
        run = await harness.engine.store.get_run("long", first.run_id)
        assert run.status.value == "interrupted"


async def test_history_survives_an_engine_restart_on_sqlite(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    settings = engine_settings(
        OPENAI_BASE_URL=llm.base_url, AGENTIK_STORE=f"sqlite:///{tmp_path / 'a.db'}"
    )
    async with running_engine(settings) as harness:
        before = await collect(
            harness.stub.Run(
                pb.RunRequest(session_id="keep", create_session=True, messages=[user("hi")])
            )
        )
    async with running_engine(settings) as harness:
        stored = (
            await harness.stub.ListMessages(pb.ListMessagesRequest(session_id="keep"))
        ).messages
        replay = await collect(
            harness.stub.Subscribe(pb.SubscribeRequest(session_id="keep", until_idle=True))
        )
        after = await collect(
            harness.stub.Run(pb.RunRequest(session_id="keep", messages=[user("again")]))
        )
    assert [m.role for m in stored] == [pb.ROLE_USER, pb.ROLE_ASSISTANT]
    assert [e.SerializeToString() for e in replay] == [e.SerializeToString() for e in before]
    assert after[0].seq == before[-1].seq + 1


async def test_a_run_left_running_by_a_dead_engine_is_stored_as_interrupted_at_start(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'b.db'}"
    store = open_store(url)
    from datetime import UTC, datetime

    await store.begin_run("crash", "r-dead", datetime.now(UTC), create=True)
    await store.close()

    settings = engine_settings(OPENAI_BASE_URL=llm.base_url, AGENTIK_STORE=url)
    async with running_engine(settings) as harness:
        session = await harness.stub.GetSession(pb.GetSessionRequest(session_id="crash"))
        assert session.active_run_id == ""
        events = await collect(
            harness.stub.Subscribe(pb.SubscribeRequest(session_id="crash", until_idle=True))
        )
        assert events[-1].run_id == "r-dead"
        assert events[-1].run_finished.outcome == pb.OUTCOME_TYPE_CANCELLED
        follow = await collect(
            harness.stub.Run(pb.RunRequest(session_id="crash", messages=[user("x")]))
        )
        assert kind(follow[-1]) == "run_finished"


class _Companion:
    """Stands in for ``agentik serve``'s web workers: fails at its third look."""

    def __init__(self, engine_alive: Any) -> None:
        self.calls: list[str] = []
        self.looks = 0
        self.engine_alive = engine_alive

    def start(self) -> None:
        self.calls.append("start")

    def check(self) -> bool:
        self.looks += 1
        return self.looks < 3

    def stop(self) -> bool:
        self.calls.append(f"stop (engine serving: {self.engine_alive()})")
        return True

    def hurry(self) -> None:
        self.calls.append("hurry")

    def close(self) -> None:
        self.calls.append("close")


async def test_a_companion_that_fails_stops_the_engine_after_itself_and_the_result_says_so(
    llm: FakeOpenAI,
) -> None:
    """``agentik serve``: the engine runs the web workers beside it (``run_engine``'s
    companion); when they cannot run, the companion stops first, then the engine, and
    ``run_engine`` returns False (``serve`` exits 1)."""
    from engine_service.build import build_engine
    from engine_service.server import run_engine

    settings = engine_settings(AGENTIK_STORE="memory://", AGENTIK_GRPC_ADDR="127.0.0.1:0")
    engine = build_engine(settings)
    companion = _Companion(lambda: engine.accepting)
    clean = await asyncio.wait_for(run_engine(settings, engine, companion=companion), WAIT)
    assert clean is False
    assert companion.calls == ["start", "stop (engine serving: True)", "close"]
    assert companion.looks == 3
    assert not engine.accepting


def test_an_idle_engine_imports_neither_httpx_nor_mcp_nor_cryptography() -> None:
    """Memory: httpx (~7 MB, the LLM probe uses the engine's own HTTP client), the MCP SDK
    (its server stack), cryptography with PyJWT (~8 MB, only a card signing key or PEM
    JWTs need them) and orjson (2.3 MB, imported by the first LLM stream read) stay out of
    an engine that starts, probes its LLM and serves
    (docs/performance.md, idle memory). The a2a-sdk's types are in: the engine serves A2A's
    gRPC binding; but not starlette and anyio, which they import for an annotation (1.6 MiB,
    ``agentik/a2a/__init__.py``), nor importlib.metadata (the card's version is
    ``agentik.__version__``)."""
    code = (
        # In the order `agentik engine` and `agentik serve` import them: the card first.
        "import sys, agentik.a2a.card, engine_service.server, engine_service.build, "
        "engine_service.llm.probe, engine_service.webhooks.a2a_push\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'httpx', 'mcp', 'pydantic', 'uvicorn', 'cryptography', 'jwt', 'starlette', 'anyio',"
        " 'orjson'}"
        " | ({'importlib.metadata'} & set(sys.modules))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout
