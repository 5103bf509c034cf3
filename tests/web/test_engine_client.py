"""With several engine workers on one port, a facade worker spreads its calls over several
connections (the kernel hands each connection to one engine process) until it knows the
workers' own addresses; then each call goes to the next worker (real ``agentik engine
--workers 2`` processes on PostgreSQL; the runs each worker ran are counted in the store,
one replica id per process)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import psycopg
import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from tests.agentik.test_cli import ROOT, engine_env, read_until
from tests.postgres_server import pg_database, pg_url
from tests.web.conftest import WAIT
from web_facade.engine_client import EngineClient

__all__ = ["pg_database", "pg_url"]  # fixtures


class _Peers(pb_grpc.AgentEngineServicer):
    """Answers GetSession with NOT_FOUND and remembers which connection each call came on."""

    def __init__(self) -> None:
        self.peers: list[str] = []

    def GetSession(
        self, request: pb.GetSessionRequest, context: grpc.ServicerContext
    ) -> pb.Session:
        self.peers.append(context.peer())
        context.abort(grpc.StatusCode.NOT_FOUND, "no such session")


@pytest.fixture
def server() -> Iterator[tuple[str, _Peers]]:
    servicer = _Peers()  # type: ignore[abstract]  # only GetSession is called
    grpc_server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_AgentEngineServicer_to_server(servicer, grpc_server)
    port = grpc_server.add_insecure_port("127.0.0.1:0")
    grpc_server.start()
    try:
        yield f"127.0.0.1:{port}", servicer
    finally:
        grpc_server.stop(None)


def _call(client: EngineClient) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        client.engine.GetSession(pb.GetSessionRequest(session_id="s"), timeout=5)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def test_calls_take_each_of_several_connections_in_turn(server: tuple[str, _Peers]) -> None:
    target, servicer = server
    client = EngineClient(target, channels=3)
    try:
        for _ in range(6):
            _call(client)
    finally:
        client.close()
    assert len(set(servicer.peers)) == 3, servicer.peers
    assert servicer.peers[:3] == servicer.peers[3:]  # in turn


def test_one_engine_one_connection(server: tuple[str, _Peers]) -> None:
    target, servicer = server
    client = EngineClient(target)
    try:
        for _ in range(4):
            _call(client)
    finally:
        client.close()
    assert len(set(servicer.peers)) == 1


# --- engine workers: each call to the next worker, on the workers' own addresses -------


class EngineSet:
    """``agentik engine --workers N`` on a PostgreSQL store, as a real process."""

    def __init__(self, tmp_path: Path, store: str, port: int, workers: int, **env: str) -> None:
        self.tmp_path, self.store, self.port, self.workers = tmp_path, store, port, workers
        self.env = env
        self.process: subprocess.Popen[str] | None = None
        self.pids: list[int] = []
        self.own: list[str] = []
        self._drains: list[tuple[subprocess.Popen[str], threading.Thread]] = []

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        env = engine_env(
            self.tmp_path, AGENTIK_STORE=self.store, AGENTIK_GRPC_ADDR=self.target, **self.env
        )
        self.process = subprocess.Popen(
            [sys.executable, "-m", "agentik.cli", "engine", "--workers", str(self.workers)],
            cwd=ROOT,
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        seen: list[str] = []
        self.own = []
        for _ in range(self.workers):
            found = read_until(self.process, r"listening on \S+ and on its own (\S+)", seen)
            self.own.append(found[1])
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        self.pids = [int(pid) for pid in children.read_text().split()]
        drain = threading.Thread(target=self._drain, args=(self.process,), daemon=True)
        drain.start()
        self._drains.append((self.process, drain))

    @staticmethod
    def _drain(process: subprocess.Popen[str]) -> None:
        assert process.stderr is not None
        for _ in process.stderr:
            pass

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(WAIT)
        for process, drain in self._drains:  # this set's and the ones before
            drain.join(WAIT)
            assert process.stderr is not None
            process.stderr.close()
        self._drains = []


@pytest.fixture
def engine_set(tmp_path: Path, pg_url: str) -> Iterator[EngineSet]:
    running = EngineSet(tmp_path, pg_url, _free_port(), 2)
    running.start()
    try:
        yield running
    finally:
        running.stop()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _run(client: EngineClient) -> None:
    message = pb.Message(role=pb.ROLE_USER, content=[pb.ContentPart(text=pb.TextPart(text="hi"))])
    request = pb.RunRequest(session_id=uuid.uuid4().hex, create_session=True, messages=[message])
    events = list(client.engine.Run(request, timeout=WAIT))
    assert events[-1].WhichOneof("kind") == "run_finished", events[-1]


def _runs(client: EngineClient, count: int, threads: int = 8) -> None:
    with futures.ThreadPoolExecutor(threads) as pool:
        for done in [pool.submit(_run, client) for _ in range(count)]:
            done.result(WAIT)


def _runs_per_worker(store: str) -> Counter[str]:
    """Runs per engine process: each worker's engine is one replica of the shared store."""
    with psycopg.connect(store) as conn:
        rows = conn.execute("SELECT replica, count(*) FROM runs GROUP BY replica").fetchall()
    return Counter({str(replica): int(count) for replica, count in rows})


