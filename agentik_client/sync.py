"""The blocking client: :class:`Client`."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import TypeVar

import grpc

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from agentik_client import errors
from agentik_client._common import (
    DEFAULT_TARGET,
    StreamState,
    as_error,
    lost,
    metadata,
    run_request,
)

__all__ = ["Client", "EventStream"]

_T = TypeVar("_T")


class Client:
    """A blocking client of the engine's gRPC API (``AgentEngine``).

    ``token``: sent as ``authorization: Bearer``. ``credentials``: TLS (default: plaintext).
    ``reconnect_within``: how long a broken stream keeps trying to resume, in seconds.
    Every refusal is an :class:`agentik_client.errors.AgentikError`.
    """

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        token: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        reconnect_within: float = 30.0,
    ) -> None:
        self._channel = (
            grpc.secure_channel(target, credentials)
            if credentials is not None
            else grpc.insecure_channel(target)
        )
        self._stub = pb_grpc.AgentEngineStub(self._channel)
        self._metadata = metadata(token)
        self.reconnect_within = reconnect_within

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def create_session(self, title: str = "", session_id: str = "") -> pb.Session:
        request = pb.CreateSessionRequest(title=title, session_id=session_id)
        return self._unary(self._stub.CreateSession, request)

    def get_session(self, session_id: str) -> pb.Session:
        return self._unary(self._stub.GetSession, pb.GetSessionRequest(session_id=session_id))

    def list_sessions(self, offset: int = 0, limit: int = 0) -> pb.ListSessionsResponse:
        request = pb.ListSessionsRequest(offset=offset, limit=limit)
        return self._unary(self._stub.ListSessions, request)

    def fork(self, session_id: str, up_to_message_id: str, new_session_id: str = "") -> pb.Session:
        """A new session of the caller's holding a copy of ``session_id``'s messages up to
        and including ``up_to_message_id`` (``new_session_id``, or a generated id)."""
        request = pb.ForkSessionRequest(
            session_id=session_id,
            up_to_message_id=up_to_message_id,
            new_session_id=new_session_id,
        )
        return self._unary(self._stub.ForkSession, request)

    def delete_session(self, session_id: str) -> None:
        self._unary(self._stub.DeleteSession, pb.DeleteSessionRequest(session_id=session_id))

    def get_run(self, run_id: str) -> pb.RunInfo:
        return self._unary(self._stub.GetRun, pb.GetRunRequest(run_id=run_id))

    def interrupt(self, session_id: str, run_id: str = "") -> pb.InterruptResponse:
        request = pb.InterruptRequest(session_id=session_id, run_id=run_id)
        return self._unary(self._stub.Interrupt, request)

    def run(
        self,
        session_id: str,
        text: str | None = None,
        *,
        messages: list[pb.Message] | None = None,
        run_id: str | None = None,
        create_session: bool = False,
        request: pb.RunRequest | None = None,
    ) -> EventStream:
        """A turn's events, from RUN_STARTED to RUN_FINISHED or RUN_ERROR. A stream that
        breaks resumes by itself (``Subscribe`` after the last seq delivered): every event is
        delivered once, in order."""
        if request is None:
            request = run_request(
                session_id, text, messages=messages, run_id=run_id, create_session=create_session
            )
        elif not request.run_id:
            request.run_id = run_request(request.session_id, None).run_id
        state = StreamState(request.session_id, run_id=request.run_id)
        return EventStream(self, state, request)

    def subscribe(self, session_id: str, after_seq: int = 0) -> EventStream:
        """A session's events after ``after_seq``, live, until the caller stops; it resumes
        by itself after a broken connection, like :meth:`run`."""
        return EventStream(self, StreamState(session_id, last_seq=after_seq), None)

    def _open(self, state: StreamState, request: pb.RunRequest | None) -> Iterator[pb.Event]:
        if request is not None and not state.reconnects:
            return self._stub.Run(request, metadata=self._metadata)
        start_seq = None
        if state.run_id and not state.last_seq:
            try:
                start_seq = self.get_run(state.run_id).start_seq
            except errors.NotFound:  # it never started: start it now
                assert request is not None
                return self._stub.Run(request, metadata=self._metadata)
        subscribe = state.resume_request(start_seq)
        return self._stub.Subscribe(subscribe, metadata=self._metadata)

    def _unary(self, method: Callable[..., _T], request: object) -> _T:
        try:
            return method(request, metadata=self._metadata)
        except grpc.RpcError as error:
            raise errors.from_rpc_error(error) from None


class EventStream:
    """The events of a run or a subscription: iterate it. ``last_seq`` is the seq of the last
    event delivered, ``reconnects`` how many times the stream was resumed."""

    def __init__(self, client: Client, state: StreamState, request: pb.RunRequest | None) -> None:
        self._client = client
        self._state = state
        self._request = request

    @property
    def run_id(self) -> str:
        return self._state.run_id

    @property
    def last_seq(self) -> int:
        return self._state.last_seq

    @property
    def reconnects(self) -> int:
        return self._state.reconnects

    def __iter__(self) -> Iterator[pb.Event]:
        state, deadline = self._state, None
        while True:
            call = None
            try:
                call = self._client._open(state, self._request)
                for event in call:
                    if state.accept(event):
                        deadline = None
                        yield event
                    if state.ends(event):
                        return
                return
            except (grpc.RpcError, errors.AgentikError) as caught:
                error = as_error(caught)
                if not isinstance(error, errors.Unavailable):
                    raise error from None
                deadline = deadline or time.monotonic() + self._client.reconnect_within
                if time.monotonic() >= deadline:
                    raise lost(state, error) from None
                time.sleep(state.next_backoff())
            finally:
                if isinstance(call, grpc.Future):  # a caller that stops early ends the call
                    call.cancel()
