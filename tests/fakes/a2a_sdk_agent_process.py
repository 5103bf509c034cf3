"""``SdkAgent``: runs ``tests.fakes.a2a_sdk_agent`` as a subprocess for the length of a test.

::

    with SdkAgent(token="t") as agent:
        ...  # an A2A client on agent.url; agent.cancelled(), .contexts(), .requests()
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any, NoReturn, Self, TypedDict, cast

import httpx

__all__ = ["A2ARequest", "SdkAgent"]

_REPO_ROOT = Path(__file__).resolve().parents[2]
_READY = "ready "


class A2ARequest(TypedDict):
    """One A2A call as the fake recorded it."""

    authorization: str | None
    path: str


class SdkAgent:
    """The a2a-sdk test agent in its own process; a context manager (started on enter)."""

    def __init__(
        self,
        *,
        streaming: bool = True,
        token: str | None = None,
        ready_timeout: float = 30.0,
    ) -> None:
        self.streaming = streaming
        self.token = token
        self._ready_timeout = ready_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._url: str | None = None

    @property
    def url(self) -> str:
        """The base URL, ``http://127.0.0.1:PORT`` (the card's JSON-RPC interface too)."""
        if self._url is None:
            raise RuntimeError("the sdk agent is not running")
        return self._url

    def start(self) -> None:
        """Start the process and wait for its ``ready`` line."""
        if self._process is not None:
            raise RuntimeError("the sdk agent is already running")
        command = [sys.executable, "-m", "tests.fakes.a2a_sdk_agent", "--port", "0"]
        if not self.streaming:
            command.append("--no-streaming")
        if self.token is not None:
            command += ["--token", self.token]
        # Read only when start fails; closed by stop(), so no context manager here.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        self._process = subprocess.Popen(
            command,
            cwd=_REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            bufsize=0,
        )
        try:
            self._url = self._read_ready_line()
        except BaseException:
            self.stop()
            raise

    def _read_ready_line(self) -> str:
        process = self._process
        assert process is not None and process.stdout is not None
        deadline = time.monotonic() + self._ready_timeout
        received = b""
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            while b"\n" not in received:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._fail(f"not ready after {self._ready_timeout} s")
                if not selector.select(remaining):
                    continue
                chunk = os.read(process.stdout.fileno(), 4096)
                if not chunk:
                    process.wait(timeout=5)
                    self._fail(f"exited with code {process.returncode} before it was ready")
                received += chunk
        line = received.split(b"\n", 1)[0].decode()
        if not line.startswith(_READY):
            self._fail(f"printed {line!r} instead of the ready line")
        return line.removeprefix(_READY).strip()

    def _fail(self, why: str) -> NoReturn:
        raise RuntimeError(f"sdk agent {why}; stderr:\n{self._stderr_text()}")

    def _stderr_text(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def stop(self) -> None:
        """Terminate the process (kill it after 5 s) and close its pipes. Safe to repeat."""
        process, self._process, self._url = self._process, None, None
        if process is not None:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            if process.stdout is not None:
                process.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def _get(self, name: str) -> Any:
        response = httpx.get(f"{self.url}/test/{name}", timeout=10)
        response.raise_for_status()
        return response.json()

    def cancelled(self) -> list[str]:
        """Ids of the tasks the agent's executor was asked to cancel, in order."""
        return cast(list[str], self._get("cancelled"))

    def contexts(self) -> dict[str, list[str]]:
        """The texts received per context id, in order."""
        return cast(dict[str, list[str]], self._get("contexts"))

    def requests(self) -> list[A2ARequest]:
        """Every A2A call received (not the card or these test endpoints), in order."""
        return cast(list[A2ARequest], self._get("requests"))

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
