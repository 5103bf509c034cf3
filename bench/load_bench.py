"""Issue 13's table: every facade under 1, 64 and 256 concurrent clients, against the floor.

For each ``--clients`` level and each ``--repeat`` repetition a fresh stack (the fake LLM,
the engine and gunicorn, from :class:`bench.facade_bench.Processes`) is started on free
ports; before any traffic every process's idle VmRSS and PSS is read. Then all clients
start at once, each with its own :class:`bench.lean_http.Client` (one keep-alive
connection, opened by a warm-up run; ``--shared-pool`` puts them all on one, see
:func:`client_pools`), each doing ``--runs-per-client`` runs one after another:

1. **floor**: the same streams read straight from the fake LLM by the same client;
2. **agui**: ``POST /agui`` (first frame: RUN_STARTED; first token: TEXT_MESSAGE_CONTENT);
3. **agentik**: ``POST /agentik/conversations`` (timed apart: the create figure) then
   ``POST .../send`` (first frame: the first ``event:``; first token: ``append_text``);
4. **a2a**: ``SendStreamingMessage`` at ``POST /`` with ``A2A-Version: 1.0`` (first frame:
   the submitted task; first token: the first ``artifactUpdate``).

Each answer is ``--tokens`` text chunks, ``--token-delay`` seconds apart (the fake's
``[[chunks:N]]`` and ``[[slow:S]]``). Per scenario: time to the response headers, to the
first frame and to the first token (p50/p99; the first token also over the floor's), the
whole stream's p50, errors, and server CPU seconds per run of every process (``/proc``).
Last, per repetition: interrupt latency under load, ``--interrupt-load`` (32) ``/agentik``
streams running while ``--interrupts`` (20) runs on a ``[[hang]]`` stream are interrupted
once their first token arrived, timed from the interrupt request to the stream's end.

Output: every number as JSON (``--out``) and, on stdout, a markdown table shaped like issue
13's (figure | floor | agentik | target), medians over the repetitions with each
repetition's value, then the full per-scenario table.

Run: ``python -m bench.load_bench`` (all facades at 1, 64 and 256 clients, three
repetitions); ``python -m bench.load_bench --clients 256 --tokens 50 --token-delay 0.02
--facades agui`` for the slow-streams case.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import re
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

import httpx

from bench.facade_bench import Processes
from bench.lean_http import Client

FACADES = ("agui", "agentik", "a2a")
WAIT = 60.0
"""Seconds a stream may stay silent, and the slack on top of its expected length."""


class StreamError(Exception):
    """A stream that failed: a refusal, an error frame, or an end without a terminal frame.

    ``kind`` is short and stable (errors are counted by it); the message has the detail."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind


_CODE = re.compile(rb'"code":\s*"?([\w.-]+)')


# -- one stream -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Markers:
    """What to look for in a protocol's raw SSE bytes."""

    first_frame: bytes
    token: bytes
    terminal: tuple[bytes, ...]
    error: tuple[bytes, ...] = ()


MARKERS: dict[str, Markers] = {
    "floor": Markers(b"data: ", b'"delta": {"content": "', (b"data: [DONE]",)),
    "agui": Markers(b'"type":"RUN_STARTED"', b'"TEXT_MESSAGE_CONTENT"', (b'"RUN_FINISHED"',),
                    (b'"RUN_ERROR"',)),
    "agentik": Markers(b"event: ", b"event: append_text", (b"event: end", b"event: interrupted"),
                       (b"event: error",)),
    "a2a": Markers(b"data: ", b'"artifactUpdate"', (b"TASK_STATE_COMPLETED",),
                   (b'"error":', b"TASK_STATE_FAILED")),
}  # fmt: skip


class Streamed(Protocol):
    """What :func:`read_stream` reads: a :class:`bench.lean_http.Response` (or an
    ``httpx.Response``)."""

    @property
    def status_code(self) -> int: ...

    async def aread(self) -> bytes: ...

    def aiter_raw(self) -> AsyncIterator[bytes]: ...


