"""A Struct or Value holding a number JSON cannot carry, and unexpected exceptions in RPCs."""

from __future__ import annotations

import logging
import math

import grpc
import pytest
from google.protobuf import struct_pb2

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.engine.harness import (
    Harness,
    refused,
    run,
    user,
)


def _inf() -> struct_pb2.Value:
    return struct_pb2.Value(number_value=math.inf)


def _struct_with(value: float) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.fields["n"].number_value = value
    return out


# -- 1. numbers JSON cannot carry --------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (pb.RunRequest(session_id="s", create_session=True, state=_inf()), "state"),
        (
            pb.RunRequest(
                session_id="s",
                create_session=True,
                state=struct_pb2.Value(struct_value=_struct_with(math.nan)),
            ),
            "state",
        ),
        (
            pb.RunRequest(
                session_id="s", create_session=True, forwarded_props=_struct_with(-math.inf)
            ),
            "forwarded_props",
        ),
        (
            pb.RunRequest(
                session_id="s",
                create_session=True,
                tools=[pb.Tool(name="client_tool", parameters=_struct_with(math.inf))],
            ),
            "tools[0].parameters",
        ),
    ],
)
async def test_an_infinite_or_nan_number_in_a_run_is_invalid_argument_naming_the_field(
    harness: Harness, request_: pb.RunRequest, field: str
) -> None:
    request_.messages.append(user("hi"))
    details = await refused(harness, request_)

    assert details.startswith(field)
    assert "ValueError" not in details
    assert (await harness.stub.ListSessions(pb.ListSessionsRequest())).total == 0


async def test_an_unexpected_exception_in_an_rpc_is_internal_with_a_plain_message_and_logged(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(caller: object, session_id: str) -> None:
        raise RuntimeError("secret detail at /var/lib/agentik")

    monkeypatch.setattr(harness.engine, "get_session", broken)
    with caplog.at_level(logging.ERROR), pytest.raises(grpc.aio.AioRpcError) as caught:
        await harness.stub.GetSession(pb.GetSessionRequest(session_id="s"))

    assert caught.value.code() == grpc.StatusCode.INTERNAL
    details = str(caught.value.details())
    assert details.startswith("internal error; see the engine log")
    assert "secret" not in details and "RuntimeError" not in details
    assert "secret detail at /var/lib/agentik" in caplog.text


async def test_an_unexpected_exception_while_a_run_streams_is_internal_naming_the_run(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(event: object) -> None:
        raise ValueError("cannot convert this event")

    monkeypatch.setattr("engine_service.servicer.event_to_pb", broken)
    request = pb.RunRequest(session_id="s", run_id="run-7", create_session=True)
    request.messages.append(user("hi"))
    with caplog.at_level(logging.ERROR), pytest.raises(grpc.aio.AioRpcError) as caught:
        await run(harness, request)

    assert caught.value.code() == grpc.StatusCode.INTERNAL
    assert str(caught.value.details()) == "internal error; see the engine log (run run-7)"
    assert "cannot convert this event" in caplog.text
