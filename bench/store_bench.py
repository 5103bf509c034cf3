"""A store alone, in this process: the calls of a short run, many runs at once.

Each run makes the store calls the engine makes for a short turn (``begin_run`` of a new
session, the session read of its stream, two reads of its push configs, two message
appends, three event appends, a rename and ``finish_run``) and the bench reports the CPU
this process used per run and, for a PostgreSQL on this host, the CPU the backends
serving the store's connections used meanwhile (the server's background writers left
out). No gRPC, no LLM, no engine: the store's own cost, to compare stores and store
changes with less noise than the engine bench (docs/performance.md, "One query string per
batch").

Run: ``python -m bench.store_bench --store postgresql://…/a_fresh_database`` (or
``sqlite:///path.db``, ``memory://``); ``--runs``, ``--concurrency``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid
from datetime import timedelta
from pathlib import Path

from engine_service.core import events as ev
from engine_service.core.clock import utc_now
from engine_service.core.models import Message, Role, RunStatus, TextPart
from engine_service.core.store import Lease, RunHold, SessionStore
from engine_service.stores import open_store, redacted_url

__all__ = ["backends", "cpu_of", "main", "one_run"]


async def one_run(store: SessionStore, tokens: int = 5) -> None:
    """The store calls of one short turn of ``tokens`` text deltas, on a new session."""
    session_id, run_id, reply_id = uuid.uuid4().hex, uuid.uuid4().hex, uuid.uuid4().hex
    now = utc_now()
    lease = Lease("bench", now + timedelta(seconds=30)) if store.shared else None
    hold = RunHold(run_id, lease.replica if lease else "")  # its writes besides events
    begun = await store.begin_run(
        session_id,
        run_id,
        now,
        create=True,
        reserve=64,
        owner="bench",
        require_owner=True,
        lease=lease,
        admit=lambda pending: None,
        kept='{"messages":1}',
    )
    await store.get_session(session_id)
    await store.session_push_configs(session_id)
    seq = begun.session.last_seq

    def events(*bodies: ev.EventBody) -> list[ev.Event]:
        nonlocal seq
        made = []
        for body in bodies:
            seq += 1
            made.append(ev.Event(seq, time.time(), session_id, run_id, body))
        return made

    asked = Message(uuid.uuid4().hex, Role.USER, [TextPart("hi")], created_at=now, run_id=run_id)
    await store.append_messages(session_id, [asked], hold=hold)
    await store.append_events(
        session_id, events(ev.RunStarted(), ev.MessageStored(asked)), reserve_through=seq + 64
    )
    deltas = [ev.TextMessageContent(reply_id, f"token{i} ") for i in range(tokens)]
    await store.append_events(session_id, events(ev.TextMessageStart(reply_id), *deltas[:2]))
    await store.append_events(session_id, events(*deltas[2:]))
    text = "".join(d.delta for d in deltas)
    reply = Message(reply_id, Role.ASSISTANT, [TextPart(text)], created_at=now, run_id=run_id)
    await store.append_messages(session_id, [reply], hold=hold)
    await store.rename_session(session_id, "hi", utc_now())
    usage = ev.Usage(10, tokens, 10 + tokens)
    await store.finish_run(
        session_id,
        run_id,
        RunStatus.SUCCEEDED,
        utc_now(),
        events=events(ev.TextMessageEnd(reply_id), ev.RunFinished(usage=usage)),
        usage=usage,
        hold=hold,
    )
    await store.session_push_configs(session_id)


def backends(url: str) -> list[int]:
    """The pids of the PostgreSQL backends connected to the database ``url`` names (none
    for another store): the store's connections, not other databases' work."""
    if not url.startswith(("postgresql:", "postgres:")):
        return []
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return [int(row[0]) for row in rows]


def cpu_of(pids: list[int]) -> dict[int, float]:
    """CPU seconds used so far by each of ``pids`` (on this host; gone ones left out)."""
    used: dict[int, float] = {}
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        used[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return used


async def bench(url: str, runs: int, concurrency: int) -> dict[str, float]:
    """``runs`` short turns on the store ``url`` names, ``concurrency`` at a time."""
    store = open_store(url)
    try:
        if store.shared:
            await store.watch(lambda signal: None)  # as an engine does: it hears every write
        for _ in range(min(5, runs)):
            await one_run(store)  # connections opened, statements prepared
        gate = asyncio.Semaphore(concurrency)

        async def guarded() -> None:
            async with gate:
                await one_run(store)

        before = cpu_of(backends(url))
        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.gather(*(guarded() for _ in range(runs)))
        wall = time.perf_counter() - wall
        cpu = time.process_time() - cpu
        after = cpu_of(backends(url))
        server = sum(used - before.get(pid, 0.0) for pid, used in after.items())
    finally:
        await store.close()
    return {
        "runs_per_s": round(runs / wall, 1),
        "cpu_ms_per_run": round(1000 * cpu / runs, 3),
        "server_cpu_ms_per_run": round(1000 * server / runs, 3),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True, help="memory://, sqlite:///PATH, postgresql://")
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=64)
    options = parser.parse_args(argv)
    if options.runs < 1 or options.concurrency < 1:
        parser.error("--runs and --concurrency must be positive")
    result = asyncio.run(bench(options.store, options.runs, options.concurrency))
    print(json.dumps({"store": redacted_url(options.store), "runs": options.runs, **result}))


if __name__ == "__main__":
    main()