@dataclass
class Run:
    """One stream's timings in seconds from its request (``create``: the conversation's)."""

    first_byte: float
    first_frame: float
    first_token: float
    total: float
    events: int
    create: float = 0.0


async def read_stream(response: Streamed, markers: Markers, start: float, first_byte: float) -> Run:
    """Scan the raw body for the markers (no per-line parsing: the client shares the cores)."""
    if response.status_code != 200:
        body = (await response.aread())[:300]
        raise StreamError(f"HTTP {response.status_code}", repr(body))
    first_frame = first_token = 0.0
    events = 0
    ended = False
    carry = b""
    width = max(len(m) for m in (markers.first_frame, markers.token, *markers.terminal))
    async for chunk in response.aiter_raw():
        window = carry + chunk
        events += window.count(b"\n\n") - carry.count(b"\n\n")
        if not first_frame and markers.first_frame in window:
            first_frame = time.perf_counter() - start
        if not first_token and markers.token in window:
            first_token = time.perf_counter() - start
        for error in markers.error:
            if error in window:
                at = window.index(error)
                code = _CODE.search(window, at)
                kind = error.decode().strip('":') + (f" {code[1].decode()}" if code else "")
                raise StreamError(kind, repr(window[max(0, at - 80) : at + 300]))
        if not ended and any(t in window for t in markers.terminal):
            ended = True
        carry = window[-(width + 2) :]
    total = time.perf_counter() - start
    if not ended:
        raise StreamError("the stream ended without its terminal frame", repr(carry))
    if not first_token:
        raise StreamError("the stream ended without a text token")
    return Run(first_byte, first_frame or first_token, first_token, total, events)


def prompt(tokens: int, delay: float, extra: str = "") -> str:
    slow = f" [[slow:{delay}]]" if delay > 0 else ""
    return f"go [[chunks:{tokens}]]{slow}{extra}"


async def timed_stream(
    client: Client,
    url: str,
    body: dict[str, Any],
    markers: Markers,
    headers: dict[str, str] | None = None,
) -> Run:
    start = time.perf_counter()
    async with client.stream("POST", url, json=body, headers=headers) as response:
        first_byte = time.perf_counter() - start
        return await read_stream(response, markers, start, first_byte)


Driver = Callable[[Client, str], Awaitable[Run]]
"""One run: (client, prompt text) → its timings."""


def driver(facade: str, llm_url: str, base_url: str, conversations: bool = False) -> Driver:
    """``conversations``: an AG-UI client's runs are the turns of one thread, each sending
    the thread's user messages so far again with its new one (as AG-UI clients send the
    history), so that every run after a client's first is a later run of a conversation."""
    markers = MARKERS[facade]
    threads: dict[int, tuple[str, list[dict[str, str]]]] = {}

    async def floor(client: Client, text: str) -> Run:
        body = {"model": "bench", "stream": True, "messages": [{"role": "user", "content": text}]}
        return await timed_stream(client, f"{llm_url}/chat/completions", body, markers)

    async def agui(client: Client, text: str) -> Run:
        thread_id, sent = str(uuid.uuid4()), list[dict[str, str]]()
        if conversations:
            thread_id, sent = threads.setdefault(id(client), (thread_id, sent))
        sent.append({"id": str(uuid.uuid4()), "role": "user", "content": text})
        body = {
            "threadId": thread_id,
            "runId": str(uuid.uuid4()),
            "messages": list(sent),
            "tools": [],
            "context": [],
            "state": {},
            "forwardedProps": {},
        }
        return await timed_stream(client, f"{base_url}/agui", body, markers)

    async def agentik(client: Client, text: str) -> Run:
        start = time.perf_counter()
        created = await client.post(f"{base_url}/agentik/conversations", json={})
        create = time.perf_counter() - start
        if created.status_code != 201:
            raise StreamError(f"create: HTTP {created.status_code}", created.text[:300])
        path = f"{base_url}/agentik/conversations/{created.json()['id']}/send"
        run = await timed_stream(client, path, {"text": text}, markers)
        run.create = create
        return run

    async def a2a(client: Client, text: str) -> Run:
        message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendStreamingMessage",
            "params": {"message": message},
        }
        headers = {"A2A-Version": "1.0"}
        return await timed_stream(client, f"{base_url}/", body, markers, headers)

    return {"floor": floor, "agui": agui, "agentik": agentik, "a2a": a2a}[facade]


