"""What a client received, counted against what the store holds: lost and duplicated ids.

A :class:`Ledger` is one logical stream of a conversation as a client sees it, over all the
HTTP responses it took (the first request, then a ``GET .../events`` with ``Last-Event-ID``
after every drop). :func:`follow` reads one run to its terminal event that way.
:func:`store_view` fetches, afterwards, the two references a ledger is held against: the
facade's full replay (``GET .../events?after=0&until_idle=true``) and the engine's own event
list over gRPC, whose seqs must run 1, 2, 3 ... without a gap or a repeat. :func:`audit`
compares them.

Used by the fault tests in this package and by ``bench.soak``.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import grpc
import httpx

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from tests.web.sse_frames import Frame, SseParser

__all__ = [
    "SKIPPED_BY_AGENTIK",
    "TERMINAL",
    "Audit",
    "Connection",
    "Ledger",
    "StoreView",
    "StreamRefused",
    "StreamTimeout",
    "audit",
    "follow",
    "poll",
    "read_once",
    "resume_request",
    "send_request",
    "store_view",
]

TERMINAL: Final = frozenset({"end", "error", "interrupted"})
"""``/agentik`` events that end a run."""

SKIPPED_BY_AGENTIK: Final = frozenset(
    {
        "run_started",
        "step_started",
        "step_finished",
        "text_message_end",
        "reasoning_message_start",
        "reasoning_message_end",
        "reasoning_end",
        "messages_snapshot",
        "raw",
    }
)
"""Engine event kinds ``/agentik`` has no event for (its contract: their seq is consumed)."""

_BACKOFF: Final = (0.05, 0.1, 0.2, 0.4)
"""Pauses between attempts that got no response (the facade down or restarting), seconds."""


class StreamTimeout(AssertionError):
    """A logical stream did not reach its run's end within its bound."""


