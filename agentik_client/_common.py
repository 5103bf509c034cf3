"""What the sync and the async client share: requests, metadata, resuming a stream."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import grpc

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik_client import errors

TERMINAL = frozenset({"run_finished", "run_error"})
"""The event kinds that end a run."""
DEFAULT_TARGET = "127.0.0.1:50051"
FIRST_BACKOFF = 0.05
MAX_BACKOFF = 1.0


def metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),) if token else ()


def run_request(
    session_id: str,
    text: str | None,
    *,
    messages: list[pb.Message] | None = None,
    run_id: str | None = None,
    create_session: bool = False,
) -> pb.RunRequest:
    """A turn: ``text`` as one user message, or ``messages``; a run id of the client's own,
    so a broken call can be told apart from one that never started."""
    if text is not None:
        part = pb.ContentPart(text=pb.TextPart(text=text))
        messages = [*(messages or []), pb.Message(role=pb.ROLE_USER, content=[part])]
    return pb.RunRequest(
        session_id=session_id,
        run_id=run_id or uuid.uuid4().hex,
        messages=messages or [],
        create_session=create_session,
    )


def as_error(caught: grpc.RpcError | errors.AgentikError) -> errors.AgentikError:
    return errors.from_rpc_error(caught) if isinstance(caught, grpc.RpcError) else caught


def lost(state: StreamState, error: errors.AgentikError) -> errors.ConnectionLost:
    """What a stream raises when it could not be resumed in time."""
    return errors.ConnectionLost(
        f"the stream of session {state.session_id!r} broke after seq {state.last_seq} and "
        f"could not be resumed: {error.message}",
        status=grpc.StatusCode.UNAVAILABLE,
    )


@dataclass
class StreamState:
    """Where a stream of one session stands: the last seq delivered and, for a run, its id."""

    session_id: str
    run_id: str = ""
    last_seq: int = 0
    reconnects: int = 0
    backoff: float = field(default=FIRST_BACKOFF)

    def accept(self, event: pb.Event) -> bool:
        """Whether to deliver ``event``: each seq once, in order."""
        if event.seq <= self.last_seq:
            return False
        self.last_seq = event.seq
        self.backoff = FIRST_BACKOFF
        return True

    def ends(self, event: pb.Event) -> bool:
        return (
            bool(self.run_id)
            and event.run_id == self.run_id
            and event.WhichOneof("kind") in TERMINAL
        )

    def next_backoff(self) -> float:
        wait, self.backoff = self.backoff, min(self.backoff * 2, MAX_BACKOFF)
        self.reconnects += 1
        return wait

    def resume_request(self, start_seq: int | None) -> pb.SubscribeRequest:
        """Subscribe after the last seq delivered (or before the run's first event when none
        was), ending once the session is idle: a run that ended meanwhile is replayed."""
        after = self.last_seq if self.last_seq or start_seq is None else start_seq - 1
        return pb.SubscribeRequest(
            session_id=self.session_id, after_seq=after, until_idle=bool(self.run_id)
        )