# -- a scenario ---------------------------------------------------------------------------


def quantile(values: Sequence[float], q: float) -> float:
    """The median for 0.5, else the nearest-rank value; NaN when empty."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    if q == 0.5:
        return statistics.median(ordered)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ms(value: float) -> float:
    return round(value * 1000, 2) if not math.isnan(value) else math.nan


@dataclass
class Scenario:
    facade: str
    clients: int
    runs: list[Run] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    wall: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)
    cpu_peak: dict[str, float] = field(default_factory=dict)
    """Each process's busiest second: its share of one core (1.0: a whole core)."""

    def summary(self, floor: Scenario | None) -> dict[str, Any]:
        def q(attribute: str, p: float) -> float:
            return ms(quantile([getattr(r, attribute) for r in self.runs], p))

        out: dict[str, Any] = {
            "runs": len(self.runs),
            "errors": sum(self.errors.values()),
            "error_kinds": dict(self.errors.most_common(5)),
            "wall_s": round(self.wall, 2),
        }
        for attribute in ("first_byte", "first_frame", "first_token"):
            out[f"{attribute}_p50_ms"] = q(attribute, 0.5)
            out[f"{attribute}_p99_ms"] = q(attribute, 0.99)
        out["total_p50_ms"] = q("total", 0.5)
        out["events_p50"] = quantile([r.events for r in self.runs], 0.5)
        if self.facade == "agentik":
            out["create_p50_ms"] = q("create", 0.5)
            out["create_p99_ms"] = q("create", 0.99)
        if floor is not None and floor.runs:
            base = floor.summary(None)
            for p in ("p50", "p99"):
                over = out[f"first_token_{p}_ms"] - base[f"first_token_{p}_ms"]
                out[f"first_token_{p}_over_floor_ms"] = round(over, 2)
        runs = len(self.runs) + sum(self.errors.values())
        out["cpu_ms_per_run"] = {
            name: round(seconds * 1000 / runs, 2) if runs else math.nan
            for name, seconds in self.cpu.items()
        }
        out["cpu_s"] = {name: round(seconds, 2) for name, seconds in self.cpu.items()}
        out["cpu_busy"] = {  # share of one core over the scenario: near 1.0 is saturated
            name: round(seconds / self.wall, 2) if self.wall else math.nan
            for name, seconds in self.cpu.items()
        }
        out["cpu_peak_busy"] = {name: round(share, 2) for name, share in self.cpu_peak.items()}
        return out


def short_error(exc: BaseException) -> str:
    """What errors are counted by: a StreamError's kind, else the exception's type and the
    start of its message."""
    if isinstance(exc, StreamError):
        return exc.kind
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return text[:80]


async def run_scenario(
    one: Driver,
    scenario: Scenario,
    pools: Sequence[Client],
    text: str,
    runs_per_client: int,
    limit: float,
) -> None:
    """One client per entry of ``pools``, all started at once, each doing ``runs_per_client``
    runs one after another."""

    async def worker(client: Client) -> None:
        for _ in range(runs_per_client):
            try:
                scenario.runs.append(await asyncio.wait_for(one(client, text), limit))
            except (httpx.HTTPError, StreamError, TimeoutError, KeyError, ValueError) as exc:
                kind = short_error(exc)
                if not scenario.errors[kind]:  # the first of each kind, with its detail
                    detail = f"{type(exc).__name__}: {exc}"[:400]
                    print(f"  {scenario.facade}: stream error: {detail}", file=sys.stderr)
                scenario.errors[kind] += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker(client) for client in pools))
    scenario.wall = time.perf_counter() - start


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: after[name] - before.get(name, 0.0) for name in after}


