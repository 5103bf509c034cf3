"""The processes of the whole stack: the engine, gunicorn (the fake LLM is the caller's),
each a child process logging to a file. The end-to-end tests use it through their conftest,
and the benches import it here (never a conftest)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from agentik.parent_watch import env_for_child
from tests.fakes.fake_openai import FakeOpenAI

ENGINE_LISTENING = re.compile(r"engine listening on 127\.0\.0\.1:(\d+)")
GUNICORN_LISTENING = re.compile(r"Listening at: http://127\.0\.0\.1:(\d+)")
WAIT = 15.0
"""Upper bound for every wait in these tests, in seconds."""
STARTUP = 60.0
"""Upper bound for a process to come up: interpreter start is slow on a busy host."""
ROOT = Path(__file__).resolve().parents[1]


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
