"""With several engine workers on one port, a facade worker spreads its calls over several
connections (the kernel hands each connection to one engine process) until it knows the
workers' own addresses; then each call goes to the next worker (real ``agentik engine
--workers 2`` processes on PostgreSQL; the runs each worker ran are counted in the store,
one replica id per process)."""

from __future__ import annotations

import logging
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
from typing import Any

import grpc
import psycopg
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from tests.agentik.test_cli import ROOT, engine_env, read_until
from tests.postgres_server import pg_database, pg_url
from tests.web.conftest import WAIT
from web_facade import aio_loop, engine_client
from web_facade.engine_client import EngineClient
from web_facade.engine_workers import WORKER_METADATA, WORKERS_METADATA

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
                    metadata=(("authorization", "Bearer s3cret-token"),),
                )
    finally:
        running.stop()


# --- the balancing itself, with stand-in workers that count their calls ---------------


class _Listing(health.HealthServicer):
    """A health service that lists worker addresses, as an engine worker's does."""

    def __init__(self, listed: str) -> None:
        super().__init__()
        self.listed = listed
        self.own = ""
        self.asked = 0
        """Health checks answered."""

    def Check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.ServicerContext
    ) -> health_pb2.HealthCheckResponse:
        self.asked += 1
        said = ((WORKERS_METADATA, self.listed), (WORKER_METADATA, self.own))
        context.send_initial_metadata(said)
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)


def _stand_in(addr: str, servicer: _Peers, listed: str = "") -> tuple[grpc.Server, int]:
    grpc_server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_AgentEngineServicer_to_server(servicer, grpc_server)
    listing = _Listing(listed)
    health_pb2_grpc.add_HealthServicer_to_server(listing, grpc_server)
    port = grpc_server.add_insecure_port(addr)
    listing.own = f"127.0.0.1:{port}"
    grpc_server.start()
    return grpc_server, port


def _until_called(client: EngineClient, worker: _Peers) -> None:
    deadline = time.monotonic() + WAIT
    while not worker.peers:
        assert time.monotonic() < deadline, "the worker got no call"
        _call(client)
        time.sleep(0.02)


def test_a_worker_that_stops_is_left_out_and_used_again_once_back_at_its_address() -> None:
    first, second = _Peers(), _Peers()  # type: ignore[abstract]
    one, one_port = _stand_in("127.0.0.1:0", first)
    two, two_port = _stand_in("127.0.0.1:0", second)
    listed = f"127.0.0.1:{one_port},0.0.0.0:{two_port}"  # a wildcard: the target's host
    shared, port = _stand_in("127.0.0.1:0", _Peers(), listed)  # type: ignore[abstract]
    client = EngineClient(f"127.0.0.1:{port}", discover=True)
    try:
        assert _wait_for_workers(client) == (f"127.0.0.1:{one_port}", f"127.0.0.1:{two_port}")
        for _ in range(10):
            _call(client)
        assert (len(first.peers), len(second.peers)) == (5, 5)  # in turn
        two.stop(None).wait()
        for _ in range(6):
            _call(client)  # GetSession is retried on the worker that is up
        assert (len(first.peers), len(second.peers)) == (11, 5)
        second = _Peers()  # type: ignore[abstract]
        two, _ = _stand_in(f"127.0.0.1:{two_port}", second)  # restarted, same address
        _until_called(client, second)  # gRPC reconnects by itself (backoff at most 2 s)
        before = len(first.peers), len(second.peers)
        for _ in range(10):
            _call(client)
        assert (len(first.peers) - before[0], len(second.peers) - before[1]) == (5, 5)
    finally:
        client.close()
        for grpc_server in (one, two, shared):
            grpc_server.stop(None)