async def sample_cpu(processes: Processes, peak: dict[str, float], every: float = 0.25) -> None:
    """Until cancelled: each process's highest CPU share over any 1 s window, into ``peak``
    (the averages over a scenario hide a process that is saturated during the start burst)."""
    window = max(1, round(1.0 / every))
    samples: list[tuple[float, dict[str, float]]] = [(time.perf_counter(), processes.cpu())]
    while True:
        await asyncio.sleep(every)
        samples.append((time.perf_counter(), processes.cpu()))
        # A shorter window while the first second fills: scenarios may last less.
        (t0, old), (t1, new) = samples[max(0, len(samples) - window - 1)], samples[-1]
        for name, seconds in cpu_delta(old, new).items():
            peak[name] = max(peak.get(name, 0.0), seconds / (t1 - t0))


# -- interrupts under load ------------------------------------------------------------------


async def interrupt_phase(
    pools: Sequence[Client], base_url: str, tries: int, load_text: str
) -> dict[str, Any]:
    """Interrupt a ``[[hang]]`` run once its first token arrived (on ``pools[0]``) while every
    other client of ``pools`` keeps a stream running: from the interrupt request to its
    stream's end, and to the interrupt's answer."""
    client, *others = pools
    load = len(others)
    send = driver("agentik", "", base_url)
    stop = asyncio.Event()
    errors: Counter[str] = Counter()

    async def background(other: Client) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(send(other, load_text), WAIT * 2)
            except (httpx.HTTPError, StreamError, TimeoutError) as exc:
                errors[f"load: {short_error(exc)}"] += 1

    async def one_try() -> tuple[float, float]:
        created = await client.post(f"{base_url}/agentik/conversations", json={})
        conversation = created.json()["id"]
        path = f"{base_url}/agentik/conversations/{conversation}"
        async with client.stream("POST", f"{path}/send", json={"text": "[[hang]]"}) as response:
            if response.status_code != 200:
                raise StreamError(f"send: HTTP {response.status_code}")
            chunks = response.aiter_raw()
            seen = b""
            async for chunk in chunks:
                seen = seen[-64:] + chunk
                if b"event: append_text" in seen:
                    break
            start = time.perf_counter()
            answer = asyncio.ensure_future(client.post(f"{path}/interrupt"))
            seen = b""
            async for chunk in chunks:
                seen = seen[-64:] + chunk
            ended = time.perf_counter() - start
            acked = (await answer).json().get("interrupted")
            answered = time.perf_counter() - start
            if b"event: interrupted" not in seen or not acked:
                raise StreamError("not interrupted", f"answer {acked}: {seen[-200:]!r}")
            return ended, answered

    workers = [asyncio.ensure_future(background(other)) for other in others]
    ended: list[float] = []
    answered: list[float] = []
    try:
        if load:
            await asyncio.sleep(1.0)  # let the load get going
        for _ in range(tries):
            try:
                end, answer = await asyncio.wait_for(one_try(), WAIT)
                ended.append(end)
                answered.append(answer)
            except (httpx.HTTPError, StreamError, TimeoutError, KeyError) as exc:
                errors[short_error(exc)] += 1
    finally:
        stop.set()
        await asyncio.gather(*workers, return_exceptions=True)
    return {
        "load_streams": load,
        "tries": len(ended),
        "stream_end_p50_ms": ms(quantile(ended, 0.5)),
        "stream_end_p99_ms": ms(quantile(ended, 0.99)),
        "interrupt_answer_p50_ms": ms(quantile(answered, 0.5)),
        "errors": sum(errors.values()),
        "error_kinds": dict(errors.most_common(5)),
    }


# -- one repetition at one clients level ------------------------------------------------------


def store_url(options: argparse.Namespace, tmp: str) -> str:
    if options.store == "postgres":
        return str(options.dsn)
    return f"sqlite:///{tmp}/load.db"


def client_for(connections: int) -> Client:
    return Client(WAIT, connections)


