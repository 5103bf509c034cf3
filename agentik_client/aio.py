"""The asyncio client: :class:`AsyncClient`, the same calls as :class:`agentik_client.Client`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import grpc
import grpc.aio

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

__all__ = ["AsyncClient", "AsyncEventStream"]


class AsyncClient:
    """An asyncio client of the engine's gRPC API; see :class:`agentik_client.Client`."""

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        token: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        reconnect_within: float = 30.0,
    ) -> None:
        self._channel = (
            grpc.aio.secure_channel(target, credentials)
            if credentials is not None
            else grpc.aio.insecure_channel(target)
        )
        self._stub: Any = pb_grpc.AgentEngineStub(self._channel)
        self._metadata = metadata(token)
        self.reconnect_within = reconnect_within

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close()

    async def create_session(self, title: str = "", session_id: str = "") -> pb.Session:
        request = pb.CreateSessionRequest(title=title, session_id=session_id)
        session: pb.Session = await self._unary(self._stub.CreateSession, request)
        return session

    async def get_session(self, session_id: str) -> pb.Session:
        session: pb.Session = await self._unary(
            self._stub.GetSession, pb.GetSessionRequest(session_id=session_id)
        )
        return session

    async def list_sessions(self, offset: int = 0, limit: int = 0) -> pb.ListSessionsResponse:
        request = pb.ListSessionsRequest(offset=offset, limit=limit)
        found: pb.ListSessionsResponse = await self._unary(self._stub.ListSessions, request)
        return found

    async def fork(
        self, session_id: str, up_to_message_id: str, new_session_id: str = ""
    ) -> pb.Session:
        """A new session of the caller's holding a copy of ``session_id``'s messages up to
        and including ``up_to_message_id`` (``new_session_id``, or a generated id)."""
        request = pb.ForkSessionRequest(
            session_id=session_id,
            up_to_message_id=up_to_message_id,
            new_session_id=new_session_id,
        )
        forked: pb.Session = await self._unary(self._stub.ForkSession, request)
        return forked

    async def delete_session(self, session_id: str) -> None:
        await self._unary(self._stub.DeleteSession, pb.DeleteSessionRequest(session_id=session_id))

    async def get_run(self, run_id: str) -> pb.RunInfo:
        info: pb.RunInfo = await self._unary(self._stub.GetRun, pb.GetRunRequest(run_id=run_id))
        return info

    async def interrupt(self, session_id: str, run_id: str = "") -> pb.InterruptResponse:
        request = pb.InterruptRequest(session_id=session_id, run_id=run_id)
        reply: pb.InterruptResponse = await self._unary(self._stub.Interrupt, request)
        return reply

    def run(
        self,
        session_id: str,
        text: str | None = None,
        *,
        messages: list[pb.Message] | None = None,
        run_id: str | None = None,
        create_session: bool = False,
        request: pb.RunRequest | None = None,
    ) -> AsyncEventStream:
        """A turn's events (``async for``); resumes by itself like ``Client.run``."""
        if request is None:
            request = run_request(
                session_id, text, messages=messages, run_id=run_id, create_session=create_session
            )
        elif not request.run_id:
            request.run_id = run_request(request.session_id, None).run_id
        return AsyncEventStream(
            self, StreamState(request.session_id, run_id=request.run_id), request
        )

    def subscribe(self, session_id: str, after_seq: int = 0) -> AsyncEventStream:
        """A session's events after ``after_seq``, live; resumes by itself."""
        return AsyncEventStream(self, StreamState(session_id, last_seq=after_seq), None)

    async def _open(self, state: StreamState, request: pb.RunRequest | None) -> Any:
        if request is not None and not state.reconnects:
            return self._stub.Run(request, metadata=self._metadata)
        start_seq = None
        if state.run_id and not state.last_seq:
            try:
                start_seq = (await self.get_run(state.run_id)).start_seq
            except errors.NotFound:  # it never started: start it now
                assert request is not None
                return self._stub.Run(request, metadata=self._metadata)
        subscribe = state.resume_request(start_seq)
        return self._stub.Subscribe(subscribe, metadata=self._metadata)

    async def _unary(self, method: Any, request: object) -> Any:
        try:
            return await method(request, metadata=self._metadata)
        except grpc.RpcError as error:
            raise errors.from_rpc_error(error) from None


class AsyncEventStream:
    """The events of a run or a subscription: ``async for`` it."""

    def __init__(
        self, client: AsyncClient, state: StreamState, request: pb.RunRequest | None
    ) -> None:
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

    async def __aiter__(self) -> AsyncIterator[pb.Event]:
        state, deadline = self._state, None
        while True:
            call = None
            try:
                call = await self._client._open(state, self._request)
                async for event in call:
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
                await asyncio.sleep(state.next_backoff())
            finally:
                if call is not None:
                    call.cancel()