def test_workers_that_do_not_answer_from_here_leave_the_calls_on_the_target(
    caplog: pytest.LogCaptureFixture,
) -> None:
    peers = _Peers()  # type: ignore[abstract]
    closed = _free_port()  # behind a NAT or a firewall, say: nothing answers there
    server, port = _stand_in("127.0.0.1:0", peers, f"127.0.0.1:{closed}")
    client = EngineClient(f"127.0.0.1:{port}", discover=True)
    try:
        with caplog.at_level(logging.WARNING, "web_facade.engine_client"):
            _call(client)
            deadline = time.monotonic() + WAIT
            while "do not answer from here" not in caplog.text:
                assert time.monotonic() < deadline, caplog.text
                time.sleep(0.05)
        assert client.workers == ()
        _call(client)
        assert len(peers.peers) == 2
    finally:
        client.close()
        server.stop(None)


def test_an_engine_that_lists_no_workers_is_asked_again_and_balanced_once_it_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(engine_client, "QUIET_INTERVAL", 0.1)  # 30 s
    peers, worker = _Peers(), _Peers()  # type: ignore[abstract]
    listing = _Listing("")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_AgentEngineServicer_to_server(peers, server)
    health_pb2_grpc.add_HealthServicer_to_server(listing, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    other, other_port = _stand_in("127.0.0.1:0", worker)
    client = EngineClient(f"127.0.0.1:{port}", discover=True)
    try:
        _call(client)
        deadline = time.monotonic() + WAIT
        while listing.asked < 2:  # listed none, then asked again
            assert time.monotonic() < deadline, f"asked {listing.asked} times"
            time.sleep(0.02)
        assert client.workers == () and len(peers.peers) == 1
        listing.listed = f"127.0.0.1:{other_port}"  # the engine became a set of workers
        assert _wait_for_workers(client) == (f"127.0.0.1:{other_port}",)
        _call(client)
        assert len(worker.peers) == 1 and len(peers.peers) == 1
    finally:
        client.close()
        server.stop(None)
        other.stop(None)


@pytest.mark.parametrize(
    ("target", "discovers"),
    [
        ("127.0.0.1:50051", True),
        ("localhost:50051", True),
        ("[::1]:50051", True),
        ("ipv4:127.0.0.1:1,127.0.0.1:2", False),  # names its engines itself
        ("dns:///engine:50051", False),
        ("unix:/run/agentik.sock", False),
    ],
)
def test_only_a_single_host_port_target_asks_for_workers(target: str, discovers: bool) -> None:
    assert EngineClient(target, discover=True).discover is discovers
    assert EngineClient(target).discover is False


def test_asyncio_streams_go_to_the_workers_too_and_follow_a_new_list() -> None:
    first, second, target_peers = _Peers(), _Peers(), _Peers()  # type: ignore[abstract]
    one, one_port = _stand_in("127.0.0.1:0", first)
    two, two_port = _stand_in("127.0.0.1:0", second)
    listing = _Listing(f"127.0.0.1:{one_port}")
    shared = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_AgentEngineServicer_to_server(target_peers, shared)
    health_pb2_grpc.add_HealthServicer_to_server(listing, shared)
    port = shared.add_insecure_port("127.0.0.1:0")
    shared.start()
    client = EngineClient(f"127.0.0.1:{port}", discover=True)

    async def get(stub: Any) -> grpc.StatusCode:  # an aio channel's stub
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GetSession(pb.GetSessionRequest(session_id="s"), timeout=WAIT)
        return caught.value.code()

    try:
        before = _wait_for_workers(client)
        assert aio_loop.run(get(client.aio_engine)) == grpc.StatusCode.NOT_FOUND
        assert (len(first.peers), len(second.peers), len(target_peers.peers)) == (1, 0, 0)
        listing.listed = f"127.0.0.1:{two_port}"  # the set restarted elsewhere
        _wait_for_workers(client, not_these=before)
        assert aio_loop.run(get(client.aio_engine)) == grpc.StatusCode.NOT_FOUND
        assert (len(first.peers), len(second.peers), len(target_peers.peers)) == (1, 1, 0)
    finally:
        client.close()
        for grpc_server in (one, two, shared):
            grpc_server.stop(None)