def idle_memory(processes: Processes, workers: int) -> dict[str, Any]:
    """Every process's idle VmRSS and PSS (MiB), plus "engine + 1 worker" (one engine
    process, the first engine worker under a supervisor, and one web worker) and the sum
    of every engine and gunicorn process."""
    memory: dict[str, Any] = processes.idle_memory(workers)
    engine = memory.get("engine") or memory.get("engine worker 1")
    worker = memory.get("gunicorn worker 1")
    ours = [v for k, v in memory.items() if k.startswith(("engine", "gunicorn"))]
    keys = ("rss_mib", "pss_mib")
    if engine is not None and worker is not None:
        memory["engine + 1 worker"] = {k: round(engine[k] + worker[k], 1) for k in keys}
    memory["all processes but the fake"] = {k: round(sum(v[k] for v in ours), 1) for k in keys}
    return memory


async def warm_up(one: Driver, pools: Sequence[Client], cold: bool, limit: float) -> int:
    """One short run per client, all at once, so the measured runs find their keep-alive
    connections open (as steady clients do; with ``cold`` a single run, for the imports);
    the number that failed."""
    outcomes = await asyncio.gather(
        *(asyncio.wait_for(one(c, prompt(1, 0.0)), limit) for c in pools[: 1 if cold else None]),
        return_exceptions=True,
    )
    return sum(isinstance(o, BaseException) for o in outcomes)


@contextlib.asynccontextmanager
async def client_pools(clients: int, shared: bool) -> AsyncIterator[list[Client]]:
    """The clients of ``clients`` simulated clients: by default one :class:`Client` (one
    keep-alive connection, two when an interrupt is sent beside a stream) each; with
    ``shared``, one for all of them (at most ``clients + 8`` connections).

    (With ``httpx``, one pool for all cost the bench process more CPU than the servers it
    measured, its pool scanning its connections for each request: 256 slow floor streams,
    5.4 s of client CPU warm, 2.2 s cold, against 0.9 s with a client each.)"""
    async with contextlib.AsyncExitStack() as stack:
        if shared:
            client = await stack.enter_async_context(client_for(clients + 8))
            yield [client] * clients
        else:
            yield [await stack.enter_async_context(client_for(2)) for _ in range(clients)]


async def drive(
    processes: Processes, options: argparse.Namespace, clients: int, interrupts: bool
) -> dict[str, Any]:
    """Every scenario at this level, each with fresh clients (and so fresh connections)."""
    text = prompt(options.tokens, options.token_delay)
    runs_per_client = options.runs_per_client or max(1, 64 // clients)
    limit = WAIT + options.tokens * options.token_delay * 3
    out: dict[str, Any] = {"runs_per_client": runs_per_client}
    floor: Scenario | None = None
    for facade in ("floor", *options.facades):
        one = driver(facade, processes.llm_url, processes.base_url, options.conversations)
        async with client_pools(clients, options.shared_pool) as pools:
            if failed := await warm_up(one, pools, options.cold, limit):
                print(f"  {facade}: {failed} warm-up runs failed", file=sys.stderr)
            scenario = Scenario(facade, clients)
            before = processes.cpu()
            sampler = asyncio.ensure_future(sample_cpu(processes, scenario.cpu_peak))
            try:
                await run_scenario(one, scenario, pools, text, runs_per_client, limit)
            finally:
                sampler.cancel()
            scenario.cpu = cpu_delta(before, processes.cpu())
        out[facade] = scenario.summary(floor if facade != "floor" else None)
        floor = floor or scenario
        s = out[facade]
        print(
            f"  {facade:8} {clients:4} clients x {runs_per_client}: first token p50/p99 "
            f"{s['first_token_p50_ms']}/{s['first_token_p99_ms']} ms, first frame p50 "
            f"{s['first_frame_p50_ms']} ms, errors {s['errors']}",
            file=sys.stderr,
        )
    if interrupts and options.interrupts:
        async with client_pools(options.interrupt_load + 1, options.shared_pool) as pools:
            out["interrupt"] = await interrupt_phase(
                pools, processes.base_url, options.interrupts, prompt(200, 0.02)
            )
        print(f"  interrupt: {out['interrupt']}", file=sys.stderr)
    return out


def one_repetition(options: argparse.Namespace, clients: int, interrupts: bool) -> dict[str, Any]:
    threads = options.web_threads or max(64, clients)
    with tempfile.TemporaryDirectory(prefix="agentik-load-") as tmp:
        processes = Processes(
            options.web_workers,
            threads,
            store=store_url(options, tmp),
            fake_backlog=1024,
            engine_workers=options.engine_workers,
        )
        try:
            result: dict[str, Any] = {"web_threads": threads}
            result["idle_memory_mib"] = idle_memory(processes, options.web_workers)
            result.update(asyncio.run(drive(processes, options, clients, interrupts)))
            result["processes"] = list(processes.pids())
            return result
        finally:
            processes.stop()


# -- the report -----------------------------------------------------------------------------


def values(reps: list[dict[str, Any]], *path: str) -> list[float]:
    out: list[float] = []
    for rep in reps:
        node: Any = rep
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, int | float) and not math.isnan(node):
            out.append(float(node))
    return out