def _wait_for_workers(client: EngineClient, not_these: tuple[str, ...] = ()) -> tuple[str, ...]:
    client.engine  # noqa: B018  # connects, and starts asking for the workers
    deadline = time.monotonic() + WAIT
    while not client.workers or client.workers == not_these:
        assert time.monotonic() < deadline, f"no (new) workers learnt: {client.workers}"
        time.sleep(0.05)
    return client.workers


def test_calls_land_on_each_engine_worker_in_turn(engine_set: EngineSet) -> None:
    client = EngineClient(engine_set.target, channels=4, discover=True)
    try:
        assert set(_wait_for_workers(client)) == set(engine_set.own)
        _runs(client, 64)
    finally:
        client.close()
    runs = _runs_per_worker(engine_set.store)
    assert len(runs) == 2 and sum(runs.values()) == 64, runs
    assert max(runs.values()) <= 1.5 * min(runs.values()), runs


def test_without_discovery_one_connection_keeps_its_calls_on_one_worker(
    engine_set: EngineSet,
) -> None:
    # What the workers' own addresses fix: the kernel gives a connection to one process.
    client = EngineClient(engine_set.target)
    try:
        _runs(client, 16)
        assert client.workers == ()
    finally:
        client.close()
    assert list(_runs_per_worker(engine_set.store).values()) == [16]


def test_a_set_restarted_after_a_worker_died_is_balanced_over_again(
    engine_set: EngineSet,
) -> None:
    client = EngineClient(engine_set.target, discover=True)
    try:
        before = _wait_for_workers(client)
        _runs(client, 8)
        os.kill(engine_set.pids[0], signal.SIGKILL)
        assert engine_set.process is not None and engine_set.process.wait(WAIT) == 1
        engine_set.start()  # what a process manager does: the whole set again, same port
        after = _wait_for_workers(client, not_these=before)
        assert set(after) == set(engine_set.own) and not set(after) & set(before)
        old = set(_runs_per_worker(engine_set.store))
        _runs(client, 32)
    finally:
        client.close()
    runs = _runs_per_worker(engine_set.store)
    new = {replica: count for replica, count in runs.items() if replica not in old}
    assert len(new) == 2 and sum(new.values()) == 32, runs
    assert max(new.values()) <= 1.5 * min(new.values()), runs


def test_a_worker_s_own_address_asks_for_credentials_like_the_shared_port(
    tmp_path: Path, pg_url: str
) -> None:
    running = EngineSet(tmp_path, pg_url, _free_port(), 2, AGENTIK_TOKENS="tester:s3cret-token")
    running.start()
    try:
        for addr in [running.target, *running.own]:
            with grpc.insecure_channel(addr) as channel:
                stub = pb_grpc.AgentEngineStub(channel)
                with pytest.raises(grpc.RpcError) as caught:
                    stub.ListSessions(pb.ListSessionsRequest(), timeout=WAIT)
                assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED, addr
                stub.ListSessions(
                    pb.ListSessionsRequest(),
                    timeout=WAIT,
                    metadata=[("authorization", "Bearer s3cret-token")],
                )
    finally:
        running.stop()
