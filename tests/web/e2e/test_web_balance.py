"""Connections spread over the web workers (``web_facade.conn_balance``), real processes.

A burst of kept-alive clients connects at once to two workers, under gunicorn's master
(``agentik web``) and under ``agentik serve``'s own (``web_facade.serve_web.WebWorkers``);
which worker holds each connection is read from ``/proc`` (the server side of each client's
TCP connection, by socket inode, among each worker's descriptors).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from tests.web.e2e.conftest import GUNICORN_LISTENING, ROOT, WAIT, Process, free_port, wait_for
from web_facade.conn_balance import FREE, Slots
from web_facade.serve_web import WebWorkers, bind

BURST = 40
LATE = 0.005
REQUEST = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _env(**extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "AGENTIK_HTTP_ADDR": "127.0.0.1:0",
        # Nothing listens here: /health answers 503 with the facade itself "ok".
        "AGENTIK_ENGINE_TARGET": f"127.0.0.1:{free_port()}",
        "AGENTIK_WEB_WORKERS": "2",
        "AGENTIK_WEB_THREADS": "4",
        **extra,
    }
    env.pop("AGENTIK_CONFIG", None)
    return env


def _children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(child) for child in text.split()]


def _tcp(port: int) -> tuple[int, dict[int, int]]:
    """The listening socket's inode on ``port``, and the inode of each connection accepted
    on it by the client's port (``/proc/net/tcp``)."""
    listening, accepted = 0, {}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, state, inode = fields[1], fields[2], fields[3], int(fields[9])
        if int(local.split(":")[1], 16) != port:
            continue
        if state == "0A":
            listening = inode
        elif inode:
            accepted[inode] = int(remote.split(":")[1], 16)
    return listening, accepted


def _sockets(pid: int) -> dict[int, int]:
    """Socket inode -> descriptor, for the sockets ``pid`` holds."""
    found = {}
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            found[int(link[8:-1])] = int(fd.name)
    return found


def _accepting(pid: int, port: int) -> bool:
    """Whether worker ``pid`` waits on the listening socket (its loop runs): the socket's
    descriptor is in its epoll set (``/proc/PID/fdinfo``)."""
    listening, _ = _tcp(port)
    fd = _sockets(pid).get(listening)
    if fd is None:
        return False
    for info in Path(f"/proc/{pid}/fdinfo").iterdir():
        try:
            text = info.read_text()
        except OSError:
            continue
        if any(line.split()[:2] == ["tfd:", str(fd)] for line in text.splitlines()):
            return True
    return False


def _held(workers: list[int], port: int, clients: list[socket.socket]) -> dict[int, int]:
    """How many of ``clients``' connections each worker holds."""
    _, accepted = _tcp(port)
    ports = {client.getsockname()[1] for client in clients}
    return {
        pid: sum(1 for inode in _sockets(pid) if accepted.get(inode) in ports) for pid in workers
    }


def _answer(client: socket.socket) -> bytes:
    """One whole answer (head and ``Content-Length`` body) read from ``client``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(65536)
        assert chunk, f"closed before an answer: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = client.recv(65536)
        assert chunk, "closed mid-answer"
        body += chunk
    return head


@contextmanager
def _burst(port: int, late: int = 0) -> Iterator[list[socket.socket]]:
    """:data:`BURST` clients connected at once, each asking ``/health`` with keep-alive and
    reading its answer; kept open. With ``late``, that worker is stopped (SIGSTOP) until
    :data:`LATE` seconds after the burst is sent: the other is the one awake, which takes
    them all unless it leaves the late one its share."""
    with ExitStack() as stack:
        if late:
            os.kill(late, signal.SIGSTOP)
            stack.callback(os.kill, late, signal.SIGCONT)
        clients = []
        for _ in range(BURST):
            client = stack.enter_context(socket.create_connection(("127.0.0.1", port), WAIT))
            clients.append(client)
        for client in clients:
            client.sendall(REQUEST)
        if late:
            time.sleep(LATE)
            os.kill(late, signal.SIGCONT)
        for client in clients:
            head = _answer(client)
            assert head.startswith(b"HTTP/1.1 503"), head
            assert b"connection: close" not in head.lower(), head
        yield clients


def _assert_spread(held: dict[int, int]) -> None:
    assert sum(held.values()) == BURST, held
    for count in held.values():
        assert BURST * 0.25 <= count <= BURST * 0.75, held


@pytest.mark.parametrize("late", [False, True], ids=["both-awake", "one-late"])
def test_web_spreads_a_burst_of_kept_alive_connections_over_its_two_workers(
    tmp_path: Path, late: bool
) -> None:
    web = Process("web", [sys.executable, "-m", "agentik.cli", "web"], _env(), tmp_path)
    try:
        port = int(web.wait_for_log(GUNICORN_LISTENING))
        master = web.popen.pid
        wait_for(lambda: len(_children(master)) == 2, "two workers")
        workers = _children(master)
        wait_for(lambda: all(_accepting(pid, port) for pid in workers), "both to accept")
        with _burst(port, workers[1] if late else 0) as clients:
            _assert_spread(_held(workers, port, clients))
    finally:
        code = web.stop()
    assert code == 0, web.log()
    assert "Traceback" not in web.log()


@contextmanager
def _serve_workers() -> Iterator[tuple[WebWorkers, int]]:
    """``agentik serve``'s two web workers (without its engine), accepting."""
    sock = bind("127.0.0.1:0")
    port = sock.getsockname()[1]
    said: list[str] = []
    workers = WebWorkers(sock, 2, _env(), stop_timeout=10.0, say=said.append)
    try:
        workers.start()
        pids = [worker.popen.pid for worker in workers.workers]
        wait_for(lambda: all(_accepting(pid, port) for pid in pids), "both workers to accept")
        yield workers, port
    finally:
        for worker in workers.workers:
            if worker.popen.poll() is None:
                os.kill(worker.popen.pid, signal.SIGCONT)
        clean = workers.stop()
        workers.close()
    assert clean, said


