"""The whole stack for end-to-end tests: the fake LLM, the engine process, gunicorn."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentik.parent_watch import env_for_child
from tests.fakes.fake_openai import FakeOpenAI
from tests.web.openapi_check import assert_event_conforms, assert_response_conforms
from tests.web.sse_frames import Frame, SseParser

ENGINE_LISTENING = re.compile(r"engine listening on 127\.0\.0\.1:(\d+)")
GUNICORN_LISTENING = re.compile(r"Listening at: http://127\.0\.0\.1:(\d+)")
WAIT = 15.0
"""Upper bound for every wait in these tests, in seconds."""
STARTUP = 60.0
"""Upper bound for a process to come up: interpreter start is slow on a busy host."""
ROOT = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def wait_for(condition: Callable[[], bool], what: str, within: float = WAIT) -> None:
    """Poll ``condition`` until it holds; fail after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


class Process:
    """A child process whose output goes to a log file, stopped by its own pid."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], logs: Path) -> None:
        self.name = name
        self.log_path = logs / f"{name}.log"
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._log = self.log_path.open("ab")
        self.popen = subprocess.Popen(
            argv, env=env_for_child(env), cwd=ROOT, stdout=self._log, stderr=self._log
        )

    @property
    def stopped(self) -> bool:
        return self._log.closed

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
        try:
            code = self.popen.wait(WAIT)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            code = self.popen.wait(WAIT)
            raise AssertionError(f"{self.name} did not stop on signal {sig}") from None
        finally:
            self._log.close()
        return code

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, pattern: re.Pattern[str]) -> str:
        """The first group of ``pattern`` once it appears in this run's log."""
        start = self._log_start
        found: list[str] = []

        def seen() -> bool:
            assert self.popen.poll() is None, f"{self.name} exited:\n{self.log()}"
            match = pattern.search(self.log_path.read_bytes()[start:].decode(errors="replace"))
            if match:
                found.append(match.group(1))
            return bool(match)

        wait_for(seen, f"{self.name} to log {pattern.pattern!r}", within=STARTUP)
        return found[0]


class Stack:
    """Engine and facade processes on free ports; the facade can be restarted."""

    def __init__(self, llm: FakeOpenAI, logs: Path, **env: str) -> None:
        self.logs = logs
        # The facade keeps one port across restarts (clients and the A2A card name it); the
        # engine binds port 0 and the facade learns the port from the engine's log.
        self.http_port = free_port()
        self.base_url = f"http://127.0.0.1:{self.http_port}"
        self.env = {
            **{k: v for k, v in os.environ.items() if k != "AGENTIK_CONFIG"},
            "PYTHONPATH": str(ROOT),
            "AGENTIK_GRPC_ADDR": "127.0.0.1:0",
            "AGENTIK_HTTP_ADDR": f"127.0.0.1:{self.http_port}",
            "AGENTIK_STORE": "memory://",
            "OPENAI_BASE_URL": llm.base_url,
            "OPENAI_API_KEY": "test-key",
            "AGENTIK_LLM_MAX_RETRIES": "0",
            "AGENTIK_WEB_WORKERS": "2",
            "AGENTIK_WEB_THREADS": "16",
            "AGENTIK_HEARTBEAT": "0.5",
            "AGENTIK_MAX_BODY_BYTES": "65536",
            "AGENTIK_SHUTDOWN_GRACE": "2",
            "AGENTIK_LOG_LEVEL": "INFO",
            **env,
        }
        self.engine = Process("engine", [sys.executable, "-m", "engine_service"], self.env, logs)
        try:
            self.grpc_port = int(self.engine.wait_for_log(ENGINE_LISTENING))
            self.env["AGENTIK_ENGINE_TARGET"] = f"127.0.0.1:{self.grpc_port}"
            self.web = self.start_web()
        except BaseException:
            self.stop()
            raise

    def start_web(self) -> Process:
        """Start a facade process on ``http_port`` and wait until it serves."""
        argv = [sys.executable, "-m", "agentik.cli", "web"]
        self.web = Process("web", argv, self.env, self.logs)
        # Our gunicorn must be the one listening: a port taken meanwhile by another
        # process would otherwise answer the health check.
        assert int(self.web.wait_for_log(GUNICORN_LISTENING)) == self.http_port
        self.wait_healthy()
        return self.web

    def wait_healthy(self) -> None:
        def healthy() -> bool:
            try:
                return httpx.get(f"{self.base_url}/health", timeout=2.0).status_code == 200
            except httpx.TransportError:
                assert self.web.popen.poll() is None, self.web.log()
                assert self.engine.popen.poll() is None, self.engine.log()
                return False

        wait_for(healthy, "the stack to be healthy", within=STARTUP)

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=httpx.Timeout(WAIT))

    def stop(self) -> None:
        """Stop both processes (each is stopped even if the other one misbehaves)."""
        failures = []
        for process in (getattr(self, "web", None), self.engine):
            if process is not None and not process.stopped:
                try:
                    process.stop()
                except AssertionError as exc:
                    failures.append(str(exc))
        assert not failures, failures


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture(scope="module")
def stack(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = Stack(llm, tmp_path_factory.mktemp("stack"))
    yield running
    running.stop()


@pytest.fixture
def http(stack: Stack) -> Iterator[httpx.Client]:
    with stack.client() as client:
        yield client


def checked(response: httpx.Response) -> httpx.Response:
    """Hold a non-streamed response against the OpenAPI document, then return it."""
    assert_response_conforms(
        response.request.method,
        response.request.url.path,
        response.status_code,
        response.headers.get("content-type", ""),
        response.content,
    )
    return response


class SseStream:
    """An SSE response read with a real streaming client; reads are bounded."""

    def __init__(self, client: httpx.Client, method: str, path: str, **kwargs: Any) -> None:
        self._context = client.stream(method, path, **kwargs)
        self.response = self._context.__enter__()
        assert self.response.status_code == 200, self.response.read()
        assert self.response.headers["content-type"].startswith("text/event-stream")
        self._chunks = self.response.iter_raw()
        self._parser = SseParser()
        self.frames: list[Frame] = []

    @property
    def events(self) -> list[Frame]:
        return [f for f in self.frames if f.data is not None]

    def _pull(self) -> bool:
        try:
            chunk = next(self._chunks)
        except StopIteration:
            return False
        for frame in self._parser.feed(chunk):
            if frame.data is not None:
                assert_event_conforms(frame.data)
            self.frames.append(frame)
        return True

    def read_until(self, done: Callable[[list[Frame]], bool], within: float = WAIT) -> list[Frame]:
        deadline = time.monotonic() + within
        while not done(self.events):
            assert time.monotonic() < deadline, f"timed out; got {[f.type for f in self.events]}"
            assert self._pull(), f"stream ended; got {[f.type for f in self.events]}"
        return self.events

    def read_to_end(self, within: float = WAIT) -> list[Frame]:
        deadline = time.monotonic() + within
        while self._pull():
            assert time.monotonic() < deadline, "the stream did not end in time"
        assert self._parser.pending == b"", "the stream ended mid-frame"
        return self.events

    def close(self) -> None:
        self._context.__exit__(None, None, None)


def has(name: str) -> Callable[[list[Frame]], bool]:
    return lambda frames: any(f.type == name for f in frames)


def types(frames: list[Frame]) -> list[str | None]:
    return [f.type for f in frames]
