"""``agentik engine --workers N``: refusals, the supervisor, and the shared port."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentik.config import ConfigError, EngineSettings, Settings
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from engine_service.build import build_engine
from engine_service.server import WORKER_METADATA, WORKERS_METADATA, EngineServer
from engine_service.workers import check_workers, private_addresses, redact_store
from tests.agentik.test_cli import ROOT, engine_env
from tests.engine.harness import WAIT, engine_settings

SHARED = "postgresql://agentik:s3cret@db:5432/agentik"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# --- refusals -----------------------------------------------------------------------


def _agentik(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentik.cli", *args],
        cwd=ROOT,
        env=engine_env(tmp_path, **env),
        capture_output=True,
        text=True,
        timeout=WAIT,
    )


def test_sqlite_with_two_workers_is_refused_at_start_naming_postgresql(tmp_path: Path) -> None:
    done = _agentik(tmp_path, "engine", "--workers", "2", AGENTIK_GRPC_ADDR="127.0.0.1:50999")
    assert done.returncode == 2
    assert (
        "SQLite serves one engine process; use PostgreSQL for several: "
        "AGENTIK_STORE=postgresql://..." in done.stderr
    )
    assert not (tmp_path / "engine.db").exists()  # refused before the store was opened


def test_the_memory_store_with_workers_from_the_environment_is_refused(tmp_path: Path) -> None:
    done = _agentik(tmp_path, "engine", AGENTIK_STORE="memory://", AGENTIK_ENGINE_WORKERS="3")
    assert done.returncode == 2
    assert "serves one engine process; use PostgreSQL for several" in done.stderr


def test_port_zero_with_two_workers_is_refused(tmp_path: Path) -> None:
    done = _agentik(tmp_path, "engine", "--workers", "2", AGENTIK_STORE=SHARED)
    assert done.returncode == 2
    assert "ephemeral port, which the workers could not share" in done.stderr


def test_a_python_tool_that_cannot_load_stops_the_supervisor_before_any_worker(
    tmp_path: Path,
) -> None:
    config = tmp_path / "agentik.toml"
    config.write_text('[[tools.python]]\nfunction = "no_such_module_here:tool"\n')
    done = _agentik(
        tmp_path,
        "--config",
        str(config),
        "engine",
        "--workers",
        "2",
        AGENTIK_STORE=SHARED,
        AGENTIK_GRPC_ADDR=f"127.0.0.1:{_free_port()}",
    )
    assert done.returncode == 2
    # Said once, by the supervisor, naming the entry (not by each worker it would start).
    assert done.stderr.count("cannot import 'no_such_module_here'") == 1, done.stderr
    assert "[[tools.python]] entry 1" in done.stderr
    assert "worker" not in done.stderr.lower()


@pytest.mark.parametrize("value", ["0", "-2", "many"])
def test_workers_must_be_a_positive_integer(tmp_path: Path, value: str) -> None:
    done = _agentik(tmp_path, "engine", "--workers", value)
    assert done.returncode == 2
    assert "--workers: must be a positive integer" in done.stderr


@pytest.mark.parametrize("store", [SHARED, "postgres://db/agentik", "POSTGRESQL://db/x"])
def test_a_shared_store_on_a_fixed_port_may_have_workers(store: str) -> None:
    check_workers(Settings(engine=EngineSettings(store=store, grpc_addr="0.0.0.0:50051")), 8)


@pytest.mark.parametrize("store", ["sqlite:///a.db", "memory://"])
def test_one_worker_is_fine_on_any_store_and_port(store: str) -> None:
    check_workers(Settings(engine=EngineSettings(store=store, grpc_addr="127.0.0.1:0")), 1)
    with pytest.raises(ConfigError, match="serves one engine process"):
        check_workers(Settings(engine=EngineSettings(store=store, grpc_addr="127.0.0.1:1234")), 2)


def test_the_store_password_is_kept_out_of_the_log() -> None:
    assert redact_store(SHARED) == "postgresql://agentik:***@db:5432/agentik"
    assert redact_store("postgresql://db/agentik") == "postgresql://db/agentik"
    assert redact_store("sqlite:///a.db") == "sqlite:///a.db"


# --- the supervisor, with tiny children ---------------------------------------------

CHILD = """
import os, signal, socket, sys
from agentik.parent_watch import stop_with_parent
stop_with_parent()
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
sock = socket.socket()
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
sock.bind(("127.0.0.1", {port}))
sock.listen()
os.write(1, f"{{os.getpid()}}\\n".encode())  # one write: the children share the pipe
while True:
    signal.pause()
"""

PARENT = """
import logging, sys
from agentik.config import EngineSettings, Settings
from engine_service.workers import run_workers
logging.basicConfig(level="INFO", format="%(message)s")
engine = EngineSettings(grpc_addr="127.0.0.1:{port}", store={store!r}, shutdown_grace=1.0)
settings = Settings(engine=engine)
sys.exit(run_workers(settings, 2, [sys.executable, "-c", {child!r}]))
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def _gone(pids: list[int]) -> None:
    deadline = time.monotonic() + WAIT
    while any(_alive(pid) for pid in pids):
        assert time.monotonic() < deadline, f"children still running: {pids}"
        time.sleep(0.05)


