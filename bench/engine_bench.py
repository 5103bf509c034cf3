"""The engine over gRPC against the fake LLM: latency, throughput, CPU, interrupts, memory.

The fake OpenAI server and the engine run as separate processes (started here, on free
ports), so each one's CPU time can be read from ``/proc/<pid>/stat`` (utime + stime)
before and after a phase, and its memory from ``/proc/<pid>/status``. The bench client
is this process: one asyncio loop, one ``grpc.aio`` channel, and a minimal raw HTTP/1.1
client for the direct baseline.

Phases, in order:

* **direct**: streams read straight from the fake LLM with a raw keep-alive HTTP/1.1
  client (no SDK), at each concurrency level: time to the first text chunk, chunks/s.
  The floor everything else is compared with.
* **engine**: ``Run`` over gRPC, each run on a new session, at each concurrency level
  (closed loop: N workers, each starting its next run when its last one ended): time to
  the first event (RUN_STARTED) and to the first TEXT_MESSAGE_CONTENT, the latter's
  overhead over the direct time to first token, events/s, engine CPU ms per event and
  per run. The engine stamps every event with ``time.time()`` on this same host, so the
  time to first token is also split into "stamped by the engine" and "received".
* **short turns**: many clients doing short turns: runs/s and engine CPU per run. With
  the long runs at the same concurrency it gives the *marginal* engine CPU per streamed
  event (the per-run fixed cost taken out).
* **slow streams**: many concurrent streams whose chunks come slowly (``[[slow:S]]``),
  direct and through the engine, started all at once (burst) and staggered over a ramp
  (steady traffic): p50/p99 time to first token.
* **interrupt**: a run on a ``[[hang]]`` stream; once its first text arrived, Interrupt is
  sent; measured until RUN_FINISHED (cancelled) arrived and until the stream ended; then
  again while other streams run.
* **memory**: the engine's VmRSS idle after start-up and idle after the load, and its
  VmHWM (peak).

Every phase also records how much CPU other processes on the machine used meanwhile
(``/proc/stat`` minus ours), since a shared machine skews latencies but hardly CPU/event.

Run: ``python -m bench.engine_bench`` (the defaults take about three minutes on 2
cores); ``--help`` lists the knobs. ``--py-spy FILE`` samples the engine with py-spy
(``pip install py-spy``) during one phase and prints its hotspots; the latency and CPU
numbers of such a run are inflated by the sampling.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc

ROOT = Path(__file__).resolve().parents[1]
WAIT = 60.0
"""Upper bound for any single wait (start-up, one stream), in seconds."""

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# -- /proc ------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process (all its threads) has used so far, in seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def machine_busy_seconds() -> float:
    """CPU seconds all processes on the machine have used (``/proc/stat``), summed over CPUs."""
    try:
        ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0.0
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    # guest time is already counted in user/nice.
    return (sum(ticks[:8]) - idle) / CLOCK_TICKS


def status_kib(pid: int, key: str) -> int:
    """A ``/proc/<pid>/status`` field in KiB (``VmRSS``, ``VmHWM``); 0 when gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# -- statistics -------------------------------------------------------------------------


def quantile(values: list[float], q: float) -> float:
    """Median for 0.5, else nearest rank; NaN when empty."""
    if not values:
        return float("nan")
    if q == 0.5:
        return statistics.median(values)
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ms(seconds: float) -> str:
    return "n/a" if seconds != seconds else f"{seconds * 1000:.2f}"


@dataclass
class Sample:
    """One stream, times in seconds from the request being sent."""

    first_event: float = 0.0
    first_token: float = 0.0
    total: float = 0.0
    started_stamp: float = 0.0
    """When the engine stamped RUN_STARTED (its ``Event.time``): the engine-side start."""
    token_stamp: float = 0.0
    """When the engine stamped the first TEXT_MESSAGE_CONTENT."""
    events: int = 0
    tokens: int = 0
    outcome: str = ""


@dataclass
class Cpu:
    """CPU seconds used during a phase, per process."""

    engine: float = 0.0
    fake: float = 0.0
    client: float = 0.0
    machine: float = 0.0
    """Every process on the machine, ours included."""

    @property
    def others(self) -> float:
        """CPU other processes used meanwhile: they compete with the bench for the cores."""
        return max(0.0, self.machine - self.engine - self.fake - self.client)


