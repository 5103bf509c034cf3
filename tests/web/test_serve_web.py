"""``web_facade.serve_web``: the facade's workers under ``agentik serve``, without gunicorn's
master. Workers here are small scripts standing in for the real one (which
``tests/web/e2e/test_cli.py`` runs under ``agentik serve``): how the parent restarts, kills,
stops and gives up on them."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from web_facade.serve_web import (
    HEARTBEAT_ENV,
    SOCKET_ENV,
    WebWorkers,
    bind,
    too_many_restarts,
    url_of,
)

ROOT = Path(__file__).resolve().parents[2]
WAIT = 30.0


def _fake_python(tmp_path: Path, body: str) -> str:
    """An executable that takes the worker's command line and runs ``body`` (sh)."""
    path = tmp_path / "python"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.fixture
def said() -> list[str]:
    return []


@pytest.fixture
def sock() -> Iterator[socket.socket]:
    listening = bind("127.0.0.1:0")
    yield listening
    listening.close()


def _workers(sock: socket.socket, python: str, said: list[str], count: int = 1) -> WebWorkers:
    return WebWorkers(
        sock, count, dict(os.environ), stop_timeout=5.0, say=said.append, python=python
    )


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_bind_listens_on_a_free_port_and_names_it() -> None:
    sock = bind("127.0.0.1:0")
    try:
        port = sock.getsockname()[1]
        assert port > 0
        assert url_of(sock) == f"http://127.0.0.1:{port}"
        assert sock.get_inheritable()
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    finally:
        sock.close()