def cell(numbers: list[float], unit: str = " ms", sign: bool = False, runs: bool = True) -> str:
    """The median, then (with ``runs``) each repetition's value when there are several."""
    if not numbers:
        return "—"

    def fmt(x: float) -> str:
        text = f"{x:,.1f}" if abs(x) >= 10 else f"{x:,.2f}"
        return ("+" if sign and x >= 0 else "") + text

    text = fmt(statistics.median(numbers)) + unit
    if runs and len(numbers) > 1:
        text += " (runs: " + ", ".join(fmt(x) for x in numbers) + ")"
    return text


LABEL = {"agui": "AG-UI", "agentik": "`/agentik` send", "a2a": "A2A streaming"}


def target(facade: str, clients: int, slow: bool) -> str:
    if clients == 1:
        return "≤ +2 ms"
    if facade == "agentik":
        return "≤ 100 ms / ≤ 10 ms"
    return "≤ 200 ms" if slow or clients > 64 else "≤ 100 ms"


def markdown(results: dict[str, Any], options: argparse.Namespace) -> str:
    slow = options.token_delay > 0
    stream = f"{options.tokens} tokens" + (
        f" {options.token_delay * 1000:g} ms apart" if slow else ""
    )
    lines = ["| figure | floor | agentik | target |", "|---|---|---|---|"]
    for clients in options.clients:
        reps = results["levels"][str(clients)]
        per = reps[0]["runs_per_client"]
        for facade in options.facades:
            who = f"{LABEL[facade]}, {clients} client{'s' if clients > 1 else ''} x {per} runs, "
            frame = cell(values(reps, facade, "first_frame_p50_ms"), runs=False)
            first = "RUN_STARTED" if facade == "agui" else "first frame"
            errors = sum(values(reps, facade, "errors"))
            note = f"{first} p50 {frame}" + (f"; {errors:g} errors" if errors else "")
            if clients == 1:
                figure = f"{who}{stream}: first token over the floor (p50)"
                floor = cell(values(reps, "floor", "first_token_p50_ms"))
                ours = cell(values(reps, facade, "first_token_p50_over_floor_ms"), sign=True)
            else:
                figure = f"{who}{stream}: first token p99"
                floor = cell(values(reps, "floor", "first_token_p99_ms"))
                ours = cell(values(reps, facade, "first_token_p99_ms"))
            if facade == "agentik":
                figure += " / create p50"
                ours += " / " + cell(values(reps, facade, "create_p50_ms"))
            lines.append(
                f"| {figure} | {floor} | {ours} ({note}) | {target(facade, clients, slow)} |"
            )
    first_level = results["levels"][str(options.clients[0])]
    both = cell(values(first_level, "idle_memory_mib", "engine + 1 worker", "rss_mib"), " MiB")
    pss = cell(
        values(first_level, "idle_memory_mib", "engine + 1 worker", "pss_mib"), " MiB", runs=False
    )
    total = cell(
        values(first_level, "idle_memory_mib", "all processes but the fake", "rss_mib"),
        " MiB",
        runs=False,
    )
    lines.append(
        f"| idle RSS, engine + 1 worker (PSS) | — | {both} (PSS {pss}; all processes {total}) "
        "| ≤ 100 MB |"
    )
    interrupt_reps = [r for level in results["levels"].values() for r in level if "interrupt" in r]
    if interrupt_reps:
        p99 = cell(values(interrupt_reps, "interrupt", "stream_end_p99_ms"))
        p50 = cell(values(interrupt_reps, "interrupt", "stream_end_p50_ms"), runs=False)
        lines.append(
            f"| interrupt → stream end with {options.interrupt_load} other streams | — | "
            f"p99 {p99} (p50 {p50}) | ≤ 20 ms |"
        )
    lines += ["", detail_table(results, options), "", memory_table(first_level)]
    return "\n".join(lines)