@pytest.mark.parametrize("late", [False, True], ids=["both-awake", "one-late"])
def test_serve_spreads_a_burst_of_kept_alive_connections_over_its_two_workers(
    late: bool,
) -> None:
    with _serve_workers() as (workers, port):
        assert workers.balance is not None
        pids = [worker.popen.pid for worker in workers.workers]
        with _burst(port, pids[1] if late else 0) as clients:
            _assert_spread(_held(pids, port, clients))


def _slot(workers: WebWorkers, pid: int) -> int:
    assert workers.balance is not None
    (age,) = [worker.age for worker in workers.workers if worker.popen.pid == pid]
    return workers.balance.owners.index(age)


def test_a_worker_whose_peer_is_marked_dead_accepts_every_connection() -> None:
    """The peer stopped (SIGSTOP) and its slot says -1, as after its death: the other
    worker takes the whole burst at once, with no pause."""
    with _serve_workers() as (workers, port):
        assert workers.balance is not None
        live, stuck = [worker.popen.pid for worker in workers.workers]
        os.kill(stuck, signal.SIGSTOP)
        workers.balance[_slot(workers, stuck)] = FREE
        started = time.monotonic()
        with _burst(port) as clients:
            assert _held([live, stuck], port, clients) == {live: BURST, stuck: 0}
        assert time.monotonic() - started < WAIT


def test_a_worker_whose_peer_is_stuck_still_accepts_every_connection() -> None:
    """The peer stopped (SIGSTOP) with its slot still saying a low count: the other worker
    pauses 1 ms after each accept past its share, but never stops accepting."""
    with _serve_workers() as (workers, port):
        assert workers.balance is not None
        live, stuck = [worker.popen.pid for worker in workers.workers]
        os.kill(stuck, signal.SIGSTOP)
        assert workers.balance[_slot(workers, stuck)] >= 0
        with _burst(port) as clients:
            assert _held([live, stuck], port, clients) == {live: BURST, stuck: 0}


def test_slots_count_only_the_other_live_workers_and_free_a_dead_ones() -> None:
    slots = Slots.memfd(3)
    try:
        assert [slots[i] for i in range(3)] == [FREE] * 3
        assert slots.least_other(0) is None
        assert slots.claim("a", []) == 0
        assert slots.claim("b", ["a"]) == 1
        slots[0], slots[1] = 7, 4
        assert slots.least_other(0) == 4
        assert slots.least_other(1) == 7
        slots.release("b")
        assert slots[1] == FREE
        assert slots.least_other(0) is None
        # "c" takes the free slot; a slot whose owner is gone (not live) is free too.
        assert slots.claim("c", ["a"]) == 1
        assert slots.claim("d", ["c"]) == 0
        copy = Slots.from_fd(os.dup(slots.fd))
        copy[2] = 5
        assert slots[2] == 5
        copy.close()
    finally:
        slots.close()


def test_serve_frees_a_dead_workers_slot_for_the_worker_that_replaces_it() -> None:
    with _serve_workers() as (workers, port):
        balance = workers.balance
        assert balance is not None
        dead, kept = [worker.popen.pid for worker in workers.workers]
        slot = _slot(workers, dead)
        os.kill(dead, signal.SIGKILL)

        def replaced() -> bool:
            assert workers.check(), workers.failed
            return dead not in [worker.popen.pid for worker in workers.workers]

        wait_for(replaced, "a new worker")
        pids = [worker.popen.pid for worker in workers.workers]
        assert len(pids) == 2 and kept in pids
        (new,) = set(pids) - {kept}
        assert _slot(workers, new) == slot
        wait_for(lambda: all(_accepting(pid, port) for pid in pids), "both workers to accept")
        with _burst(port, kept) as clients:
            _assert_spread(_held(pids, port, clients))