@pytest.fixture
def workers() -> Iterator[tuple[subprocess.Popen[str], list[int], int]]:
    """A ``run_workers`` parent with two children that share one port, and their pids."""
    port = _free_port()
    child = textwrap.dedent(CHILD).format(port=port)
    script = textwrap.dedent(PARENT).format(port=port, store=SHARED, child=child)
    parent = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    try:
        pids = [int(parent.stdout.readline()) for _ in range(2)]
        yield parent, pids, port
    finally:
        if parent.poll() is None:
            parent.kill()
        parent.communicate(timeout=WAIT)


def test_two_children_start_and_share_the_port_and_the_parent_logs_once(
    workers: tuple[subprocess.Popen[str], list[int], int],
) -> None:
    parent, pids, port = workers
    assert len(set(pids)) == 2 and all(_alive(pid) for pid in pids)
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT):
        pass
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(WAIT) == 0
    log = parent.stderr.read() if parent.stderr else ""
    assert log.count("starting 2 engine workers on 127.0.0.1:") == 1, log
    assert "postgresql://agentik:***@db:5432/agentik" in log and "s3cret" not in log


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_parent_stops_every_child_and_the_parent_exits_0(
    workers: tuple[subprocess.Popen[str], list[int], int], sig: int
) -> None:
    parent, pids, _ = workers
    parent.send_signal(sig)
    assert parent.wait(WAIT) == 0
    _gone(pids)


def test_a_child_that_dies_stops_the_others_and_the_parent_exits_non_zero(
    workers: tuple[subprocess.Popen[str], list[int], int],
) -> None:
    parent, pids, _ = workers
    os.kill(pids[0], signal.SIGKILL)
    assert parent.wait(WAIT) == 1
    _gone(pids)


def test_children_stop_when_the_parent_is_killed(
    workers: tuple[subprocess.Popen[str], list[int], int],
) -> None:
    parent, pids, _ = workers
    parent.kill()
    parent.wait(WAIT)
    _gone(pids)


# --- the engine's SO_REUSEPORT --------------------------------------------------------


async def test_worker_engines_share_a_port_and_a_single_engine_keeps_it_to_itself() -> None:
    settings = engine_settings(AGENTIK_GRPC_ADDR=f"127.0.0.1:{_free_port()}")
    first = EngineServer(build_engine(settings), settings, reuse_port=True)
    second = EngineServer(build_engine(settings), settings, reuse_port=True)
    alone = EngineServer(build_engine(settings), settings)
    try:
        assert await first.start() == await second.start()
        with pytest.raises((OSError, RuntimeError)):
            await alone.start()
    finally:
        await first.stop()
        await second.stop()
        await alone.engine.store.close()


# --- each worker's own address --------------------------------------------------------

ARGV_CHILD = """
import json, os, signal, sys
from agentik.parent_watch import stop_with_parent
stop_with_parent()
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
os.write(1, (json.dumps(sys.argv[1:]) + "\\n").encode())
while True:
    signal.pause()
"""