def detail_table(results: dict[str, Any], options: argparse.Namespace) -> str:
    """Every scenario's medians, and CPU per run of the engine and the web workers."""
    head = (
        "| clients | facade | first byte p50/p99 | first frame p50/p99 | first token p50/p99 "
        "| over floor p50/p99 | stream p50 | errors "
        "| CPU ms per run (share of a core: mean, busiest second) |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|"]
    for clients in options.clients:
        reps = results["levels"][str(clients)]
        for facade in ("floor", *options.facades):

            def pair(name: str, facade: str = facade, reps: list[dict[str, Any]] = reps) -> str:
                p50 = values(reps, facade, f"{name}_p50_ms")
                p99 = values(reps, facade, f"{name}_p99_ms")
                if not p50:
                    return "—"
                return f"{statistics.median(p50):.1f} / {statistics.median(p99):.1f}"

            over = "—"
            if facade != "floor":
                o50 = values(reps, facade, "first_token_p50_over_floor_ms")
                o99 = values(reps, facade, "first_token_p99_over_floor_ms")
                if o50:
                    over = f"+{statistics.median(o50):.1f} / +{statistics.median(o99):.1f}"
            names = sorted({n for r in reps for n in r[facade]["cpu_ms_per_run"]})
            cpu = ", ".join(
                f"{n} {statistics.median(values(reps, facade, 'cpu_ms_per_run', n)):.1f}"
                f" ({statistics.median(values(reps, facade, 'cpu_busy', n)):.0%}"
                f", peak {statistics.median(values(reps, facade, 'cpu_peak_busy', n) or [0]):.0%})"
                for n in names
                if n.startswith(("engine", "gunicorn worker", "bench client"))
                and any(values(reps, facade, "cpu_ms_per_run", n))
            )
            total = values(reps, facade, "total_p50_ms")
            errors = sum(values(reps, facade, "errors"))
            lines.append(
                f"| {clients} | {facade} | {pair('first_byte')} | {pair('first_frame')} | "
                f"{pair('first_token')} | {over} | {statistics.median(total):.1f} | "
                f"{errors:g} | {cpu} |"
            )
    return "\n".join(lines)


def memory_table(reps: list[dict[str, Any]]) -> str:
    lines = ["| idle process | RSS MiB | PSS MiB |", "|---|---|---|"]
    for name in reps[0]["idle_memory_mib"]:
        rss = cell(values(reps, "idle_memory_mib", name, "rss_mib"), "")
        pss = cell(values(reps, "idle_memory_mib", name, "pss_mib"), "")
        lines.append(f"| {name} | {rss} | {pss} |")
    return "\n".join(lines)


# -- main -----------------------------------------------------------------------------------