@dataclass
class Phase:
    name: str
    concurrency: int
    samples: list[Sample] = field(default_factory=list)
    wall: float = 0.0
    errors: int = 0
    cpu: Cpu = field(default_factory=Cpu)
    note: str = ""

    def q(self, attribute: str, q: float) -> float:
        return quantile([float(getattr(s, attribute)) for s in self.samples], q)

    @property
    def events(self) -> int:
        return sum(s.events for s in self.samples)

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.samples)

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall if self.wall else 0.0

    @property
    def engine_ms_per_event(self) -> float:
        return self.cpu.engine * 1000 / self.events if self.events else float("nan")

    @property
    def engine_ms_per_run(self) -> float:
        return self.cpu.engine * 1000 / len(self.samples) if self.samples else float("nan")

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "concurrency": self.concurrency,
            "streams": len(self.samples),
            "errors": self.errors,
            "wall_s": round(self.wall, 3),
            "events": self.events,
            "tokens": self.tokens,
            "events_per_s": round(self.events_per_s, 1),
            "tokens_per_s": round(self.tokens / self.wall, 1) if self.wall else 0.0,
            "runs_per_s": round(len(self.samples) / self.wall, 1) if self.wall else 0.0,
            "cpu_s": {
                "engine": round(self.cpu.engine, 3),
                "fake_llm": round(self.cpu.fake, 3),
                "client": round(self.cpu.client, 3),
                "other_processes": round(self.cpu.others, 3),
            },
            "engine_cpu_share": round(self.cpu.engine / self.wall, 3) if self.wall else 0.0,
            "others_cores_busy": round(self.cpu.others / self.wall, 2) if self.wall else 0.0,
            "engine_cpu_ms_per_event": round(self.engine_ms_per_event, 4),
            "engine_cpu_ms_per_run": round(self.engine_ms_per_run, 3),
        }
        for attribute in ("first_event", "first_token", "total", "started_stamp", "token_stamp"):
            for label, q in (("p50", 0.5), ("p99", 0.99)):
                out[f"{attribute}_{label}_ms"] = round(self.q(attribute, q) * 1000, 3)
        return out


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


# -- the engine over gRPC ---------------------------------------------------------------


def run_request(text: str) -> pb.RunRequest:
    """A run of one user message on a new session."""
    return pb.RunRequest(
        session_id=f"bench-{uuid.uuid4().hex}",
        create_session=True,
        messages=[
            pb.Message(role=pb.ROLE_USER, content=[pb.ContentPart(text=pb.TextPart(text=text))])
        ],
    )


def stamp(event: pb.Event) -> float:
    return event.time.seconds + event.time.nanos / 1e9


async def engine_stream(stub: pb_grpc.AgentEngineAsyncStub, text: str) -> Sample:
    """One Run, read to its end."""
    sample = Sample()
    request = run_request(text)
    sent = time.time()  # the engine stamps events with time.time() on this same host
    start = time.perf_counter()
    call = stub.Run(request, timeout=WAIT)
    async for event in call:
        now = time.perf_counter()
        sample.events += 1
        if sample.events == 1:
            sample.first_event = now - start
            sample.started_stamp = stamp(event) - sent
        kind = event.WhichOneof("kind")
        if kind == "text_message_content":
            sample.tokens += 1
            if not sample.first_token:
                sample.first_token = now - start
                sample.token_stamp = stamp(event) - sent
        elif kind == "run_finished":
            sample.outcome = pb.OutcomeType.Name(event.run_finished.outcome)
        elif kind == "run_error":
            sample.outcome = f"error:{event.run_error.code}"
    sample.total = time.perf_counter() - start
    if sample.outcome != "OUTCOME_TYPE_SUCCESS":
        raise RuntimeError(f"run ended with {sample.outcome or 'no terminal event'}")
    return sample


async def closed_loop(
    phase: Phase,
    cpu: Callable[[], Cpu],
    streams: int,
    one: Callable[[int], Awaitable[Sample]],
    ramp: float = 0.0,
) -> Phase:
    """``phase.concurrency`` workers share ``streams`` streams; ``one(worker)`` runs one.

    With ``ramp`` the workers start spread evenly over that many seconds instead of all
    at once, so that starts are staggered as they would be in steady traffic.
    """
    remaining = iter(range(streams))

    async def worker(index: int) -> None:
        if ramp:
            await asyncio.sleep(ramp * index / phase.concurrency)
        for _ in remaining:
            try:
                phase.samples.append(await one(index))
            except (grpc.aio.AioRpcError, RuntimeError, OSError, asyncio.IncompleteReadError) as e:
                phase.errors += 1
                if phase.errors <= 5:
                    print(f"{phase.name}: {type(e).__name__}: {e}", file=sys.stderr)

    before = cpu()
    start = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(phase.concurrency)))
    phase.wall = time.perf_counter() - start
    after = cpu()
    phase.cpu = Cpu(
        after.engine - before.engine,
        after.fake - before.fake,
        after.client - before.client,
        after.machine - before.machine,
    )
    return phase


