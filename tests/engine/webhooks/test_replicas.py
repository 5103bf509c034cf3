"""Two engines on one PostgreSQL store: each run webhook is delivered once, whichever engine
ran the run (or resumed it when the other lost it); and the attempts show in the metrics."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from functools import partial

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentik.config import Settings
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.core import events as ev
from tests.engine.harness import (
    WAIT,
    Harness,
    engine_settings,
    kind,
    next_event,
    run,
    running_engine,
    user,
)
from tests.engine.webhooks.outbox import postgres_rows, settled
from tests.engine.webhooks.receiver import Receiver
from tests.fakes.fake_openai import FakeOpenAI


def fast(llm: FakeOpenAI, store: str, **env: str) -> Settings:
    return engine_settings(
        AGENTIK_STORE=store,
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_API_KEY="test-key",
        AGENTIK_LLM_MAX_RETRIES="0",
        AGENTIK_WEBHOOKS_ALLOW_PRIVATE="1",
        AGENTIK_WEBHOOKS_BASE_DELAY="0.05",
        AGENTIK_WEBHOOKS_POLL_INTERVAL="0.05",
        **env,
    )


async def test_two_engines_on_postgresql_deliver_each_run_webhook_once(
    llm: FakeOpenAI, pg_url: str
) -> None:
    with Receiver() as hook:
        async with (
            running_engine(fast(llm, pg_url)) as a,
            running_engine(fast(llm, pg_url)) as b,
        ):
            for index in range(12):
                engine = a if index % 2 else b
                request = pb.RunRequest(
                    session_id=f"s{index}",
                    run_id=f"r{index}",
                    create_session=True,
                    messages=[user("hi")],
                    webhook=pb.Webhook(url=hook.url),
                )
                await run(engine, request)
            # One row per run, each delivered: nothing more is sent of them.
            rows = [
                await asyncio.to_thread(settled, partial(postgres_rows, pg_url, f"r{i}"), WAIT)
                for i in range(12)
            ]
    assert [[row.status for row in of_run] for of_run in rows] == [["delivered"]] * 12
    assert sorted(r.headers["webhook-id"] for r in hook.received) == sorted(
        row.id for (row,) in rows
    )
    ids = sorted(r.headers["webhook-id"].partition(".")[0] for r in hook.received)
    assert ids == sorted(f"run_r{index}" for index in range(12))
    assert sorted(json.loads(r.body)["runId"] for r in hook.received) == sorted(
        f"r{index}" for index in range(12)
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_attempts_and_failures_are_counted_in_the_metrics(llm: FakeOpenAI) -> None:
    settings = fast(
        llm, "memory://", AGENTIK_METRICS_ADDR="127.0.0.1:0", AGENTIK_WEBHOOKS_MAX_ATTEMPTS="2"
    )
    async with running_engine(settings) as engine:
        down = f"http://127.0.0.1:{free_port()}/"
        request = pb.RunRequest(
            session_id="s1",
            create_session=True,
            messages=[user("hi")],
            webhook=pb.Webhook(url=down),
        )
        await run(engine, request)
        url = f"http://127.0.0.1:{engine.server.metrics_port}/metrics"
        async with httpx.AsyncClient() as client, asyncio.timeout(WAIT):
            while True:
                text = (await client.get(url)).text
                samples = {
                    (s.name, s.labels.get("kind"), s.labels.get("outcome")): s.value
                    for family in text_string_to_metric_families(text)
                    for s in family.samples
                }
                if samples.get(("agentik_webhook_attempts_total", "run", "failed")):
                    break
                await asyncio.sleep(0.05)
    assert samples[("agentik_webhook_attempts_total", "run", "retry")] == 1
    assert samples[("agentik_webhook_attempts_total", "run", "failed")] == 1


async def _ended(engine: Harness, run_id: str) -> None:
    """Until run ``run_id`` is stored as ended."""
    async with asyncio.timeout(WAIT * 2):
        while True:
            got = await engine.stub.GetRun(pb.GetRunRequest(run_id=run_id))
            if got.status not in (pb.RUN_STATUS_UNSPECIFIED, pb.RUN_STATUS_RUNNING):
                return
            await asyncio.sleep(0.05)


@pytest.mark.parametrize("how", ["its lease lapsed", "handed over"])
async def test_a_run_another_replica_resumed_sends_one_webhook_with_the_end_it_stored(
    llm: FakeOpenAI, pg_url: str, how: str
) -> None:
    """A loses its run mid-answer (a stall past its lease, or a stop that hands it over);
    B resumes it and, at its end, posts it to the run's webhook: one delivery, the whole
    answer. A, whose end of the run would be a guess, posts nothing."""
    chunks = 300
    settings = fast(llm, pg_url, AGENTIK_LEASE_SECONDS="1", AGENTIK_SHUTDOWN_GRACE="5")
    with Receiver() as hook:
        async with contextlib.AsyncExitStack() as stack:
            a = await stack.enter_async_context(running_engine(settings))
            b = await stack.enter_async_context(running_engine(settings))
            request = pb.RunRequest(
                session_id="s",
                run_id="r1",
                create_session=True,
                messages=[user(f"[[slow:0.01]] [[chunks:{chunks}]]")],
                webhook=pb.Webhook(url=hook.url),
            )
            call = a.stub.Run(request)
            texts = 0
            while texts < 20:
                texts += kind(await next_event(call)) == "text_message_content"
            call.cancel()
            if how == "handed over":
                await a.server.stop()  # b is alive: the run is handed to it
            else:
                assert a.engine._leases is not None
                await a.engine._leases.stop()  # a zombie: its run goes on, its lease lapses
            await _ended(b, "r1")
            stored = await b.engine.store.read_events("s", 0, 100_000)
            assert [e.body.name for e in stored if isinstance(e.body, ev.Custom)][-1:] == [
                "resumed"
            ], "B did not resume the run"
            # One row for the run, delivered: nothing more is sent of it (by A or B).
            (row,) = await asyncio.to_thread(settled, partial(postgres_rows, pg_url, "r1"), WAIT)
    assert row.status == "delivered"
    payload = json.loads(hook.received[0].body)
    assert [r.headers["webhook-id"] for r in hook.received] == [payload["id"]] == [row.id]
    assert payload["id"].startswith("run_r1.")
    assert (payload["runId"], payload["outcome"]) == ("r1", "success")
    assert payload["message"]["text"] == "".join(f"w{i} " for i in range(chunks))