def csv(kind: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    def parse(text: str) -> list[Any]:
        return [kind(part) for part in text.split(",") if part.strip()]

    return parse


def facade_list(text: str) -> list[str]:
    chosen = csv(str)(text)
    unknown = [f for f in chosen if f not in FACADES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown facade(s) {unknown}; choose from {FACADES}")
    return chosen


def add_run_options(
    parser: argparse.ArgumentParser, *, min_runs: int, stacks: str, server: str
) -> None:
    """The options of what each run is and how often it runs (``bench.peer_bench`` has them
    too): ``min_runs`` the fewest runs a client does by default, ``stacks`` what each
    repetition starts, ``server`` whose web server ``--web-*`` size ("" or "agentik's ")."""
    add = parser.add_argument
    add("--tokens", type=int, default=200, help="text chunks per answer")
    add("--token-delay", type=float, default=0.0, help="seconds between chunks (0: full speed)")
    add(
        "--runs-per-client",
        type=int,
        default=0,
        help=f"runs each client does (0: max({min_runs}, 64/clients))",
    )
    add("--repeat", type=int, default=3, help=f"repetitions ({stacks}); medians reported")
    add("--web-workers", type=int, default=2, help=f"{server}gunicorn workers")
    add(
        "--web-threads",
        type=int,
        default=0,
        help=f"{server}threads per worker (0: max(64, clients))",
    )


def check_run_options(parser: argparse.ArgumentParser, options: argparse.Namespace) -> None:
    """Refuse ``--clients`` (a list), ``--tokens`` and ``--repeat`` below 1."""
    if not options.clients or min(options.clients) < 1 or options.tokens < 1 or options.repeat < 1:
        parser.error("--clients, --tokens and --repeat must be positive")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    add = parser.add_argument
    add("--facades", type=facade_list, default=list(FACADES), help="agui,agentik,a2a")
    add("--clients", type=csv(int), default=[1, 64, 256], help="concurrency levels, e.g. 1,64,256")
    add_run_options(parser, min_runs=1, stacks="a fresh stack each", server="")
    add("--store", choices=("sqlite", "postgres"), default="sqlite")
    add("--dsn", default="postgresql://127.0.0.1:5432/test", help="PostgreSQL for --store postgres")
    add("--engine-workers", type=int, default=1, help="engine processes (needs --store postgres)")
    add("--cold", action="store_true", help="no warm-up: clients connect during the runs")
    add("--shared-pool", action="store_true", help="one client (connection pool) for all")
    add(
        "--conversations",
        action="store_true",
        help="AG-UI: each client's runs are the turns of one thread (not with --shared-pool)",
    )
    add("--interrupts", type=int, default=20, help="interrupt tries per repetition (0: skip)")
    add("--interrupt-load", type=int, default=32, help="streams running during the interrupts")
    add("--out", type=Path, default=Path("load_bench.json"), help="JSON results")
    options = parser.parse_args(argv)  # fmt: skip
    if options.conversations and options.shared_pool:
        parser.error("--conversations needs a client per conversation: not with --shared-pool")
    if options.engine_workers > 1 and options.store != "postgres":
        parser.error("--engine-workers > 1 needs --store postgres (SQLite serves one engine)")
    check_run_options(parser, options)
    return options


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt, so every ``finally`` stops its processes."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> None:
    options = parse(argv)
    results: dict[str, Any] = {
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(options).items()},
        "levels": {},
    }
    try:
        with sigterm_as_interrupt():
            for repetition in range(options.repeat):
                for index, clients in enumerate(options.clients):
                    print(f"repetition {repetition + 1}, {clients} clients", file=sys.stderr)
                    # The interrupt test once per repetition, on the first level's stack.
                    rep = one_repetition(options, clients, interrupts=index == 0)
                    results["levels"].setdefault(str(clients), []).append(rep)
                    options.out.write_text(json.dumps(results, indent=2))
    except KeyboardInterrupt:
        # Every stack is stopped by its ``finally``; what finished is already in --out.
        print(f"interrupted: the finished levels are in {options.out}", file=sys.stderr)
        raise SystemExit(130) from None
    results["markdown"] = markdown(results, options)
    options.out.write_text(json.dumps(results, indent=2))
    print(results["markdown"])


__all__ = ["Markers", "Run", "Scenario", "StreamError", "main"]

if __name__ == "__main__":
    main()