async def direct_phase(
    name: str, stack: Stack, concurrency: int, streams: int, text: str, ramp: float = 0.0
) -> Phase:
    clients = [DirectClient(stack.llm_url) for _ in range(concurrency)]
    try:
        await asyncio.gather(*(c.stream("warm up [[chunks:2]]") for c in clients))
        return await closed_loop(
            Phase(name, concurrency), stack.cpu, streams, lambda i: clients[i].stream(text), ramp
        )
    finally:
        for client in clients:
            client.close()


async def engine_phase(
    name: str,
    stack: Stack,
    stub: pb_grpc.AgentEngineAsyncStub,
    concurrency: int,
    streams: int,
    text: str,
    ramp: float = 0.0,
) -> Phase:
    await asyncio.gather(
        *(engine_stream(stub, "warm up [[chunks:2]]") for _ in range(min(concurrency, 8)))
    )
    return await closed_loop(
        Phase(name, concurrency), stack.cpu, streams, lambda _: engine_stream(stub, text), ramp
    )


async def next_event(call: grpc.aio.UnaryStreamCall[pb.RunRequest, pb.Event]) -> pb.Event | None:
    """The next event of a Run, or None at the end of the stream."""
    event = await call.read()
    if event is grpc.aio.EOF:
        return None
    assert isinstance(event, pb.Event)
    return event


async def hanging_run(
    stub: pb_grpc.AgentEngineAsyncStub,
) -> tuple[str, grpc.aio.UnaryStreamCall[pb.RunRequest, pb.Event]]:
    """A run whose LLM stream hangs after its first chunk, read up to its first text."""
    request = run_request("[[hang]] interrupt me")
    call = stub.Run(request, timeout=WAIT)
    while (event := await next_event(call)) is not None:
        if event.WhichOneof("kind") == "text_message_content":
            return request.session_id, call
    raise RuntimeError("the hanging run ended before its first text")


@dataclass
class Interrupts:
    """Seconds from Interrupt being sent, per try."""

    finished: list[float] = field(default_factory=list)
    """... to RUN_FINISHED received."""
    ended: list[float] = field(default_factory=list)
    """... to the Run stream's end (status OK) received."""
    acked: list[float] = field(default_factory=list)
    """... to the InterruptResponse (a separate series of tries)."""
    not_cancelled: int = 0

    def summary(self, load: int) -> dict[str, Any]:
        return {
            "other_streams": load,
            "tries": len(self.ended),
            "not_cancelled": self.not_cancelled,
            "run_finished_p50_ms": round(quantile(self.finished, 0.5) * 1000, 3),
            "run_finished_p99_ms": round(quantile(self.finished, 0.99) * 1000, 3),
            "stream_end_p50_ms": round(quantile(self.ended, 0.5) * 1000, 3),
            "stream_end_p99_ms": round(quantile(self.ended, 0.99) * 1000, 3),
            "stream_end_max_ms": round(max(self.ended, default=float("nan")) * 1000, 3),
            "interrupt_rtt_p50_ms": round(quantile(self.acked, 0.5) * 1000, 3),
        }


INTERRUPT_LOAD_TEXT = "load [[slow:0.02]] [[chunks:100]]"
"""The other streams of the loaded interrupt test: about 50 events/s each, like a real LLM."""


async def interrupt_phase(
    stub: pb_grpc.AgentEngineAsyncStub, tries: int, load: int = 0, load_text: str = ""
) -> Interrupts:
    """Interrupt tries one after another; with ``load``, that many other streams run meanwhile."""
    result = Interrupts()
    stop = asyncio.Event()

    async def background() -> None:
        while not stop.is_set():
            with contextlib.suppress(grpc.aio.AioRpcError, RuntimeError):
                await engine_stream(stub, load_text)

    workers = [asyncio.ensure_future(background()) for _ in range(load)]
    try:
        if load:
            await asyncio.sleep(1.0)  # let the load get going
        await measure_interrupts(stub, tries, result)
    finally:
        stop.set()
        await asyncio.gather(*workers)
    return result


