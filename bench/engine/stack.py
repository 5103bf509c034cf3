"""The processes an engine bench runs against (the fake LLM and the engine), and the raw
HTTP client of the direct baseline."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any
from urllib.parse import urlsplit

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.engine.measure import (
    ROOT,
    WAIT,
    Cpu,
    Sample,
    cpu_seconds,
    free_port,
    machine_busy_seconds,
)

# -- the processes ----------------------------------------------------------------------


class Stack:
    """The fake LLM and the engine, each its own process, on free ports."""

    def __init__(self, store: str, backlog: int, store_url: str = "") -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        for name in ("AGENTIK_CONFIG", "AGENTIK_SYSTEM_PROMPT", "AGENTIK_MODEL"):
            env.pop(name, None)
        self._tmp = tempfile.TemporaryDirectory(prefix="agentik-bench-")
        sqlite_url = f"sqlite:///{self._tmp.name}/bench.db"
        store_url = store_url or (sqlite_url if store == "sqlite" else "memory://")
        self.store = store_url
        # The fake's ThreadingHTTPServer listens with socketserver's backlog of 5: a burst of
        # new connections (256 runs starting at once) overflows it and the kernel drops
        # SYNs, which the client retries after 1 s. That is the fake's limit, not the
        # engine's, so the bench raises it unless told otherwise (--fake-backlog 0).
        boot = (
            "import sys; from tests.fakes import fake_openai as f; "
            f"f._Server.request_queue_size = {backlog} or f._Server.request_queue_size; "
            "f.main(sys.argv[1:])"
        )
        self.fake = subprocess.Popen(
            [sys.executable, "-c", boot, "--port", "0"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.fake.stdout is not None
        self.llm_url = self.fake.stdout.readline().strip()
        if not self.llm_url:
            self.stop()
            raise RuntimeError("the fake LLM did not print its base URL")
        self.target = f"127.0.0.1:{free_port()}"
        env.update(
            AGENTIK_GRPC_ADDR=self.target,
            AGENTIK_STORE=store_url,
            OPENAI_BASE_URL=self.llm_url,
            OPENAI_API_KEY="bench",
            AGENTIK_LOG_LEVEL="WARNING",
            AGENTIK_MAX_CONCURRENT_RUNS="1024",
        )
        self.engine = subprocess.Popen([sys.executable, "-m", "engine_service"], cwd=ROOT, env=env)

    async def wait_serving(self, channel: grpc.aio.Channel) -> None:
        health: Any = health_pb2_grpc.HealthStub(channel)  # the module ships no stubs
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            for process in (self.fake, self.engine):
                if process.poll() is not None:
                    raise RuntimeError(f"{process.args!r} exited with {process.returncode}")
            with contextlib.suppress(grpc.aio.AioRpcError):
                reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            await asyncio.sleep(0.05)
        raise RuntimeError("the engine did not become SERVING")

    def cpu(self) -> Cpu:
        return Cpu(
            cpu_seconds(self.engine.pid),
            cpu_seconds(self.fake.pid),
            client_cpu(),
            machine_busy_seconds(),
        )

    def stop(self) -> None:
        for process, sig in ((self.engine, signal.SIGTERM), (self.fake, signal.SIGINT)):
            if process.poll() is None:
                process.send_signal(sig)
        for process in (self.engine, self.fake):
            try:
                process.wait(WAIT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._tmp.cleanup()


def client_cpu() -> float:
    times = os.times()
    return times.user + times.system


# -- the direct baseline: a raw streaming HTTP/1.1 client --------------------------------


class DirectClient:
    """One keep-alive connection to the fake LLM; reads its SSE stream chunk by chunk."""

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.path = parts.path.rstrip("/") + "/chat/completions"
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def stream(self, text: str) -> Sample:
        body = json.dumps(
            {
                "model": "bench",
                "stream": True,
                "stream_options": {"include_usage": True},
                "messages": [{"role": "user", "content": text}],
            }
        ).encode()
        head = (
            f"POST {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Content-Type: application/json\r\nAuthorization: Bearer bench\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        sample = Sample()
        start = time.perf_counter()
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
            self._writer.transport.get_extra_info("socket").setsockopt(
                socket.IPPROTO_TCP, socket.TCP_NODELAY, 1
            )
        reader, writer = self._reader, self._writer
        assert reader is not None
        writer.write(head + body)
        headers = await reader.readuntil(b"\r\n\r\n")
        if not headers.startswith(b"HTTP/1.1 200"):
            self.close()
            status = headers.split(b"\r\n", 1)[0].decode(errors="replace")
            raise RuntimeError(f"the fake LLM answered {status}")
        sample.first_event = time.perf_counter() - start
        while True:
            size = int((await reader.readline()).strip(), 16)
            if size == 0:
                await reader.readexactly(2)
                break
            chunk = await reader.readexactly(size + 2)
            sample.events += 1
            if b'"content": "' in chunk and b'"content": ""' not in chunk:
                sample.tokens += 1
                if not sample.first_token:
                    sample.first_token = time.perf_counter() - start
        sample.total = time.perf_counter() - start
        return sample
