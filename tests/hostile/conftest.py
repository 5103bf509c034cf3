"""The engine the hostile inputs are thrown at: a real process (its memory is measured) with
two principals' tokens, the offline model, and a SQLite or a PostgreSQL store."""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from psycopg import sql

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from tests.engine.auth_helpers import TOKENS, TOKENS_ENV
from tests.hostile.verdict import DEADLINE, rss_bytes
from tests.postgres_server import pg_database, pg_url, with_schema
from tests.web.e2e.conftest import ENGINE_LISTENING, ROOT, Process

__all__ = ["EngineProcess", "engine_process", "pg_database", "pg_url"]


@dataclass
class EngineProcess:
    process: Process
    channel: grpc.Channel
    stub: pb_grpc.AgentEngineStub
    baseline_rss: int
    known_ids: tuple[str, ...]
    """Ids that exist when the fuzz starts: alice's session, its run and message, and
    ones made by bob."""

    @property
    def pid(self) -> int:
        return self.process.popen.pid

    @property
    def rss(self) -> int:
        return rss_bytes(self.pid)

    def serving(self) -> bool:
        health: Any = health_pb2_grpc.HealthStub(self.channel)
        answer = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=DEADLINE)
        return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)


def alice() -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {TOKENS['alice']}"),)


def _seed(stub: pb_grpc.AgentEngineStub) -> tuple[str, ...]:
    """A few sessions, runs, messages and a pending interrupt the fuzz can aim at."""
    known: list[str] = []
    for who, session in (("alice", "s-alice"), ("bob", "s-bob")):
        metadata = (("authorization", f"Bearer {TOKENS[who]}"),)
        request = pb.RunRequest(
            session_id=session,
            run_id=f"r-{who}",
            create_session=True,
            messages=[
                pb.Message(
                    id=f"m-{who}",
                    role=pb.ROLE_USER,
                    content=[pb.ContentPart(text=pb.TextPart(text="calculate 6*7"))],
                )
            ],
        )
        events = list(stub.Run(request, metadata=metadata, timeout=DEADLINE))
        known += [session, f"r-{who}", f"m-{who}"]
        for event in events:
            for interrupt in event.run_finished.interrupts:
                known += [interrupt.id, interrupt.tool_call.id]
    return tuple(known)


def _store(kind: str, logs: Path, request: pytest.FixtureRequest) -> str:
    if kind == "sqlite":
        return f"sqlite:///{logs / 'store.db'}"
    database: str = request.getfixturevalue("pg_database")
    schema = f"hostile_{secrets.token_hex(6)}"
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    return with_schema(database, schema)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def engine_process(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EngineProcess]:
    logs: Path = tmp_path_factory.mktemp("hostile")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AGENTIK_", "OPENAI_"))
    }
    env.update(
        PYTHONPATH=str(ROOT),
        AGENTIK_GRPC_ADDR="127.0.0.1:0",
        AGENTIK_STORE=_store(request.param, logs, request),
        AGENTIK_TOKENS=TOKENS_ENV,
        AGENTIK_ADMINS="ops",
        AGENTIK_TOOLS_APPROVAL="calculate",
        AGENTIK_TOOLS_ASK_USER="true",
        AGENTIK_SHUTDOWN_GRACE="1",
        AGENTIK_LOG_LEVEL="INFO",  # the engine logs its port at INFO
    )
    process = Process("engine", [sys.executable, "-m", "engine_service"], env, logs)
    try:
        port = int(process.wait_for_log(ENGINE_LISTENING))
        channel = grpc.insecure_channel(
            f"127.0.0.1:{port}", options=[("grpc.max_receive_message_length", 64 << 20)]
        )
        stub = pb_grpc.AgentEngineStub(channel)
        known = _seed(stub)
        running = EngineProcess(process, channel, stub, rss_bytes(process.popen.pid), known)
        yield running
        channel.close()
    finally:
        process.stop()
