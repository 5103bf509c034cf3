"""Soak: many resumable streams through gunicorn while its web workers are killed at random.

Starts the fake LLM (a process), the engine (SQLite store in a temp directory) and the web
facade under gunicorn (``--workers``, 2 by default) with the end-to-end tests' ``Stack``, then
runs ``--streams`` clients for ``--seconds``. Each client owns a conversation and sends one
slow turn after another (``[[slow:S]] [[chunks:N]]``), reading each ``send`` stream to the
run's end; when its connection breaks it resumes with ``GET .../events?until_idle=true`` and
``Last-Event-ID``. Meanwhile a killer sends SIGKILL to a random web worker every few seconds
(``--kill-every``, jittered ±50 %); gunicorn starts a new one.

At the end every conversation's ids, as its client received them over all its connections,
are held against the store (the facade's full replay and the engine's own seq list over
gRPC): lost, duplicated and unknown ids, ids whose data differ. The figures are printed and
written as JSON (``--json``). It never fails on a number; the exit status is 1 when anything
was lost or duplicated.

Run: ``python -m bench.soak --streams 100 --seconds 180``; quickly:
``python -m bench.soak --streams 20 --seconds 20``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.fakes.fake_openai import FakeOpenAI
from tests.faults.ledger import (
    Ledger,
    StoreView,
    StreamRefused,
    StreamTimeout,
    audit,
    follow,
    send_request,
    store_view,
)
from tests.faults.procs import worker_pids
from tests.stack import Process, Stack

FAKE_LISTENING = re.compile(r"http://127\.0\.0\.1:(\d+)/v1")
TURN_WITHIN = 120.0
"""Upper bound for one turn, resumes included, in seconds."""


@dataclass
class Client:
    """One stream's client: its conversation's ledger over the whole soak."""

    ledger: Ledger
    turns: int = 0
    errors: list[str] = field(default_factory=list)
    """Turns that ended in an ``error`` event, or broke off (timeout, refused)."""
    busy: int = 0
    """Sends refused with 409: a run the client did not see start was still going."""


@dataclass
class Killer:
    kills: int = 0
    pids: list[int] = field(default_factory=list)


async def _client(
    http: httpx.AsyncClient, client: Client, text: str, until: float, stop: asyncio.Event
) -> None:
    """Turn after turn until ``until``; resume after every drop, never give up a run half read."""
    ledger = client.ledger
    catch_up = False
    while time.monotonic() < until and not stop.is_set():
        turn = f"turn {client.turns} {text}"
        request = None if catch_up else send_request(ledger.conversation_id, turn)
        try:
            ended = await follow(http, ledger, request, TURN_WITHIN, idle_ends_turn=True)
        except StreamRefused as exc:
            if exc.status != 409:
                client.errors.append(str(exc))
                return
            # A send whose answer was lost started a run after all: read it, then go on.
            client.busy += 1
            catch_up = True
            continue
        except StreamTimeout as exc:
            client.errors.append(str(exc))
            return
        if ended and not catch_up:
            client.turns += 1
        if ended and ledger.frames[-1].type != "end":
            client.errors.append(str(ledger.frames[-1].data))
        catch_up = False


async def _killer(master: int, every: float, killer: Killer, stop: asyncio.Event) -> None:
    """SIGKILL a random gunicorn worker every ``every`` seconds, ±50 %."""
    rng = random.Random()
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=every * rng.uniform(0.5, 1.5))
        workers = worker_pids(master)
        if stop.is_set() or not workers:
            continue
        pid = rng.choice(workers)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        killer.kills += 1
        killer.pids.append(pid)


async def _soak(stack: Stack, options: argparse.Namespace) -> dict[str, object]:
    limits = httpx.Limits(max_connections=options.streams * 2 + 16, max_keepalive_connections=64)
    async with httpx.AsyncClient(
        base_url=stack.base_url, timeout=httpx.Timeout(60.0), limits=limits
    ) as http:
        clients = []
        for _ in range(options.streams):
            created = await http.post("/agentik/conversations", json={"title": "soak"})
            created.raise_for_status()
            clients.append(Client(Ledger(created.json()["id"])))
        text = f"[[slow:{options.slow}]] [[chunks:{options.chunks}]]"
        stop = asyncio.Event()
        killer = Killer()
        start = time.monotonic()
        until = start + options.seconds
        killing = asyncio.create_task(
            _killer(stack.web.popen.pid, options.kill_every, killer, stop)
        )
        runs = [asyncio.create_task(_client(http, c, text, until, stop)) for c in clients]
        await asyncio.wait(runs, timeout=options.seconds)
        stop.set()  # no more kills; clients finish the turn they are in
        await asyncio.gather(*runs)
        await killing
        elapsed = time.monotonic() - start

        target = f"127.0.0.1:{stack.grpc_port}"
        views: dict[str, StoreView] = {}
        for client in clients:
            cid = client.ledger.conversation_id
            views[cid] = await store_view(http, target, cid, TURN_WITHIN)
    result = audit(((c.ledger.conversation_id, c.ledger) for c in clients), views)
    errors = [e for c in clients for e in c.errors]
    return {
        "streams": options.streams,
        "seconds": round(elapsed, 1),
        "workers": options.workers,
        "turns": sum(c.turns for c in clients),
        "events_received": result.received,
        "events_stored": sum(len(v.expected_ids) for v in views.values()),
        "lost": result.lost_count,
        "duplicated": result.duplicated_count,
        "unknown": sum(len(v) for v in result.unknown.values()),
        "differing": sum(len(v) for v in result.differing.values()),
        "store_problems": sum(len(v) for v in result.store_problems.values()),
        "reconnects": sum(c.ledger.resumes for c in clients),
        "failed_attempts": sum(c.ledger.failed_attempts for c in clients),
        "busy_sends": sum(c.busy for c in clients),
        "kills": killer.kills,
        "errors": len(errors),
        "error_samples": errors[:5],
        "lost_samples": {k[:12]: v[:10] for k, v in list(result.lost.items())[:5]},
        "duplicated_samples": {k[:12]: v[:10] for k, v in list(result.duplicated.items())[:5]},
        "options": vars(options),
    }


def _start(options: argparse.Namespace, logs: Path) -> tuple[Process, Stack]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    argv = [sys.executable, "-m", "tests.fakes.fake_openai", "--port", "0"]
    fake = Process("fake-llm", argv, env, logs)
    try:
        port = int(fake.wait_for_log(FAKE_LISTENING))
        # The fake runs in its own process (off this client's GIL); Stack only reads base_url.
        llm = FakeOpenAI(port=port)
        threads = options.threads or options.streams + 16
        stack = Stack(
            llm,
            logs,
            AGENTIK_STORE=f"sqlite:///{logs / 'soak.db'}",
            AGENTIK_WEB_WORKERS=str(options.workers),
            AGENTIK_WEB_THREADS=str(threads),
            AGENTIK_HEARTBEAT="2",
        )
    except BaseException:
        fake.stop()
        raise
    return fake, stack


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=100, help="concurrent streams")
    parser.add_argument("--seconds", type=float, default=180.0, help="how long to soak")
    parser.add_argument("--kill-every", type=float, default=4.0, help="seconds between kills")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers (2 or more)")
    parser.add_argument(
        "--threads", type=int, default=0, help="threads per worker (0: streams + 16)"
    )
    parser.add_argument("--chunks", type=int, default=100, help="text chunks per turn")
    parser.add_argument("--slow", type=float, default=0.05, help="seconds between chunks")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here too")
    options = parser.parse_args(argv)
    if options.workers < 2:
        parser.error("--workers must be 2 or more: one always serves while another restarts")

    logs = Path(tempfile.mkdtemp(prefix="agentik-soak-"))
    fake, stack = _start(options, logs)
    try:
        figures = asyncio.run(_soak(stack, options))
    finally:
        stack.stop()
        fake.stop()
    figures["logs"] = str(logs)
    text = json.dumps(figures, indent=2, default=str)
    print(text)
    path = options.json or logs / "soak.json"
    path.write_text(text + "\n")
    print(f"written to {path}", file=sys.stderr)
    return 1 if figures["lost"] or figures["duplicated"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