class StreamRefused(AssertionError):
    """A request got an HTTP error that retrying will not cure (e.g. 404, 409 busy)."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}: {body[:300]!r}")
        self.status = status
        self.body = body


@dataclass
class Connection:
    """One HTTP response of a logical stream and how it ended."""

    path: str
    frames: int = 0
    ended: str = ""
    """``terminal``, ``eof`` (at a frame boundary), ``eof mid-frame``, ``broken: <error>``
    or ``error frame: <data>`` (the facade's id-less error frame: its engine call broke)."""


@dataclass
class Ledger:
    """Everything one logical stream of ``conversation_id`` received, in order."""

    conversation_id: str
    frames: list[Frame] = field(default_factory=list)
    connections: list[Connection] = field(default_factory=list)
    failed_attempts: int = 0
    """Requests that got no response (refused, reset before the headers, HTTP 5xx)."""

    @property
    def ids(self) -> list[int]:
        return [f.id for f in self.frames if f.id is not None]

    @property
    def last_id(self) -> int:
        ids = self.ids
        return ids[-1] if ids else 0

    @property
    def resumes(self) -> int:
        """Responses after the first: the reconnects that got an answer."""
        return max(0, len(self.connections) - 1)

    def count(self, name: str) -> int:
        return sum(1 for f in self.frames if f.type == name)

    def duplicated(self) -> list[int]:
        return sorted(i for i, n in Counter(self.ids).items() if n > 1)

    def text(self) -> str:
        return "".join(
            str((f.data or {}).get("text", "")) for f in self.frames if f.type == "append_text"
        )


def send_request(conversation_id: str, text: str) -> tuple[str, str, dict[str, Any] | None]:
    return "POST", f"/agentik/conversations/{conversation_id}/send", {"text": text}


def resume_request(conversation_id: str) -> tuple[str, str, dict[str, Any] | None]:
    return "GET", f"/agentik/conversations/{conversation_id}/events?until_idle=true", None


async def poll(condition: Callable[[], bool | Awaitable[bool]], what: str, within: float) -> None:
    """Wait until ``condition`` holds, looking every 50 ms; fail after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        held = condition()
        if not isinstance(held, bool):
            held = await held
        if held:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within:.0f} s waiting for {what}")
        await asyncio.sleep(0.05)


async def follow(
    client: httpx.AsyncClient,
    ledger: Ledger,
    first: tuple[str, str, dict[str, Any] | None] | None,
    within: float,
    *,
    idle_ends_turn: bool = False,
) -> bool:
    """Read one run of ``ledger``'s conversation to its terminal event, resuming after drops.

    ``first`` is the opening request (a ``send``, or ``GET .../events``); None resumes at
    once. After a connection ends without the terminal event the stream resumes with
    ``GET .../events?until_idle=true`` and ``Last-Event-ID: <last id received>``. True once
    the terminal event arrived. With ``idle_ends_turn`` a resume that ends cleanly without
    new events means the conversation is idle with nothing more to come: False (a send that
    never reached the engine). Without it such an end is taken for a draining facade and the
    stream resumes again. Raises :class:`StreamTimeout` after ``within`` seconds.
    """
    deadline = time.monotonic() + within
    request = first or resume_request(ledger.conversation_id)
    failures = 0
    while True:
        if time.monotonic() > deadline:
            raise StreamTimeout(
                f"{ledger.conversation_id}: no terminal event in {within:.0f} s; {_summary(ledger)}"
            )
        method, path, body = request
        headers = {} if request is first else {"Last-Event-ID": str(ledger.last_id)}
        before = len(ledger.frames)
        outcome = await _one_response(client, ledger, (method, path, body), headers, deadline)
        if outcome == "terminal":
            return True
        if outcome == "no response":
            await asyncio.sleep(_BACKOFF[min(failures, len(_BACKOFF) - 1)])
            failures += 1
        else:
            failures = 0
            nothing_new = outcome == "eof" and len(ledger.frames) == before
            if idle_ends_turn and request is not first and nothing_new:
                return False
        request = resume_request(ledger.conversation_id)


async def _one_response(
    client: httpx.AsyncClient,
    ledger: Ledger,
    request: tuple[str, str, dict[str, Any] | None],
    headers: dict[str, str],
    deadline: float,
) -> str:
    """Read one response into ``ledger``: ``terminal``, ``eof``, ``broken`` or ``no response``."""
    method, path, body = request
    connection: Connection | None = None
    timeout = httpx.Timeout(max(1.0, deadline - time.monotonic()))
    try:
        async with client.stream(
            method, path, json=body, headers=headers, timeout=timeout
        ) as response:
            if response.status_code >= 500:
                await response.aread()
                ledger.failed_attempts += 1
                return "no response"
            if response.status_code != 200:
                raise StreamRefused(response.status_code, await response.aread())
            connection = Connection(path)
            ledger.connections.append(connection)
            parser = SseParser()
            async for chunk in response.aiter_raw():
                for frame in parser.feed(chunk):
                    if frame.data is None:
                        continue  # retry:, heartbeats
                    if frame.id is None:
                        connection.ended = f"error frame: {frame.data}"
                        return "broken"
                    ledger.frames.append(frame)
                    connection.frames += 1
                    if frame.type in TERMINAL:
                        connection.ended = "terminal"
                        return "terminal"
                if time.monotonic() > deadline:
                    connection.ended = "timed out"
                    return "broken"
            connection.ended = "eof mid-frame" if parser.pending else "eof"
            return "eof"
    except httpx.TransportError as exc:
        if connection is None:
            ledger.failed_attempts += 1
            return "no response"
        connection.ended = f"broken: {type(exc).__name__}"
        return "broken"


async def read_once(
    client: httpx.AsyncClient, method: str, path: str, within: float, **kwargs: Any
) -> list[Frame]:
    """Every event frame of one response read to its end; it must end at a frame boundary."""
    frames: list[Frame] = []
    parser = SseParser()
    async with client.stream(method, path, timeout=httpx.Timeout(within), **kwargs) as response:
        assert response.status_code == 200, await response.aread()
        deadline = time.monotonic() + within
        async for chunk in response.aiter_raw():
            frames += (f for f in parser.feed(chunk) if f.data is not None)
            assert time.monotonic() < deadline, f"{path} did not end within {within:.0f} s"
    assert parser.pending == b"", f"{path} ended mid-frame"
    return frames


def _summary(ledger: Ledger) -> str:
    ends = [c.ended for c in ledger.connections]
    return (
        f"{len(ledger.frames)} frames, last id {ledger.last_id}, connections {ends}, "
        f"{ledger.failed_attempts} failed attempts"
    )


@dataclass
class StoreView:
    """A conversation as stored, fetched after the fact."""

    conversation_id: str
    replay: list[Frame]
    """``GET /agentik/conversations/{id}/events?after=0&until_idle=true``."""
    engine: list[tuple[int, str]]
    """(seq, kind) of every event, from the engine's ``Subscribe`` over gRPC."""

    @property
    def replay_ids(self) -> list[int]:
        return [f.id for f in self.replay if f.id is not None]

    @property
    def expected_ids(self) -> list[int]:
        """The seqs ``/agentik`` has an event for, by the engine's own list."""
        return [seq for seq, kind in self.engine if kind not in SKIPPED_BY_AGENTIK]

    def problems(self, *, crashed: bool = False) -> list[str]:
        """What is wrong with the references themselves (gaps, repeats, a lossy replay).

        After an engine crash (``crashed``) the seqs may jump forward once per crashed run
        (the ids the dead engine reserved are skipped); they must still only grow.
        """
        out = []
        seqs = [seq for seq, _ in self.engine]
        if crashed:
            if seqs != sorted(set(seqs)):
                out.append(f"engine seqs do not grow: {_runs(seqs)}")
        elif seqs != list(range(1, len(seqs) + 1)):
            out.append(f"engine seqs are not 1..{len(seqs)}: {_runs(seqs)}")
        if self.replay_ids != self.expected_ids:
            missing = sorted(set(self.expected_ids) - set(self.replay_ids))
            extra = sorted(Counter(self.replay_ids) - Counter(self.expected_ids))
            out.append(f"the replay lacks ids {missing[:20]} / has extra or repeated {extra[:20]}")
        return out

    def assistant_text(self) -> str:
        """The text of the last stored assistant ``message`` event."""
        for frame in reversed(self.replay):
            message = (frame.data or {}).get("message") if frame.type == "message" else None
            if message and message["role"] == "assistant":
                return "".join(p.get("text", "") for p in message["content"])
        return ""


def _runs(seqs: list[int]) -> str:
    """``1-150, 152-300``: a seq list folded into runs, for messages."""
    parts: list[str] = []
    for seq in seqs:
        if parts and seq == int(parts[-1].rpartition("-")[2]) + 1:
            parts[-1] = f"{parts[-1].partition('-')[0]}-{seq}"
        else:
            parts.append(str(seq))
    return ", ".join(parts[:20])


def engine_events(grpc_target: str, conversation_id: str, within: float) -> list[tuple[int, str]]:
    """(seq, kind) of every stored event of a conversation, straight from the engine."""
    with grpc.insecure_channel(grpc_target) as channel:
        stub = pb_grpc.AgentEngineStub(channel)
        stream = stub.Subscribe(
            pb.SubscribeRequest(session_id=conversation_id, after_seq=0, until_idle=True),
            timeout=within,
        )
        return [(event.seq, event.WhichOneof("kind") or "") for event in stream]


async def store_view(
    client: httpx.AsyncClient, grpc_target: str, conversation_id: str, within: float
) -> StoreView:
    replay = await read_once(
        client,
        "GET",
        f"/agentik/conversations/{conversation_id}/events?after=0&until_idle=true",
        within,
    )
    engine = await asyncio.to_thread(engine_events, grpc_target, conversation_id, within)
    return StoreView(conversation_id, replay, engine)


@dataclass
class Audit:
    """Lost, duplicated and otherwise wrong ids over many ledgers."""

    streams: int = 0
    received: int = 0
    lost: dict[str, list[int]] = field(default_factory=dict)
    duplicated: dict[str, list[int]] = field(default_factory=dict)
    unknown: dict[str, list[int]] = field(default_factory=dict)
    """Ids a client got that the store does not have."""
    differing: dict[str, list[int]] = field(default_factory=dict)
    """Ids whose data differ from the stored event's."""
    store_problems: dict[str, list[str]] = field(default_factory=dict)
    skipped: dict[str, list[int]] = field(default_factory=dict)
    """After an engine crash: ids a client saw live that were never stored (and never
    given to another event)."""

    @property
    def lost_count(self) -> int:
        return sum(len(v) for v in self.lost.values())

    @property
    def duplicated_count(self) -> int:
        return sum(len(v) for v in self.duplicated.values())

    def clean(self) -> bool:
        return not (
            self.lost or self.duplicated or self.unknown or self.differing or self.store_problems
        )

    def __str__(self) -> str:
        def first(items: dict[str, list[Any]]) -> dict[str, list[Any]]:
            return {k[:8]: v[:10] for k, v in list(items.items())[:5]}

        return (
            f"{self.streams} streams, {self.received} events received: "
            f"{self.lost_count} lost in {len(self.lost)} streams {first(self.lost)}, "
            f"{self.duplicated_count} duplicated {first(self.duplicated)}, "
            f"unknown {first(self.unknown)}, differing {first(self.differing)}, "
            f"store problems {first(self.store_problems)}"
        )


def audit(
    ledgers: Iterable[tuple[str, Ledger]], views: dict[str, StoreView], *, crashed: bool = False
) -> Audit:
    """Hold each named ledger against its conversation's store view: it must hold every
    ``/agentik`` id of its conversation exactly once, each with the stored event's data."""
    result = Audit()
    checked_views: set[str] = set()
    for name, ledger in ledgers:
        view = views[ledger.conversation_id]
        if ledger.conversation_id not in checked_views:
            checked_views.add(ledger.conversation_id)
            if problems := view.problems(crashed=crashed):
                result.store_problems[ledger.conversation_id] = problems
        result.streams += 1
        ids = ledger.ids
        result.received += len(ids)
        if lost := sorted(set(view.expected_ids) - set(ids)):
            result.lost[name] = lost
        if duplicated := ledger.duplicated():
            result.duplicated[name] = duplicated
        unknown = sorted(set(ids) - set(view.expected_ids))
        if crashed:
            # Seen live but not stored before the crash: allowed, as long as no stored
            # event has such an id (it was skipped, never given to another event).
            engine_seqs = {seq for seq, _ in view.engine}
            if skipped := [i for i in unknown if i not in engine_seqs]:
                result.skipped[name] = skipped
            unknown = [i for i in unknown if i in engine_seqs]
        if unknown:
            result.unknown[name] = unknown
        stored = {f.id: f.data for f in view.replay}
        if differing := [f.id for f in ledger.frames if f.id in stored and stored[f.id] != f.data]:
            result.differing[name] = [i for i in differing if i is not None]
    return result
