"""The event streams clients hold open: counted for the engine and per principal, within
limits.

Each stream a client holds open takes a slot before its first event and gives it back when
it ends, however it ends (finished, cut, cancelled, refused): ``AgentEngine``'s ``Run`` and
``Subscribe``, A2A's ``SendStreamingMessage`` and ``SubscribeToTask``. The facade's streams
(``/agentik`` events, AG-UI runs, A2A over HTTP) are those calls, made with the client's own
credentials, so they count for the client's principal here.

A stream costs little while its client reads: ~7 KB. One whose client does not read holds
what it was about to send — one event's worth, at most ``max_event_bytes``, as objects, as
protobuf and in gRPC's send buffer: ~1.5 MB with events of 450 KB — for as long as the
client stays connected (``docs/reliability.md``; past ``[engine] write_timeout`` a stream
whose write waits is cut and no longer followed, but keeps its slot until gRPC lets go of
what it holds for the client). So the number of streams is bounded too:
900 such streams of one token took an engine from 190 MB to 1.4 GB before. Over the
engine's limit a stream is ``Overloaded``; over the caller's own, ``RateLimited``; both
name the setting.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from engine_service.core.errors import Overloaded, RateLimited

__all__ = ["StreamSlots"]

RETRY_AFTER = 1
"""Seconds a refused stream is told to wait: streams end all the time."""


class StreamSlots:
    """The streams open on one engine process, in all and by principal."""

    def __init__(self, most: int, per_caller: int = 0) -> None:
        """``most``: streams open at once in all (``[engine] max_streams``); ``per_caller``:
        by one principal (``[auth] max_streams_per_caller``), 0: no limit of its own."""
        self.most = most
        self.per_caller = per_caller
        self._open = 0
        self._by_caller: Counter[str] = Counter()

    def __len__(self) -> int:
        return self._open

    def held(self, principal: str) -> int:
        """Streams ``principal`` holds open."""
        return self._by_caller[principal]

    def take(self, principal: str, *, run: bool = False) -> Callable[[], None]:
        """A slot for one more stream of ``principal``, and the function that gives it back
        (once, however often it is called); ``Overloaded`` or ``RateLimited`` naming the
        setting when there is none. ``run``: the stream of a run it starts, which the
        engine's run slots bound already: it counts, but the engine-wide limit does not
        refuse it (streams that only follow cannot crowd out every run)."""
        if self._open >= self.most and not run:
            raise Overloaded(
                f"the engine has {self.most:,} event streams open, the most [engine] "
                "max_streams (AGENTIK_MAX_STREAMS) allows; retry in a moment"
            )
        held = self._by_caller[principal]
        if self.per_caller and held >= self.per_caller:
            raise RateLimited(
                f"you ({principal}) have {held:,} event streams open, the most [auth] "
                "max_streams_per_caller (AGENTIK_MAX_STREAMS_PER_CALLER) allows; close one "
                "(or read it to its end) first",
                retry_after=RETRY_AFTER,
            )
        self._open += 1
        self._by_caller[principal] += 1
        given_back = False

        def give_back() -> None:
            nonlocal given_back
            if given_back:
                return
            given_back = True
            self._open -= 1
            self._by_caller[principal] -= 1
            if self._by_caller[principal] <= 0:
                del self._by_caller[principal]

        return give_back
