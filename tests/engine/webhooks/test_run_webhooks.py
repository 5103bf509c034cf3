"""Run webhooks over gRPC: ``RunRequest.webhook``, the signed payload of the run's end, the
SSRF guard's refusals at the request, and ``ListFailedWebhooks`` for admins."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import re
import socket

import grpc
import pytest

from agentik.config import Settings
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.engine.auth_helpers import TOKENS_ENV, as_
from tests.engine.harness import WAIT, Harness, engine_settings, refused, run, running_engine, user
from tests.engine.webhooks.receiver import Receiver
from tests.fakes.fake_openai import FakeOpenAI, FakeReply

SECRET = "whsec_" + base64.b64encode(b"run-webhook-key-0123456789").decode()


def settings(llm: FakeOpenAI, **env: str) -> Settings:
    return engine_settings(
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_API_KEY="test-key",
        AGENTIK_LLM_MAX_RETRIES="0",
        AGENTIK_WEBHOOK_SECRET=SECRET,
        AGENTIK_WEBHOOKS_BASE_DELAY="0.05",
        AGENTIK_WEBHOOKS_POLL_INTERVAL="0.05",
        **env,
    )


async def test_a_run_with_a_webhook_posts_its_outcome_signed(llm: FakeOpenAI) -> None:
    llm.enqueue(FakeReply(text="Paris is the capital."))
    with Receiver() as hook:
        async with running_engine(settings(llm, AGENTIK_WEBHOOKS_ALLOW_PRIVATE="1")) as engine:
            request = pb.RunRequest(
                session_id="s1",
                run_id="r1",
                create_session=True,
                messages=[user("capital of France?")],
                webhook=pb.Webhook(url=hook.url),
            )
            await run(engine, request)
            (got,) = await asyncio.to_thread(hook.wait_for, 1, WAIT)
    payload = json.loads(got.body)
    assert payload["type"] == "run.finished"
    assert (payload["runId"], payload["sessionId"]) == ("r1", "s1")
    assert re.fullmatch(r"run_r1\.[0-9a-f]{16}", payload["id"]), payload["id"]
    assert payload["outcome"] == "success"
    assert payload["message"]["text"] == "Paris is the capital."
    assert set(payload["usage"]) == {"inputTokens", "outputTokens", "totalTokens", "cachedTokens"}
    assert got.headers["webhook-id"] == payload["id"]
    key = base64.b64decode(SECRET.removeprefix("whsec_"))
    signed = f"{payload['id']}.{got.headers['webhook-timestamp']}.".encode() + got.body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    assert got.headers["webhook-signature"] == f"v1,{expected}"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://hooks.example.com/in", "must use https"),
        ("https://127.0.0.1/in", "loopback address"),
        ("https://10.0.0.7/in", "private address"),
        ("https://169.254.169.254/", "cloud metadata address"),
    ],
)
async def test_a_clearly_refused_webhook_refuses_the_run_naming_why(
    llm: FakeOpenAI, url: str, why: str
) -> None:
    async with running_engine(settings(llm)) as engine:
        request = pb.RunRequest(
            session_id="s1",
            create_session=True,
            messages=[user("hi")],
            webhook=pb.Webhook(url=url),
        )
        assert why in await refused(engine, request)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await engine.stub.GetSession(pb.GetSessionRequest(session_id="s1"))
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND  # nothing was started


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_failed_webhooks_are_listed_for_admins_only(llm: FakeOpenAI) -> None:
    llm.enqueue(FakeReply(text="ok"))
    env = {
        "AGENTIK_WEBHOOKS_ALLOW_PRIVATE": "1",
        "AGENTIK_WEBHOOKS_MAX_ATTEMPTS": "2",
        "AGENTIK_TOKENS": TOKENS_ENV,
        "AGENTIK_ADMINS": "ops",
    }
    async with running_engine(settings(llm, **env)) as engine:
        down = f"http://127.0.0.1:{free_port()}/hook"
        request = pb.RunRequest(
            session_id="s1",
            run_id="r1",
            create_session=True,
            messages=[user("hi")],
            webhook=pb.Webhook(url=down),
        )
        await run_as(engine, request, "alice")
        async with asyncio.timeout(WAIT):
            while True:
                page = await engine.stub.ListFailedWebhooks(
                    pb.ListFailedWebhooksRequest(), metadata=as_("ops")
                )
                if page.total:
                    break
                await asyncio.sleep(0.05)
        (failed,) = page.webhooks
        assert (failed.kind, failed.url, failed.attempts) == ("run", down, 2)
        assert failed.id.startswith("run_r1.")
        assert failed.last_error == "connection refused"
        assert failed.fail_time.seconds >= failed.create_time.seconds > 0
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await engine.stub.ListFailedWebhooks(
                pb.ListFailedWebhooksRequest(), metadata=as_("alice")
            )
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert caught.value.details() == "only admins may list failed webhooks"
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await engine.stub.ListFailedWebhooks(
                pb.ListFailedWebhooksRequest(limit=5000), metadata=as_("ops")
            )
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def run_as(engine: Harness, request: pb.RunRequest, principal: str) -> None:
    call = engine.stub.Run(request, metadata=as_(principal))
    async with asyncio.timeout(WAIT):
        while await call.read() is not grpc.aio.EOF:
            pass


async def test_a_run_id_freed_by_a_deleted_conversation_gets_its_own_webhook(
    llm: FakeOpenAI,
) -> None:
    """Deleting a conversation frees its run ids; a later run under one of them (here by
    another principal) used to find its webhook "already added" and never sent it."""
    env = {"AGENTIK_WEBHOOKS_ALLOW_PRIVATE": "1", "AGENTIK_TOKENS": TOKENS_ENV}
    with Receiver() as hook:
        async with running_engine(settings(llm, **env)) as engine:
            for who, session in (("bob", "s-bob"), ("alice", "s-alice")):
                request = pb.RunRequest(
                    session_id=session,
                    run_id="predictable-run",
                    create_session=True,
                    messages=[user(f"hi from {who}")],
                    webhook=pb.Webhook(url=f"{hook.url}/{who}"),
                )
                await run_as(engine, request, who)
                if who == "bob":
                    await asyncio.to_thread(hook.wait_for, 1, WAIT)
                    await engine.stub.DeleteSession(
                        pb.DeleteSessionRequest(session_id=session), metadata=as_(who)
                    )
            got = await asyncio.to_thread(hook.wait_for, 2, WAIT)
    by_path = {r.path: json.loads(r.body) for r in got}
    assert set(by_path) == {"/hook/bob", "/hook/alice"}
    assert by_path["/hook/alice"]["sessionId"] == "s-alice"
    assert by_path["/hook/alice"]["message"]["text"] == "Echo: hi from alice"
    bobs, alices = by_path["/hook/bob"]["id"], by_path["/hook/alice"]["id"]
    assert bobs != alices and {bobs[:20], alices[:20]} == {"run_predictable-run."}


async def test_a_run_id_freed_by_a_deleted_conversation_gets_its_own_a2a_pushes(
    llm: FakeOpenAI,
) -> None:
    """The same for A2A push: the deliveries of a task's updates belong to its run."""
    env = {"AGENTIK_WEBHOOKS_ALLOW_PRIVATE": "1", "AGENTIK_TOKENS": TOKENS_ENV}
    with Receiver() as hook:
        async with running_engine(settings(llm, **env)) as engine:
            for count, (who, session) in enumerate((("bob", "s-bob"), ("alice", "s-alice"))):
                config = pb.PushConfig(id="c1", task_id="taken-task", url=f"{hook.url}/{who}")
                request = pb.RunRequest(
                    session_id=session,
                    run_id="taken-task",
                    create_session=True,
                    messages=[user(f"hi from {who}")],
                    push_configs=[config],
                )
                await run_as(engine, request, who)
                # WORKING, the answer's artifact, COMPLETED: three updates per run.
                await asyncio.to_thread(hook.wait_for, 3 * (count + 1), WAIT)
                if who == "bob":
                    await engine.stub.DeleteSession(
                        pb.DeleteSessionRequest(session_id=session), metadata=as_(who)
                    )
    paths = sorted(r.path for r in hook.received)
    assert paths == ["/hook/alice"] * 3 + ["/hook/bob"] * 3
    assert len({r.headers["webhook-id"] for r in hook.received}) == 6