async def measure_interrupts(
    stub: pb_grpc.AgentEngineAsyncStub, tries: int, result: Interrupts
) -> None:
    for _ in range(tries):
        thread_id, call = await hanging_run(stub)
        start = time.perf_counter()
        reply = asyncio.ensure_future(stub.Interrupt(pb.InterruptRequest(session_id=thread_id)))
        outcome = ""
        while (event := await next_event(call)) is not None:
            if event.WhichOneof("kind") == "run_finished":
                result.finished.append(time.perf_counter() - start)
                outcome = pb.OutcomeType.Name(event.run_finished.outcome)
        result.ended.append(time.perf_counter() - start)
        if not (await reply).interrupted or outcome != "OUTCOME_TYPE_CANCELLED":
            result.not_cancelled += 1
    for _ in range(max(10, tries // 2)):
        thread_id, call = await hanging_run(stub)
        start = time.perf_counter()
        await stub.Interrupt(pb.InterruptRequest(session_id=thread_id))
        result.acked.append(time.perf_counter() - start)
        while await next_event(call) is not None:
            pass


# -- the gRPC floor ----------------------------------------------------------------------


async def floor_run(
    request: pb.RunRequest, context: grpc.aio.ServicerContext[Any, Any]
) -> AsyncIterator[pb.Event]:
    """``Run`` that streams ``int(run_id)`` prebuilt TEXT_MESSAGE_CONTENT events, nothing else:
    what ``grpc.aio`` itself costs per streamed event, with no engine behind it."""
    event = pb.Event(
        seq=1,
        session_id=request.session_id,
        run_id=request.run_id,
        text_message_content=pb.TextMessageContent(message_id="m", delta="w1 "),
    )
    event.time.GetCurrentTime()
    for _ in range(int(request.run_id or 0)):
        yield event


async def serve_floor(address: str) -> None:
    """The floor server (``--serve-floor``): the real service name and method, until SIGTERM."""
    server = grpc.aio.server()
    handler = grpc.unary_stream_rpc_method_handler(
        floor_run,
        request_deserializer=pb.RunRequest.FromString,
        response_serializer=pb.Event.SerializeToString,
    )
    service = pb.DESCRIPTOR.services_by_name["AgentEngine"].full_name
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service, {"Run": handler}),)
    )
    server.add_insecure_port(address)
    await server.start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.stop(None)


async def floor_stream(stub: pb_grpc.AgentEngineAsyncStub, events: int) -> Sample:
    sample = Sample()
    start = time.perf_counter()
    async for _ in stub.Run(pb.RunRequest(session_id="floor", run_id=str(events)), timeout=WAIT):
        sample.events += 1
        if sample.events == 1:
            sample.first_event = sample.first_token = time.perf_counter() - start
    sample.total = time.perf_counter() - start
    return sample


