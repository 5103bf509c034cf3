"""A long conversation's cost per turn, against the fake LLM with a 4,000-token window.

For each stored length (10, 1,000, 10,000 and 100,000 messages by default) a conversation
is seeded straight into a SQLite store, with the checkpoint a past compaction leaves
(``core.context``: the summary, and the last few messages after it), and then the engine
(in this process, compaction on) runs turns on it against the fake OpenAI server (its
own process, so its CPU is not ours). Reported, as the medians of 3 repetitions of the
mean over 10 turns (a turn that compacts makes one more LLM request; each repetition holds
its share of them):

* **first token**: from ``start_run`` to the first text delta of the answer;
* **engine CPU per turn**: this process's CPU time (user + system) over the turn: the
  engine, the store's thread and the small client loop;
* **memory held**: the Python heap the turn allocates and holds at its peak
  (``tracemalloc``, on a fourth turn, so it does not slow the timed ones).

``--turns N`` then runs an N-turn conversation (500 in the issue) of ~300-token answers
on a 4,000-token window, for each compaction mode, and checks that no turn failed, that
the fake LLM never refused a request as too long, and that every message is stored.

Run: ``python -m bench.long_conversation_bench`` (about a minute on 2 cores), or
``--sizes 10,1000 --turns 0`` for a quick look.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path

from engine_service.core import events as ev
from engine_service.core.caller import ANONYMOUS
from engine_service.core.context import ContextLimits
from engine_service.core.engine import Engine, EngineLimits
from engine_service.core.limits import RunLimits
from engine_service.core.models import Message, Role, RunInput, TextPart
from engine_service.core.registry import ToolRegistry
from engine_service.core.store import Checkpoint
from engine_service.llm.openai_chat import OpenAIChatModel
from engine_service.stores import SqliteSessionStore

WINDOW = 4000
ANSWER_WORDS = 150  # about 300 tokens as the fake counts them
KEPT = 10
"""Messages after the seeded checkpoint."""
TURNS = 10
"""Turns per repetition (their mean is one of the three values whose median is shown)."""


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def seed(store: SqliteSessionStore, count: int) -> None:
    await store.create_session("s", "", datetime.now(UTC))
    batch: list[Message] = []
    for index in range(count):
        role = Role.USER if index % 2 == 0 else Role.ASSISTANT
        text = f"message {index} " + "words " * (20 if role is Role.USER else 150)
        batch.append(Message(id=f"m{index}", role=role, content=[TextPart(text)]))
        if len(batch) == 2000 or index == count - 1:
            await store.append_messages("s", batch)
            batch = []
    if count > KEPT:
        summary = "Summary: the user asked many questions and the assistant answered them."
        await store.save_checkpoint("s", Checkpoint(f"m{count - KEPT - 1}", summary, 20))


async def one_turn(engine: Engine, index: int) -> tuple[float, float]:
    """(first token in s, CPU in s) of one turn."""
    message = Message(id="", role=Role.USER, content=[TextPart(f"next question {index}")])
    began, cpu_before = time.perf_counter(), cpu()
    handle = await engine.start_run(ANONYMOUS, RunInput(session_id="s", messages=[message]))
    first = 0.0
    async for event in engine.run_events(handle):
        if isinstance(event.body, ev.TextMessageContent) and not first:
            first = time.perf_counter() - began
        if isinstance(event.body, ev.RunError):
            raise SystemExit(f"the turn failed: {event.body.code}: {event.body.message}")
    return first, cpu() - cpu_before


def engine_for(store: SqliteSessionStore, base_url: str, mode: str = "summarize") -> Engine:
    model = OpenAIChatModel(base_url=base_url, api_key="k", model="fake", max_retries=0)
    limits = ContextLimits(window=WINDOW, compaction=mode)
    return Engine(store, model, ToolRegistry(), EngineLimits(run=RunLimits(context=limits)))


async def measure(size: int, base_url: str, folder: Path) -> tuple[float, float, float]:
    store = SqliteSessionStore(folder / f"seeded-{size}.db")
    await seed(store, size)
    engine = engine_for(store, base_url)
    await engine.start()
    try:
        await one_turn(engine, -1)  # warm: connections, caches
        firsts, cpus = [], []
        for rep in range(3):
            # Each repetition takes several turns, so each holds its share of the turns
            # that compact (one more LLM request) whatever the length.
            turns = [await one_turn(engine, rep * TURNS + i) for i in range(TURNS)]
            firsts.append(statistics.mean(first for first, _ in turns))
            cpus.append(statistics.mean(spent for _, spent in turns))
        tracemalloc.start()
        await one_turn(engine, 99)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    finally:
        await engine.shutdown(1.0)
        await store.close()
    return statistics.median(firsts), statistics.median(cpus), peak / 1e6


async def long_run(turns: int, base_url: str, folder: Path, mode: str) -> str:
    store = SqliteSessionStore(folder / f"long-{mode}.db")
    engine = engine_for(store, base_url, mode)
    await engine.start()
    began = time.perf_counter()
    try:
        for index in range(turns):
            message = Message(id="", role=Role.USER, content=[TextPart(f"q{index} " + "why " * 20)])
            handle = await engine.start_run(
                ANONYMOUS, RunInput(session_id="s", create_session=True, messages=[message])
            )
            async for event in engine.run_events(handle):
                if isinstance(event.body, ev.RunError):
                    return f"{mode}: turn {index} FAILED: {event.body.code}"
        stored = len(await store.all_messages("s"))
    finally:
        await engine.shutdown(1.0)
        await store.close()
    took = time.perf_counter() - began
    return f"{mode}: {turns} turns, none failed, {stored} messages stored, {took:.0f} s"


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,1000,10000,100000")
    parser.add_argument("--turns", type=int, default=500)
    options = parser.parse_args(argv)
    fake = subprocess.Popen(  # noqa: ASYNC220 - before the loop does anything else
        [
            sys.executable,
            "-m",
            "tests.fakes.fake_openai",
            "--port",
            "0",
            "--context-window",
            str(WINDOW),
            "--answer-words",
            str(ANSWER_WORDS),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert fake.stdout is not None
        base_url = fake.stdout.readline().strip()
        with tempfile.TemporaryDirectory() as folder:
            print(
                "| stored messages | first token (ms) | engine CPU/turn (ms) | memory held (MB) |"
            )
            print("|---:|---:|---:|---:|")
            for size in (int(s) for s in options.sizes.split(",")):
                first, spent, held = await measure(size, base_url, Path(folder))
                print(
                    f"| {size:,} | {first * 1e3:.1f} | {spent * 1e3:.1f} | {held:.2f} |", flush=True
                )
            for mode in ("summarize", "trim") if options.turns else ():
                print(await long_run(options.turns, base_url, Path(folder), mode), flush=True)
            fake_turns = f"the fake LLM with a {WINDOW:,}-token window"
            print(f"(medians of 3 means of {TURNS} turns; {fake_turns}; answers of ~300 tokens)")
    finally:
        fake.terminate()
        fake.wait()


if __name__ == "__main__":
    asyncio.run(main())
