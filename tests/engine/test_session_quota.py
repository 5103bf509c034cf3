"""How many conversations one principal may have (``[auth] max_sessions_per_caller``,
``core.quota``): making one more — ``CreateSession``, ``ForkSession``, a ``Run`` or an A2A
message that makes its conversation — is RESOURCE_EXHAUSTED naming the setting, and leaves
nothing behind; continuing a conversation is not making one. Real engine, real gRPC."""

from __future__ import annotations

from typing import Any

import grpc
from a2a.types import Message, Part, Role, SendMessageRequest, a2a_pb2_grpc

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.engine.auth_helpers import TOKENS_ENV, as_, outcome, rpc_error, trailers
from tests.engine.harness import collect, engine_settings, running_engine, user
from tests.fakes.fake_openai import FakeOpenAI

NAMED = "you (alice) have 2 conversations stored, the most [auth] max_sessions_per_caller"


def _quota_refusal(error: grpc.aio.AioRpcError) -> None:
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()
    assert str(error.details()).startswith(NAMED), error.details()
    assert trailers(error)["agentik-error"] == "quota_exceeded"
    assert "retry-after" not in trailers(error)  # waiting does not help: deleting does


async def test_a_principal_at_its_conversations_makes_no_more_until_it_deletes_one(
    llm: FakeOpenAI,
) -> None:
    settings = engine_settings(
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_API_KEY="test-key",
        AGENTIK_TOKENS=TOKENS_ENV,
        AGENTIK_MAX_SESSIONS_PER_CALLER="2",
    )
    alice = as_("alice")
    async with running_engine(settings) as h:
        await h.stub.CreateSession(pb.CreateSessionRequest(session_id="one"), metadata=alice)
        first = pb.RunRequest(session_id="two", create_session=True, messages=[user("hi")])
        events = await collect(h.stub.Run(first, metadata=alice))

        _quota_refusal(
            await rpc_error(
                h.stub.CreateSession(pb.CreateSessionRequest(session_id="three"), metadata=alice)
            )
        )
        fork = pb.ForkSessionRequest(session_id="two", up_to_message_id=_first_message(events))
        _quota_refusal(await rpc_error(h.stub.ForkSession(fork, metadata=alice)))
        made = pb.RunRequest(session_id="three", create_session=True, messages=[user("x")])
        streamed, error = await outcome(h.stub.Run(made, metadata=alice))
        assert not streamed and error is not None
        _quota_refusal(error)
        a2a: Any = a2a_pb2_grpc.A2AServiceStub(h.channel)  # type: ignore[no-untyped-call]
        message = Message(message_id="m1", role=Role.ROLE_USER, parts=[Part(text="hi")])
        _quota_refusal(
            await rpc_error(a2a.SendMessage(SendMessageRequest(message=message), metadata=alice))
        )

        listed = await h.stub.ListSessions(pb.ListSessionsRequest(), metadata=alice)
        assert sorted(s.id for s in listed.sessions) == ["one", "two"]  # nothing left behind
        runs = await h.stub.ListRuns(pb.ListRunsRequest(), metadata=alice)
        assert runs.total == 1

        # Continuing a conversation makes none, create_session or not.
        again = pb.RunRequest(session_id="two", create_session=True, messages=[user("again")])
        assert (await collect(h.stub.Run(again, metadata=alice)))[-1].HasField("run_finished")
        await h.stub.CreateSession(pb.CreateSessionRequest(), metadata=as_("bob"))  # his own

        await h.stub.DeleteSession(pb.DeleteSessionRequest(session_id="one"), metadata=alice)
        await h.stub.CreateSession(pb.CreateSessionRequest(session_id="three"), metadata=alice)


def _first_message(events: list[pb.Event]) -> str:
    return next(e.message_stored.message.id for e in events if e.HasField("message_stored"))
