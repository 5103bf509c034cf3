"""The routes' way to relay an engine stream, read as ``[web] stream_reader`` says.

``threads``: the request thread starts the sync call and a relay thread reads it
(:class:`~web_facade.stream.relay.EventRelay`). ``asyncio``: the call runs on the
worker's asyncio loop (:class:`~web_facade.stream.aio_relay.AioRelay`). Either way the
route gets a :class:`~web_facade.stream.relay.Relay`; the request's ``Authorization`` and
trace context are taken here, on the request thread.
"""

from __future__ import annotations

from typing import Any

from flask import has_app_context

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from web_facade.engine_client import current_engine, current_settings
from web_facade.engine_credentials import forwarded_metadata
from web_facade.stream.relay import OPEN_WAIT, EventRelay, Relay, Resume, opened

__all__ = ["follow", "open_run"]


def _on_loop() -> bool:
    return has_app_context() and current_settings().web.stream_reader == "asyncio"


def _aio_relay(method: str, request: Any, resume: Resume, admission: bool = False) -> Relay:
    from web_facade.stream.aio_relay import AioRelay

    engine = current_engine().aio_engine
    return AioRelay(engine, method, request, resume, forwarded_metadata(), admission)


def open_run(engine: Any, request: pb.RunRequest, wait: float = OPEN_WAIT) -> Relay:
    """Relay ``engine.Run(request)`` once the engine took it: a refusal within ``wait`` is
    raised as the ``grpc.RpcError`` (see :func:`~web_facade.stream.relay.opened`)."""
    resume = Resume.of_run(engine, request)
    relay = (
        _aio_relay("Run", request, resume)
        if _on_loop()
        else EventRelay(engine.Run(request), resume)
    )
    opened(relay, wait)
    return relay


def follow(engine: Any, request: pb.SubscribeRequest) -> Relay:
    """Relay ``engine.Subscribe(request)``, resumed if cut; the engine's response headers
    say it admitted the call (:func:`~web_facade.stream.relay.admitted` waits for them)."""
    resume = Resume.of_subscription(engine, request)
    if _on_loop():
        return _aio_relay("Subscribe", request, resume, admission=True)
    return EventRelay(engine.Subscribe(request), resume, admission=True)