def test_each_child_is_told_every_worker_s_own_address_and_which_is_its_own() -> None:
    port = _free_port()
    script = textwrap.dedent(PARENT).format(
        port=port, store=SHARED, child=textwrap.dedent(ARGV_CHILD)
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    try:
        told = sorted(json.loads(parent.stdout.readline()) for _ in range(2))
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(WAIT) == 0
    finally:
        if parent.poll() is None:
            parent.kill()
        _, log = parent.communicate(timeout=WAIT)
    (flag, listed, index_flag, first), (_, listed_too, _, second) = told
    assert (flag, index_flag, listed == listed_too) == ("--worker-addrs", "--worker-index", True)
    assert (first, second) == ("0", "1")
    addrs = listed.split(",")
    assert len(set(addrs)) == 2 and all(a.startswith("127.0.0.1:") for a in addrs)
    assert f":{port}" not in listed  # not the shared port
    assert f"each also on its own address ({', '.join(addrs)})" in log


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0", "localhost", "[::1]"])
def test_private_addresses_are_distinct_ports_held_for_the_workers_alone(host: str) -> None:
    bare = host.strip("[]")
    family = socket.AF_INET6 if ":" in bare else socket.AF_INET
    with private_addresses(f"{host}:50051", 3) as addrs:
        assert len(set(addrs)) == 3
        for addr in addrs:
            bound, _, port = addr.rpartition(":")
            assert bound == host and port != "50051"
            with socket.socket(family) as other, pytest.raises(OSError) as taken:
                other.bind((bare, int(port)))  # another process: refused while held
            assert taken.value.errno == errno.EADDRINUSE
            with socket.socket(family) as worker:  # the worker, as its gRPC server binds
                worker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                worker.bind((bare, int(port)))
                worker.listen()
    for addr in addrs:
        with socket.socket(family) as sock:
            sock.bind((bare, int(addr.rpartition(":")[2])))  # released after the block


def test_the_shared_port_is_never_a_workers_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shared address is not bound yet when the workers' own ports are found: the
    system may hand its port out then (here it does, first), and it is passed over."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        public = int(free.getsockname()[1])
    real = socket.socket
    handed: list[int] = []

    class FirstGetsThePublicPort(real):  # type: ignore[valid-type, misc]
        def bind(self, address: tuple[str, int]) -> None:
            if address[1] == 0 and not handed:
                handed.append(public)
                address = (address[0], public)
            super().bind(address)

    monkeypatch.setattr(socket, "socket", FirstGetsThePublicPort)
    with private_addresses(f"127.0.0.1:{public}", 3) as addrs:
        ports = [int(addr.rpartition(":")[2]) for addr in addrs]
    assert handed == [public]
    assert len(set(ports)) == 3 and public not in ports


OWN_CHILD = """
import os, signal, socket, sys
from agentik.parent_watch import stop_with_parent
stop_with_parent()
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
own = sys.argv[2].split(",")[int(sys.argv[4])]  # --worker-addrs A,B --worker-index I
sock = socket.socket()
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
sock.bind(("127.0.0.1", int(own.rpartition(":")[2])))
sock.listen()
os.write(1, f"{own}\\n".encode())
while True:
    signal.pause()
"""

INTRUDER = """
import errno, socket, sys
import engine_service.workers as workers
supervise = workers.supervise


def intrude(commands, *args, **kwargs):
    # Another process on the host, between the parent's choice of ports and the workers'
    # binds: it takes each worker's port if it can.
    taken = []
    for addr in commands[0][commands[0].index("--worker-addrs") + 1].split(","):
        sock = socket.socket()
        try:
            sock.bind(("127.0.0.1", int(addr.rpartition(":")[2])))
            sock.listen()
            taken.append(sock)
            print("intruder took", addr, file=sys.stderr, flush=True)
        except OSError as exc:
            assert exc.errno == errno.EADDRINUSE, exc
            print("intruder refused", addr, file=sys.stderr, flush=True)
    return supervise(commands, *args, **kwargs)


workers.supervise = intrude
"""


def test_a_port_taken_between_the_choice_and_the_workers_bind_cannot_be() -> None:
    """The race of ``agentik engine --workers N``: the parent picks each worker's own port,
    another process binds it before the worker does, the worker fails to bind and the set
    exits 1. The parent now holds the ports until the workers have them."""
    port = _free_port()
    child = textwrap.dedent(OWN_CHILD)
    script = textwrap.dedent(INTRUDER) + textwrap.dedent(PARENT).format(
        port=port, store=SHARED, child=child
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    try:
        listening = sorted(parent.stdout.readline().strip() for _ in range(2))
        if all(listening):  # else a worker could not bind its port and the set stopped
            for addr in listening:  # each worker serves its own port
                host, _, own = addr.rpartition(":")
                socket.create_connection((host, int(own)), timeout=WAIT).close()
            parent.send_signal(signal.SIGTERM)
        code = parent.wait(WAIT)
    finally:
        if parent.poll() is None:
            parent.kill()
        _, log = parent.communicate(timeout=WAIT)
    assert "intruder took" not in log, log
    assert all(listening) and code == 0, log
    assert sorted(line.split()[-1] for line in log.splitlines() if "refused" in line) == listening


async def test_a_worker_serves_on_its_own_address_too_and_lists_every_worker_in_health() -> None:
    shared = f"127.0.0.1:{_free_port()}"
    with private_addresses(shared, 2) as own:  # held, as by the parent: the worker binds
        settings = engine_settings(AGENTIK_GRPC_ADDR=shared)
        worker = EngineServer(
            build_engine(settings), settings, reuse_port=True, own_addr=own[0], workers=tuple(own)
        )
        await worker.start()
    try:
        for addr in (shared, own[0]):
            async with grpc.aio.insecure_channel(addr) as channel:
                agents = await pb_grpc.AgentEngineStub(channel).ListAgents(
                    pb.ListAgentsRequest(), timeout=WAIT
                )
                assert agents.agents, addr
                health: Any = health_pb2_grpc.HealthStub(channel)
                call = health.Check(health_pb2.HealthCheckRequest(), timeout=WAIT)
                await call
                said = dict(await call.initial_metadata())
                assert said[WORKERS_METADATA] == ",".join(own), addr
                assert said[WORKER_METADATA] == own[0], addr  # which one answered
    finally:
        await worker.stop()


async def test_a_single_engine_lists_no_workers() -> None:
    settings = engine_settings(AGENTIK_GRPC_ADDR="127.0.0.1:0")
    alone = EngineServer(build_engine(settings), settings)
    port = await alone.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            health: Any = health_pb2_grpc.HealthStub(channel)
            call = health.Check(health_pb2.HealthCheckRequest(), timeout=WAIT)
            await call
            said = dict(await call.initial_metadata())
            assert WORKERS_METADATA not in said and WORKER_METADATA not in said
    finally:
        await alone.stop()