class FloorServer:
    """The floor servicer in its own process (``--serve-floor``), so its CPU can be read."""

    def __init__(self) -> None:
        self.target = f"127.0.0.1:{free_port()}"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.engine_bench", "--serve-floor", self.target],
            cwd=ROOT,
            env=env,
        )

    def cpu(self) -> Cpu:
        return Cpu(cpu_seconds(self.process.pid), 0.0, client_cpu(), machine_busy_seconds())

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(WAIT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


async def floor_phases(levels: list[int], runs: int, events: int) -> list[Phase]:
    """Closed-loop streams against the floor server, one phase per concurrency level."""
    server = FloorServer()
    channel = grpc.aio.insecure_channel(server.target)
    stub: pb_grpc.AgentEngineAsyncStub = pb_grpc.AgentEngineStub(channel)
    phases: list[Phase] = []
    try:
        await asyncio.wait_for(channel.channel_ready(), WAIT)
        for concurrency in levels:
            await asyncio.gather(*(floor_stream(stub, 2) for _ in range(min(concurrency, 8))))
            phase = Phase("gRPC floor", concurrency)
            await closed_loop(
                phase, server.cpu, max(runs, 2 * concurrency), lambda _: floor_stream(stub, events)
            )
            phases.append(phase)
            progress(f"gRPC floor c={concurrency}", phase)
    finally:
        await channel.close()
        server.stop()
    return phases


def floor_table(phases: list[Phase]) -> Iterator[str]:
    yield "| conc | streams | events/s | server CPU ms/event | client CPU ms/event |"
    yield "|---:|---:|---:|---:|---:|"
    for phase in phases:
        events = phase.events or 1
        yield (
            f"| {phase.concurrency} | {len(phase.samples)} | {phase.events_per_s:,.0f} "
            f"| {phase.cpu.engine * 1000 / events:.3f} | {phase.cpu.client * 1000 / events:.3f} |"
        )


# -- profiling --------------------------------------------------------------------------


class PySpy:
    """``py-spy record`` attached to the engine for the duration of a block."""

    def __init__(self, pid: int, output: Path, rate: int, native: bool) -> None:
        exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        self.output = output
        self.process = subprocess.Popen(
            [
                *(exe, "record", "--pid", str(pid), "--format", "raw", "--rate", str(rate)),
                *(("--native",) if native else ("--nonblocking",)),
                *("--output", str(output)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        time.sleep(1.0)  # let it attach
        if self.process.poll() is not None:
            assert self.process.stderr is not None
            raise RuntimeError(f"py-spy failed: {self.process.stderr.read().decode()}")

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(WAIT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextlib.contextmanager
def profiled(options: argparse.Namespace, stack: Stack, phase: str) -> Iterator[None]:
    """Sample the engine with py-spy during this block if ``--py-spy`` asked for ``phase``."""
    if not options.py_spy or options.py_spy_phase != phase:
        yield
        return
    profiler = PySpy(stack.engine.pid, options.py_spy, options.py_spy_rate, options.py_spy_native)
    try:
        yield
    finally:
        profiler.stop()


def _frame_name(frame: str) -> str:
    """``func (path/to/file.py:123)`` → ``func (file.py)``: line numbers merged."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    parts = Path(path).parts
    short = "/".join(parts[-2:]) if parts else path
    return f"{name} ({short})"


def hotspots(collapsed: Path, top: int) -> tuple[int, list[tuple[str, int]], list[tuple[str, int]]]:
    """Total samples, and the top (frame, samples) by self time and by inclusive time."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame_name(f) for f in stack.split(";") if " (" in f]
        if not frames:
            continue
        total += count
        own[frames[-1]] += count
        for name in set(frames):
            inclusive[name] += count
    return total, own.most_common(top), inclusive.most_common(top)


def print_hotspots(collapsed: Path, top: int) -> None:
    total, own, inclusive = hotspots(collapsed, top)
    if not total:
        print(f"\npy-spy: no samples in {collapsed}")
        return
    print(f"\n### Engine hotspots (py-spy, {total} non-idle samples)\n")
    for title, rows in (("self time", own), ("inclusive time", inclusive)):
        print(f"| {title} | % |\n|---|---:|")
        for name, count in rows:
            print(f"| `{name}` | {100 * count / total:.1f} |")
        print()


# -- report -----------------------------------------------------------------------------


def machine_notes() -> dict[str, str]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpus": str(os.cpu_count()),
        "cpu_model": model or platform.processor(),
        "python": platform.python_version(),
        "grpcio": grpc.__version__,
        "kernel": platform.release(),
        "loadavg_at_start": "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg()),
    }


def marginal_ms_per_event(long: Phase, short: Phase) -> float:
    """Engine CPU per extra event: the difference of two run lengths at one concurrency."""
    if not long.samples or not short.samples:
        return float("nan")
    long_events = long.events / len(long.samples)
    short_events = short.events / len(short.samples)
    if long_events <= short_events:
        return float("nan")
    return (long.engine_ms_per_run - short.engine_ms_per_run) / (long_events - short_events)


def p50_p99(phase: Phase, attribute: str) -> str:
    return f"{ms(phase.q(attribute, 0.5))} / {ms(phase.q(attribute, 0.99))}"


def streams_table(
    direct: dict[int, Phase], engine: dict[int, Phase], short: Phase
) -> Iterator[str]:
    yield (
        "| path | conc | streams | first event p50 / p99 | first token p50 / p99 "
        "| TTFT over direct (p50) | stream p50 | events/s | engine CPU ms/event "
        "| engine CPU ms/run | engine busy | others busy |"
    )
    yield "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    rows: list[tuple[Phase, Phase | None]] = []
    for concurrency in sorted(set(direct) | set(engine)):
        if concurrency in direct:
            rows.append((direct[concurrency], None))
        if concurrency in engine:
            rows.append((engine[concurrency], direct.get(concurrency)))
    rows.append((short, None))
    for phase, base in rows:
        is_engine = phase.name.startswith("engine")
        overhead = (
            f"+{ms(phase.q('first_token', 0.5) - base.q('first_token', 0.5))}"
            if base is not None
            else ""
        )
        errors = f" ({phase.errors} errors)" if phase.errors else ""
        engine_cols = (
            f"{phase.engine_ms_per_event:.3f} | {phase.engine_ms_per_run:.1f} "
            f"| {100 * phase.cpu.engine / phase.wall:.0f}%"
            if is_engine and phase.wall
            else " |  | "
        )
        others = phase.cpu.others / phase.wall if phase.wall else 0.0
        yield (
            f"| {phase.name} | {phase.concurrency} | {len(phase.samples)}{errors} "
            f"| {p50_p99(phase, 'first_event')} | {p50_p99(phase, 'first_token')} "
            f"| {overhead} | {ms(phase.q('total', 0.5))} | {phase.events_per_s:,.0f} "
            f"| {engine_cols} | {others:.2f} cores |"
        )


def breakdown_table(engine: dict[int, Phase], short: Phase) -> Iterator[str]:
    """Where the time to first token goes, from the engine's own event stamps (p50)."""
    yield (
        "| conc | sent → RUN_STARTED stamped | → received | sent → first token stamped "
        "| → received |"
    )
    yield "|---:|---:|---:|---:|---:|"
    for phase in [*(engine[c] for c in sorted(engine)), short]:
        yield (
            f"| {phase.concurrency}{' (short)' if phase is short else ''} "
            f"| {ms(phase.q('started_stamp', 0.5))} | {ms(phase.q('first_event', 0.5))} "
            f"| {ms(phase.q('token_stamp', 0.5))} | {ms(phase.q('first_token', 0.5))} |"
        )


def slow_table(phases: list[Phase]) -> Iterator[str]:
    yield (
        "| path | start | streams | concurrent | first token p50 / p99 | stream p50 "
        "| engine busy | others busy |"
    )
    yield "|---|---|---:|---:|---:|---:|---:|---:|"
    for phase in phases:
        errors = f" ({phase.errors} errors)" if phase.errors else ""
        busy = (
            f"{100 * phase.cpu.engine / phase.wall:.0f}%"
            if phase.name.startswith("engine") and phase.wall
            else ""
        )
        others = phase.cpu.others / phase.wall if phase.wall else 0.0
        yield (
            f"| {phase.name} | {phase.note} | {len(phase.samples)}{errors} "
            f"| {phase.concurrency} | {p50_p99(phase, 'first_token')} "
            f"| {ms(phase.q('total', 0.5))} | {busy} | {others:.2f} cores |"
        )


# -- main -------------------------------------------------------------------------------


def concurrency_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("a comma-separated list of positive integers")
    return values


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.engine_bench",
        description="Benchmark the engine over gRPC against the fake LLM (see the module doc).",
    )
    add = parser.add_argument
    add("--runs", type=int, default=200, help="streams per concurrency level (at least 2x it)")
    add("--concurrency", type=concurrency_list, default=[1, 16, 64, 256], help="e.g. 1,16,64")
    add("--chunks", type=int, default=200, help="text chunks per streamed answer")
    add("--short-runs", type=int, default=640, help="short turns in the runs/s phase")
    add("--short-concurrency", type=int, default=64, help="clients in the runs/s phase")
    add("--short-chunks", type=int, default=5, help="text chunks of a short turn")
    add("--slow-streams", type=int, default=256, help="concurrent slow streams")
    add("--slow-delay", type=float, default=0.05, help="seconds before each slow chunk")
    add("--slow-chunks", type=int, default=20, help="text chunks per slow stream")
    add(
        "--slow-ramp",
        type=float,
        default=1.0,
        help="seconds over which the staggered slow streams start (0: burst only)",
    )
    add("--slow-waves", type=int, default=3, help="staggered slow streams per client")
    add("--interrupts", type=int, default=40, help="interrupt tries (>= 30 for a median)")
    add(
        "--interrupt-load",
        type=int,
        default=32,
        help="streams running during the second interrupt series (0: skip it)",
    )
    add(
        "--floor-concurrency",
        type=concurrency_list,
        default=[1, 64],
        help="levels of the gRPC floor phase: a bare grpc.aio servicer streaming prebuilt "
        "events, no engine (an empty list is not allowed; use --no-floor)",
    )
    add("--no-floor", action="store_true", help="skip the gRPC floor phase")
    add("--serve-floor", metavar="ADDR", help=argparse.SUPPRESS)
    add("--store", choices=("sqlite", "memory"), default="sqlite", help="the engine's store")
    add(
        "--store-url",
        default="",
        help="the engine's store as a URL (postgresql://...); overrides --store",
    )
    add("--fake-backlog", type=int, default=1024, help="the fake's listen backlog (0: its own 5)")
    add("--json", type=Path, help="also write every number to this JSON file")
    add("--py-spy", type=Path, metavar="FILE", help="sample the engine with py-spy into FILE")
    add(
        "--py-spy-phase",
        choices=("streams", "short", "slow"),
        default="streams",
        help="which engine phase --py-spy samples",
    )
    add("--py-spy-native", action="store_true", help="with --py-spy: C frames too (slower)")
    add("--py-spy-rate", type=int, default=200, help="py-spy samples per second")
    add("--top", type=int, default=25, help="hotspot rows to print with --py-spy")
    return parser


async def bench(options: argparse.Namespace, stack: Stack, results: dict[str, Any]) -> None:
    """Every phase, in order; fills ``results`` and prints the report."""
    channel = grpc.aio.insecure_channel(stack.target)
    stub: pb_grpc.AgentEngineAsyncStub = pb_grpc.AgentEngineStub(channel)
    try:
        await stack.wait_serving(channel)
        await asyncio.sleep(1.0)
        results["rss_idle_start_kib"] = status_kib(stack.engine.pid, "VmRSS")

        text = f"go [[chunks:{options.chunks}]]"
        direct: dict[int, Phase] = {}
        engine: dict[int, Phase] = {}
        for concurrency in options.concurrency:
            streams = max(options.runs, 2 * concurrency)
            direct[concurrency] = await direct_phase("direct", stack, concurrency, streams, text)
            progress(f"direct c={concurrency}", direct[concurrency])

        with profiled(options, stack, "streams"):
            for concurrency in options.concurrency:
                streams = max(options.runs, 2 * concurrency)
                engine[concurrency] = await engine_phase(
                    "engine", stack, stub, concurrency, streams, text
                )
                progress(f"engine c={concurrency}", engine[concurrency])

        with profiled(options, stack, "short"):
            short = await engine_phase(
                "engine, short turns",
                stack,
                stub,
                options.short_concurrency,
                options.short_runs,
                f"hi [[chunks:{options.short_chunks}]]",
            )
        progress("short turns", short)

        slow_text = f"go [[slow:{options.slow_delay}]] [[chunks:{options.slow_chunks}]]"
        n = options.slow_streams
        slow: list[Phase] = []
        shapes = [("burst", 0.0, 1)]
        if options.slow_ramp > 0:
            shapes.append((f"staggered over {options.slow_ramp:g} s", options.slow_ramp, 0))
        with profiled(options, stack, "slow"):
            for note, ramp, waves in shapes:
                total = n * (waves or options.slow_waves)
                for name in ("direct slow", "engine slow"):
                    if name.startswith("direct"):
                        phase = await direct_phase(name, stack, n, total, slow_text, ramp)
                    else:
                        phase = await engine_phase(name, stack, stub, n, total, slow_text, ramp)
                    phase.note = note
                    slow.append(phase)
                    progress(f"{name} ({note})", phase)

        interrupts = await interrupt_phase(stub, options.interrupts)
        print("interrupts: done", file=sys.stderr)
        loaded: Interrupts | None = None
        if options.interrupt_load:
            loaded = await interrupt_phase(
                stub, options.interrupts, options.interrupt_load, INTERRUPT_LOAD_TEXT
            )
            print(
                f"interrupts with {options.interrupt_load} streams running: done", file=sys.stderr
            )

        floor: list[Phase] = []
        if not options.no_floor:
            floor = await floor_phases(options.floor_concurrency, options.runs, options.chunks + 6)

        await asyncio.sleep(2.0)
        results["rss_idle_after_kib"] = status_kib(stack.engine.pid, "VmRSS")
        results["hwm_kib"] = status_kib(stack.engine.pid, "VmHWM")
        results["fake_hwm_kib"] = status_kib(stack.fake.pid, "VmHWM")
        results["client_hwm_kib"] = status_kib(os.getpid(), "VmHWM")
    finally:
        await channel.close()

    results["loadavg_at_end"] = "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    results["direct"] = {c: p.summary() for c, p in direct.items()}
    results["engine"] = {c: p.summary() for c, p in engine.items()}
    results["short"] = short.summary()
    results["grpc_floor"] = {p.concurrency: p.summary() for p in floor}
    results["slow"] = [{"name": p.name, "start": p.note, **p.summary()} for p in slow]
    results["interrupt"] = interrupts.summary(0)
    if loaded is not None:
        results["interrupt_loaded"] = loaded.summary(options.interrupt_load)
    same = engine.get(options.short_concurrency)
    results["marginal_engine_cpu_ms_per_event"] = (
        round(marginal_ms_per_event(same, short), 4) if same is not None else None
    )
    report(results, direct, engine, short, slow, floor)


def progress(label: str, phase: Phase) -> None:
    print(
        f"{label}: {len(phase.samples)} streams in {phase.wall:.1f} s"
        f"{f', {phase.errors} errors' if phase.errors else ''}",
        file=sys.stderr,
    )


def report(
    results: dict[str, Any],
    direct: dict[int, Phase],
    engine: dict[int, Phase],
    short: Phase,
    slow: list[Phase],
    floor: list[Phase],
) -> None:
    notes = results["machine"]
    print(
        f"\n## Engine (gRPC) bench: {notes['cpus']} CPUs ({notes['cpu_model']}), "
        f"Python {notes['python']}, grpcio {notes['grpcio']}, store {results['store']}, "
        f"load average {notes['loadavg_at_start']} at start, {results['loadavg_at_end']} "
        "at end\n"
    )
    print("Times in ms. *others busy*: CPU that processes outside the bench used meanwhile.\n")
    print("### Streams (closed loop, each run on a new session)\n")
    for line in streams_table(direct, engine, short):
        print(line)
    marginal = results["marginal_engine_cpu_ms_per_event"]
    if marginal is not None:
        print(
            f"\nMarginal engine CPU per streamed event (c={short.concurrency}, long runs minus "
            f"short turns): **{marginal:.3f} ms**; short turns: "
            f"**{len(short.samples) / short.wall:.1f} runs/s**"
        )
    print("\n### Time to first token, where it goes (p50, ms from Run sent)\n")
    for line in breakdown_table(engine, short):
        print(line)
    if floor:
        print(
            "\n### gRPC floor: a bare grpc.aio servicer yielding prebuilt events "
            f"({floor[0].events // max(1, len(floor[0].samples))} per stream), no engine\n"
        )
        for line in floor_table(floor):
            print(line)
    print("\n### Slow streams\n")
    for line in slow_table(slow):
        print(line)
    print("\n### Interrupt (ms from Interrupt sent, on a hanging LLM stream)\n")
    print(
        "| other streams running | tries | RUN_FINISHED p50 / p99 "
        "| stream ended p50 / p99 / max | Interrupt RTT p50 |"
    )
    print("|---:|---:|---:|---:|---:|")
    for key in ("interrupt", "interrupt_loaded"):
        if key not in results:
            continue
        it = results[key]
        failed = f" ({it['not_cancelled']} not cancelled)" if it["not_cancelled"] else ""
        load = f"{it['other_streams']} (`{INTERRUPT_LOAD_TEXT}`)" if it["other_streams"] else "0"
        print(
            f"| {load} | {it['tries']}{failed}"
            f" | {it['run_finished_p50_ms']:.2f} / {it['run_finished_p99_ms']:.2f} "
            f"| {it['stream_end_p50_ms']:.2f} / {it['stream_end_p99_ms']:.2f} / "
            f"{it['stream_end_max_ms']:.2f} | {it['interrupt_rtt_p50_ms']:.2f} |"
        )
    print("\n### Engine memory (MiB)\n")
    print("| idle after start (VmRSS) | idle after the load (VmRSS) | peak (VmHWM) |")
    print("|---:|---:|---:|")
    print(
        f"| {results['rss_idle_start_kib'] / 1024:.1f} "
        f"| {results['rss_idle_after_kib'] / 1024:.1f} | {results['hwm_kib'] / 1024:.1f} |"
    )


def main(argv: list[str] | None = None) -> None:
    options = build_parser().parse_args(argv)
    if options.serve_floor:
        asyncio.run(serve_floor(options.serve_floor))
        return
    if min(options.runs, options.chunks, options.interrupts, options.slow_streams) < 1:
        raise SystemExit("--runs, --chunks, --interrupts and --slow-streams must be positive")
    results: dict[str, Any] = {
        "command": " ".join(["python -m bench.engine_bench", *sys.argv[1:]]),
        "options": {k: str(v) for k, v in vars(options).items()},
        "machine": machine_notes(),
        "store": "postgresql" if options.store_url else options.store,
    }
    started = time.perf_counter()
    stack = Stack(options.store, options.fake_backlog, options.store_url)
    try:
        asyncio.run(bench(options, stack, results))
    finally:
        stack.stop()
    results["duration_s"] = round(time.perf_counter() - started, 1)
    print(f"\n(bench took {results['duration_s']} s)")
    if options.py_spy:
        print_hotspots(options.py_spy, options.top)
    if options.json:
        options.json.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