def test_a_worker_started_by_hand_refuses() -> None:
    env = {k: v for k, v in os.environ.items() if k not in (SOCKET_ENV, HEARTBEAT_ENV)}
    done = subprocess.run(
        [sys.executable, "-m", "web_facade.serve_web"],
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert done.returncode == 2
    assert "started by `agentik serve`" in done.stderr


def test_a_worker_that_dies_is_replaced_and_its_listening_line_is_said(
    tmp_path: Path, sock: socket.socket, said: list[str]
) -> None:
    workers = _workers(sock, _fake_python(tmp_path, "exec sleep 60"), said, count=2)
    try:
        workers.start()
        assert said[0] == f"Listening at: {url_of(sock)} ({os.getpid()})"
        first = [w.popen.pid for w in workers.workers]
        os.kill(first[0], signal.SIGKILL)
        _until(
            lambda: workers.check() and first[0] not in [w.popen.pid for w in workers.workers],
            "a new worker",
        )
        now = [w.popen.pid for w in workers.workers]
        assert len(now) == 2 and first[1] in now
        assert f"agentik: web worker {first[0]} died (signal 9); starting another" in said
        assert workers.stop()  # sleep ends on SIGTERM: -SIGTERM is clean
    finally:
        workers.close()
    assert not os.path.exists(workers.metrics_dir)


@pytest.mark.parametrize("code", [3, 4])
def test_a_worker_that_cannot_boot_stops_the_web(
    tmp_path: Path, sock: socket.socket, said: list[str], code: int
) -> None:
    workers = _workers(sock, _fake_python(tmp_path, f"exit {code}"), said)
    try:
        workers.start()
        _until(lambda: not workers.check(), "the web to give up")
        assert workers.failed == f"a web worker failed to start (exit code {code})"
        assert not workers.workers  # not restarted
        assert workers.stop()
        assert said[-1] == f"agentik: stopping: {workers.failed}"
    finally:
        workers.close()


def test_a_worker_that_dies_after_booting_every_time_stops_the_web_past_the_limit(
    tmp_path: Path, sock: socket.socket, said: list[str]
) -> None:
    """A crash loop: each worker boots (it is not gunicorn's boot-failure code) and dies.
    ``max_restarts`` of them are replaced; the next death stops the web, saying why."""
    workers = _workers(sock, _fake_python(tmp_path, "exit 1"), said)
    workers.max_restarts = 2
    try:
        workers.start()
        _until(lambda: not workers.check(), "the web to give up")
        assert not workers.workers  # the third is not restarted
        assert sum(line.endswith("(exit code 1); starting another") for line in said) == 2
        assert workers.failed == (
            "web workers died 3 times within 60s, more than [web] worker_restarts_per_minute "
            "= 2 (AGENTIK_WEB_WORKER_RESTARTS_PER_MINUTE) allows: a crash loop (see the "
            "worker's error above); not restarting them"
        )
        assert workers.stop()
        assert said[-1] == f"agentik: stopping: {workers.failed}"
    finally:
        workers.close()


def test_restarts_are_counted_over_the_last_60_seconds_only() -> None:
    restarts: deque[float] = deque()
    assert too_many_restarts(restarts, 2, 100.0) == ""
    assert too_many_restarts(restarts, 2, 130.0) == ""
    assert "died 3 times within 60s" in too_many_restarts(restarts, 2, 159.9)
    assert list(restarts) == [100.0, 130.0]  # a refused restart is not one
    assert too_many_restarts(restarts, 2, 160.0) == ""  # the one at 100 s is out of the window
    assert list(restarts) == [130.0, 160.0]


def test_a_worker_silent_past_the_timeout_gets_sigabrt_then_sigkill(
    tmp_path: Path, sock: socket.socket, said: list[str]
) -> None:
    # The stand-in ignores SIGABRT, as a worker stuck in C code would not get to it.
    ready = tmp_path / "ready"
    python = _fake_python(tmp_path, f"trap '' ABRT; touch {ready}; while :; do sleep 0.1; done")
    workers = _workers(sock, python, said)
    workers.timeout = 1.0
    try:
        workers.start()
        _until(ready.exists, "the trap to be set")
        worker = workers.workers[0]
        assert workers.check()  # never touched: a booting worker is not timed out
        assert not worker.aborted
        long_ago = time.monotonic() - 10
        os.utime(worker.heartbeat, (long_ago, long_ago))  # its last touch, 10 s ago
        assert workers.check()
        assert worker.aborted
        assert worker.popen.poll() is None  # SIGABRT ignored
        workers.check()
        assert worker.popen.wait(WAIT) == -signal.SIGKILL
        _until(lambda: workers.check() and workers.workers[0] is not worker, "a replacement")
        assert any("timed out" in line for line in said)
    finally:
        workers.stop()
        workers.close()


def test_stop_kills_a_worker_that_ignores_sigterm_and_says_so_in_the_result(
    tmp_path: Path, sock: socket.socket, said: list[str]
) -> None:
    ready = tmp_path / "ready"
    python = _fake_python(tmp_path, f"trap '' TERM; touch {ready}; while :; do sleep 0.1; done")
    workers = _workers(sock, python, said)
    workers.stop_timeout = 0.5
    workers.stopping = "going down"
    try:
        workers.start()
        _until(ready.exists, "the trap to be set")
        assert not workers.stop()
        assert workers.workers[0].popen.returncode == -signal.SIGKILL
        assert said[-1] == "going down"
    finally:
        workers.close()


def test_the_workers_take_the_metrics_directory_serve_made(tmp_path: Path) -> None:
    """Under ``agentik serve`` every worker writes its metrics where the serve process said
    (one directory, so ``GET /metrics`` sums them all), rather than in one of its own."""
    probe = (
        "import os, web_facade.gunicorn_conf as c\n"
        "print(os.environ['PROMETHEUS_MULTIPROC_DIR'], c._metrics_dir,"
        " 'AGENTIK_SERVE_METRICS_DIR' in os.environ)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "AGENTIK_CONFIG"}
    env.update(
        PYTHONPATH=str(ROOT),
        AGENTIK_HTTP_ADDR="127.0.0.1:0",
        AGENTIK_SERVE_METRICS_DIR=str(tmp_path),
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=WAIT
    )
    assert done.stdout.split() == [str(tmp_path), str(tmp_path), "False"], done.stderr
