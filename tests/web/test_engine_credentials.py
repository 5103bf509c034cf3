"""What every engine call carries from the request being handled."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from flask import Flask

from web_facade.engine_credentials import (
    ForwardCredentials,
    forwardable,
    forwarded_authorization,
    forwarded_metadata,
)


class _Details:
    method = "/agentik.engine.v1.AgentEngine/GetSession"
    timeout = 5.0
    metadata = (("x-kept", "1"),)
    credentials = None
    wait_for_ready = None
    compression = None


def test_a_header_grpc_cannot_carry_goes_as_an_empty_bearer() -> None:
    assert forwardable("Bearer abc") == "Bearer abc"
    assert forwardable("Bearer caf\u00e9") == "Bearer"
    assert forwardable("Bearer a\nb") == "Bearer"
    assert forwardable("Bearer " + "a" * 8192) == "Bearer"


def test_only_a_request_with_the_header_forwards_it() -> None:
    app = Flask(__name__)
    assert forwarded_authorization() is None  # no request here
    with app.test_request_context(headers={"Authorization": "Bearer t1"}):
        assert forwarded_authorization() == "Bearer t1"
        assert forwarded_metadata() == (("authorization", "Bearer t1"),)
    with app.test_request_context():
        assert forwarded_authorization() is None
        assert forwarded_metadata() is None


def test_each_call_made_while_a_request_is_handled_carries_its_authorization() -> None:
    app = Flask(__name__)
    seen: list[Any] = []

    def continuation(details: Any, _request: Any) -> str:
        seen.append(details)
        return "answer"

    interceptor = ForwardCredentials()
    with app.test_request_context(headers={"Authorization": "Bearer t1"}):
        assert interceptor.intercept_unary_unary(continuation, _Details(), object()) == "answer"
        interceptor.intercept_unary_stream(continuation, _Details(), object())
    for details in seen:
        assert list(details.metadata) == [("x-kept", "1"), ("authorization", "Bearer t1")]
        assert (details.method, details.timeout) == (_Details.method, 5.0)
    outside = _Details()
    interceptor.intercept_unary_unary(continuation, outside, object())
    assert seen[-1] is outside  # nothing to add: the call goes as it was


def test_a_refused_call_raises_its_error_once() -> None:
    error = grpc.RpcError("refused")

    def continuation(_details: Any, _request: Any) -> grpc.RpcError:
        return error

    refused = ForwardCredentials().intercept_unary_unary(continuation, _Details(), object())
    with pytest.raises(grpc.RpcError) as raised:
        refused.result()
    assert raised.value is error
    with pytest.raises(RuntimeError, match="raised once"):
        refused.result()
